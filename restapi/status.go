package restapi

import (
	"slices"
	"strconv"
	"time"

	"github.com/llbproject/llb/rule"
)

// StatusView is GET …/status: LoxiLB's {adminStateUp, operatingStatus,
// lastUpdated}, plus llb's detail fields (omitted when empty).
type StatusView struct {
	// AdminStateUp is the effective adminStateUp.
	AdminStateUp bool `json:"adminStateUp"`
	// OperatingStatus is ONLINE, OFFLINE, DEGRADED, ERROR or NO_MONITOR.
	OperatingStatus OperatingStatus `json:"operatingStatus"`
	// LastUpdated is when the rule's configuration last changed, RFC 3339 UTC.
	LastUpdated string `json:"lastUpdated"`
	// Detail is the data plane's note on the rule (llb).
	Detail string `json:"detail,omitempty"`
	// ApplyError is the last error the data plane returned applying the rule (llb).
	ApplyError string `json:"applyError,omitempty"`
	// ListenError is the data plane's listener bind error (llb).
	ListenError string `json:"listenError,omitempty"`
	// Endpoints are per-endpoint states in rule order (llb).
	Endpoints []EndpointStatusView `json:"endpoints,omitempty"`
}

// EndpointStatusView is one endpoint in StatusView (all llb's).
type EndpointStatusView struct {
	// EndpointIP is the endpoint address.
	EndpointIP string `json:"endpointIP"`
	// TargetPort is the endpoint port.
	TargetPort int `json:"targetPort"`
	// EpIdx is the endpoint's index in the rule (LoxiLB's ep_idx: the KV
	// inventory and controller routes and the metrics name endpoints so).
	EpIdx int `json:"ep_idx"`
	// Role is the P/D role: "none", "prefill" or "decode".
	Role string `json:"role"`
	// State is "active" or "inactive".
	State string `json:"state"`
	// Detail is the data plane's note on the endpoint.
	Detail string `json:"detail,omitempty"`
	// Probe is the health probe's verdict ("up", "down", "off"), separate
	// from the breaker; absent when the data plane does not say.
	Probe string `json:"probe,omitempty"`
	// Breaker is the circuit-breaker state, when the rule has one.
	Breaker string `json:"breaker,omitempty"`
	// InFlight is the in-flight request count (always present).
	InFlight int `json:"inFlight"`
	// Parked is the admission gate's queue length (always present).
	Parked int `json:"parked"`
	// KVCapacityBlocks is the engine's KV-block capacity; absent while
	// unknown.
	KVCapacityBlocks int64 `json:"kvCapacityBlocks,omitempty"`
	// InventoryBlocks is the mirrored KV inventory size; present for every
	// endpoint whose KV events are mirrored (even at 0), absent otherwise.
	InventoryBlocks *int `json:"inventoryBlocks,omitempty"`
	// OffloadBlocks is how many blocks the mirror holds in the engine's
	// CPU offload tier; absent when none.
	OffloadBlocks int `json:"offloadBlocks,omitempty"`
	// KVIgnored lists, by reason, the KV events and blocks the endpoint's
	// feed and mirror did not apply; absent when everything was applied.
	KVIgnored []KVIgnored `json:"kvIgnored,omitempty"`
	// KVPrediction compares llb's cached-token predictions with what the
	// engine reports; absent when the endpoint is not mirrored.
	KVPrediction *KVPrediction `json:"kvPrediction,omitempty"`
	// TTFTPrediction compares llb's predicted times to first token with
	// the measured ones; absent for decode endpoints.
	TTFTPrediction *TTFTPrediction `json:"ttftPrediction,omitempty"`
	// Controller is the external controller's instruction; absent without
	// a controller-capable data plane.
	Controller *ControllerStatus `json:"controller,omitempty"`
}

// StatsView is GET …/stats, LoxiLB's four counters.
type StatsView struct {
	// ActiveConnections is the current client connection count.
	ActiveConnections uint64 `json:"activeConnections"`
	// BytesIn counts bytes received from clients.
	BytesIn uint64 `json:"bytesIn"`
	// BytesOut counts bytes sent to clients.
	BytesOut uint64 `json:"bytesOut"`
	// TotalConnections counts client connections.
	TotalConnections uint64 `json:"totalConnections"`
}

// endpointStates pairs each rule endpoint with its reported status, by
// address, duplicates pairwise in order; an endpoint without one is inactive.
func endpointStates(r *rule.Rule, st RuleStatus) []EndpointStatus {
	used := make([]bool, len(st.Endpoints))
	out := make([]EndpointStatus, len(r.Effective.Endpoints))
	for i, ep := range r.Effective.Endpoints {
		out[i] = EndpointStatus{Addr: ep.Addr, Detail: "no status from the data plane"}
		for j, s := range st.Endpoints {
			if !used[j] && s.Addr == ep.Addr {
				used[j] = true
				out[i] = s
				break
			}
		}
	}
	return out
}

func stateWord(active bool) string {
	if active {
		return "active"
	}
	return "inactive"
}

// operatingStatus derives a rule's status as LoxiLB does (admin down →
// OFFLINE; monitor off → NO_MONITOR; no endpoints → OFFLINE; all active →
// ONLINE; none → OFFLINE; else DEGRADED), with llb's additions: an apply or
// listen error is ERROR, a data-plane override wins over the derivation, and
// a data plane that probes by itself (Monitored) is never NO_MONITOR.
func operatingStatus(r *rule.Rule, st RuleStatus, eps []EndpointStatus, applyErr string) OperatingStatus {
	switch {
	case !r.Effective.AdminUp:
		return OperatingOffline
	case applyErr != "" || st.ListenErr != "":
		return OperatingError
	case st.Operating != "":
		return st.Operating
	case !r.Entry.ServiceArguments.Monitor && !st.Monitored:
		return OperatingNoMonitor
	case len(eps) == 0:
		return OperatingOffline
	}
	up := 0
	for _, e := range eps {
		if e.Active {
			up++
		}
	}
	switch up {
	case len(eps):
		return OperatingOnline
	case 0:
		return OperatingOffline
	}
	return OperatingDegraded
}

// entryView is a rule as GET returns it: the stored entry with each
// endpoint's state and counter ("<requests>:<bytes>") and the effective
// adminStateUp.
//
// The view is a shallow copy: it shares the rule's immutable nested data and
// replaces only what it changes, so it must be treated as read-only.
func entryView(r *rule.Rule, st RuleStatus) rule.LoadbalanceEntry {
	v := r.Entry
	sa := *r.Entry.ServiceArguments
	sa.AdminStateUp = new(r.Effective.AdminUp)
	v.ServiceArguments = &sa
	v.Endpoints = slices.Clone(r.Entry.Endpoints)
	for i, s := range endpointStates(r, st) {
		v.Endpoints[i].State = stateWord(s.Active)
		v.Endpoints[i].Counter = strconv.FormatUint(s.Requests, 10) + ":" + strconv.FormatUint(s.Bytes, 10)
	}
	return v
}

// statusView is GET …/status for one rule.
func statusView(r *rule.Rule, updated time.Time, st RuleStatus, applyErr string) StatusView {
	eps := endpointStates(r, st)
	v := StatusView{
		AdminStateUp:    r.Effective.AdminUp,
		OperatingStatus: operatingStatus(r, st, eps, applyErr),
		LastUpdated:     updated.UTC().Format(time.RFC3339),
		Detail:          st.Detail,
		ApplyError:      applyErr,
		ListenError:     st.ListenErr,
	}
	for i, e := range eps {
		ev := EndpointStatusView{
			EndpointIP:       r.Effective.Endpoints[i].Addr.Addr().String(),
			TargetPort:       int(r.Effective.Endpoints[i].Addr.Port()),
			EpIdx:            i,
			Role:             r.Effective.Endpoints[i].Role.String(),
			State:            stateWord(e.Active),
			Detail:           e.Detail,
			Probe:            e.Probe,
			Breaker:          e.Breaker,
			InFlight:         e.InFlight,
			Parked:           e.Parked,
			KVCapacityBlocks: e.KVCapacityBlocks,
			OffloadBlocks:    e.OffloadBlocks,
			KVIgnored:        e.KVIgnored,
			KVPrediction:     e.KVPrediction,
			TTFTPrediction:   e.TTFTPrediction,
			Controller:       e.Controller,
		}
		if e.Inventory || e.InventoryBlocks > 0 {
			ev.InventoryBlocks = new(e.InventoryBlocks)
		}
		v.Endpoints = append(v.Endpoints, ev)
	}
	return v
}

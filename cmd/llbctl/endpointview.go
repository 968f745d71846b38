package main

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rule"
)

// endpointView is one row of "get endpoints": the configured endpoint (GET by
// key) joined with its live state (GET …/status). It is llbctl's own output
// shape for -o json.
type endpointView struct {
	// Idx is the endpoint's index in the rule (ep_idx in metrics and the
	// KV inventory and controller routes).
	Idx int `json:"idx"`
	// EndpointIP and TargetPort address the endpoint.
	EndpointIP string `json:"endpointIP"`
	TargetPort int64  `json:"targetPort"`
	// Role is none, prefill or decode.
	Role string `json:"role"`
	// Weight is the configured weight.
	Weight int64 `json:"weight"`
	// NixlPort is the NIXL side-channel port (0: the target port).
	NixlPort int64 `json:"nixlPort,omitempty"`
	// State is active or inactive (unknown without a status).
	State string `json:"state"`
	// Probe is the health probe's verdict (up, down, off); empty when llbd
	// does not say.
	Probe string `json:"probe,omitempty"`
	// Breaker is the circuit-breaker state; empty when the rule has none.
	Breaker string `json:"breaker,omitempty"`
	// InFlight is the data plane's in-flight request count.
	InFlight int `json:"inFlight"`
	// Parked is the admission gate's queue length.
	Parked int `json:"parked"`
	// KVCapacityBlocks is the engine's KV-block capacity; 0 unknown.
	KVCapacityBlocks int64 `json:"kvCapacityBlocks,omitempty"`
	// InventoryBlocks is the mirrored KV inventory size; nil when the
	// endpoint's KV events are not mirrored.
	InventoryBlocks *int `json:"inventoryBlocks,omitempty"`
	// OffloadBlocks is how many blocks the mirror holds in the engine's CPU
	// offload tier.
	OffloadBlocks int `json:"offloadBlocks,omitempty"`
	// KVIgnored lists the KV events and blocks llbd did not apply, by reason.
	KVIgnored []restapi.KVIgnored `json:"kvIgnored,omitempty"`
	// KVPrediction compares llbd's cached-token predictions with what the
	// engine reports.
	KVPrediction *restapi.KVPrediction `json:"kvPrediction,omitempty"`
	// Controller is the external controller's instruction; nil when llbd
	// reports none.
	Controller *restapi.ControllerStatus `json:"controller,omitempty"`
	// Counter is "<requests>:<bytes>".
	Counter string `json:"counter,omitempty"`
	// Detail is the data plane's note.
	Detail string `json:"detail,omitempty"`
}

func (a *app) getEndpointsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "endpoints <ip> <port> <proto>",
		Aliases: []string{"endpoint", "ep", "eps"},
		Short:   "Show a rule's endpoints: health (probe, breaker), load, KV inventory and capacity, controller state",
		Example: `  llbctl get endpoints 10.10.10.254 2020 tcp`,
		Args:    usageArgs(cobra.ExactArgs(3), "llbctl get endpoints <ip> <port> <proto>"),
		RunE: func(_ *cobra.Command, args []string) error {
			ref, err := parseRuleRef(args)
			if err != nil {
				return err
			}
			return a.showEndpoints(ref)
		},
	}
}

// showEndpoints joins the rule's endpoints with their status.
func (a *app) showEndpoints(ref ruleRef) error {
	notFound := errorOpts{notFound: "no rule on " + ref.String()}
	body, err := a.get("get endpoints", ref.path(), nil, notFound)
	if err != nil {
		return err
	}
	var e rule.LoadbalanceEntry
	if err := decode("get endpoints", body, &e); err != nil {
		return err
	}
	body, err = a.get("get endpoints", ref.path()+"/status", nil, notFound)
	if err != nil {
		return err
	}
	var st restapi.StatusView
	if err := decode("get endpoints", body, &st); err != nil {
		return err
	}
	views := joinEndpoints(e.Endpoints, st.Endpoints)
	if a.opts.output == outputJSON {
		return writeValue(a.stdout, views)
	}
	t := newTable("IDX", "ENDPOINT", "ROLE", "WEIGHT", "NIXL", "STATE", "PROBE", "BREAKER", "IN-FLIGHT", "PARKED",
		"KV BLOCKS", "KV CAPACITY", "KV IGNORED", "KV PREDICTED M/O/U", "CONTROLLER", "COUNTER", "DETAIL")
	var notes []string
	for _, v := range views {
		nixl := "-"
		if v.NixlPort != 0 {
			nixl = strconv.FormatInt(v.NixlPort, 10)
		}
		capacity := "-"
		if v.KVCapacityBlocks > 0 {
			capacity = strconv.FormatInt(v.KVCapacityBlocks, 10)
		}
		t.add(strconv.Itoa(v.Idx), net.JoinHostPort(v.EndpointIP, strconv.FormatInt(v.TargetPort, 10)), v.Role,
			strconv.FormatInt(v.Weight, 10), nixl, v.State, orDash(v.Probe), orDash(v.Breaker), strconv.Itoa(v.InFlight),
			strconv.Itoa(v.Parked), kvBlocksCell(v.InventoryBlocks, v.OffloadBlocks), capacity, restapi.FormatKVIgnored(v.KVIgnored),
			restapi.FormatKVPrediction(v.KVPrediction), controllerCell(v.Controller), orDash(v.Counter), orDash(v.Detail))
		notes = append(notes, kvNotes(v.Idx, v.KVIgnored, v.KVPrediction)...)
	}
	if err := t.render(a.stdout); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(a.stdout, sanitize(n))
	}
	return nil
}

// kvBlocksCell shows an inventory size with its CPU-offloaded share:
// "120", "120+40cpu"; "-" when the endpoint has none.
func kvBlocksCell(n *int, offload int) string {
	if n == nil {
		return "-"
	}
	if offload > 0 {
		return strconv.Itoa(*n) + "+" + strconv.Itoa(offload) + "cpu"
	}
	return strconv.Itoa(*n)
}

// kvNotes are the causes behind an endpoint's KV cells, one line each:
// what was not applied and why, and a prediction mismatch's likely cause.
func kvNotes(idx int, ign []restapi.KVIgnored, p *restapi.KVPrediction) []string {
	var out []string
	for _, g := range ign {
		if g.Cause != "" {
			out = append(out, fmt.Sprintf("endpoint %d kv ignored %s: %s", idx, g.Reason, g.Cause))
		}
	}
	if p != nil && p.State == restapi.PredictionMismatch {
		out = append(out, fmt.Sprintf("endpoint %d kv predictions disagree with the engine (%s): %s", idx, p.Cause, p.Detail))
	}
	return out
}

// blocksCell shows an inventory size, "-" when the endpoint has none.
func blocksCell(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}

// controllerCell shows a controller instruction compactly:
// "DRAINING w=40 e=7", "ACTIVE w=50 (eff 75) e=9 stale"; "-" for none.
func controllerCell(c *restapi.ControllerStatus) string {
	if c == nil || c.State == restapi.CtrlNone || c.State == "" {
		return "-"
	}
	s := fmt.Sprintf("%s w=%d", c.State, c.Weight)
	if c.EffectiveWeight != c.Weight {
		s += fmt.Sprintf(" (eff %d)", c.EffectiveWeight)
	}
	s += fmt.Sprintf(" e=%d", c.Epoch)
	if c.Stale {
		s += " stale"
	}
	return s
}

// joinEndpoints pairs each configured endpoint with its status by address,
// duplicates pairwise in order (as llbd pairs them). An endpoint without a
// status is shown as unknown.
func joinEndpoints(eps []rule.Endpoint, sts []restapi.EndpointStatusView) []endpointView {
	used := make([]bool, len(sts))
	out := make([]endpointView, len(eps))
	for i, ep := range eps {
		v := endpointView{Idx: i, Role: nameOf(roles, ep.EpRole, "role"), NixlPort: ep.NixlPort,
			State: "unknown", Counter: ep.Counter, Detail: "no status from llbd"}
		if ep.EndpointIP != nil {
			v.EndpointIP = *ep.EndpointIP
		}
		if ep.TargetPort != nil {
			v.TargetPort = *ep.TargetPort
		}
		if ep.Weight != nil {
			v.Weight = *ep.Weight
		}
		for j, s := range sts {
			if !used[j] && sameAddr(v.EndpointIP, v.TargetPort, s.EndpointIP, int64(s.TargetPort)) {
				used[j] = true
				v.State, v.Probe, v.Breaker, v.InFlight, v.Parked = s.State, s.Probe, s.Breaker, s.InFlight, s.Parked
				v.KVCapacityBlocks, v.InventoryBlocks, v.Controller, v.Detail = s.KVCapacityBlocks, s.InventoryBlocks, s.Controller, s.Detail
				v.OffloadBlocks, v.KVIgnored, v.KVPrediction = s.OffloadBlocks, s.KVIgnored, s.KVPrediction
				break
			}
		}
		out[i] = v
	}
	return out
}

// sameAddr compares two ip:port pairs, IPs in canonical form.
func sameAddr(ip1 string, port1 int64, ip2 string, port2 int64) bool {
	if port1 != port2 {
		return false
	}
	a, err1 := netip.ParseAddr(ip1)
	b, err2 := netip.ParseAddr(ip2)
	if err1 != nil || err2 != nil {
		return ip1 == ip2
	}
	return a.Unmap() == b.Unmap()
}

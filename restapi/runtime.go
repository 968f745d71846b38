package restapi

import (
	"context"
	"net/netip"
	"sync"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/rule"
)

// Runtime is the data plane as the REST layer sees it: the catalog hands it
// every accepted change in order, from one goroutine at a time, after the
// change is durable (catalog.Runtime), and the status views read its
// state.
//
// Apply errors (a VIP:port that cannot be bound, an endpoint that cannot be
// resolved, ...) do not fail the POST that caused them: the configuration is
// accepted and persisted, and the error is reported by GET …/status
// (operatingStatus ERROR, applyError). The same holds for errors reported
// later through RuleStatus.ListenErr.
//
// Further capabilities are optional interfaces a Runtime may also implement;
// the server type-asserts for them and mounts their routes only when
// present: DataPlaneNamer (GET /version), InventoryViewer (the KV inventory
// view) and ControllerRuntime (the external controller routes).
type Runtime interface {
	catalog.Runtime
	// Status reports the live state of rule k, or false if the data plane
	// does not know it. It must not block on the data path: callers are GET
	// handlers.
	Status(k rule.RuleKey) (RuleStatus, bool)
}

// DataPlaneNamer is an optional Runtime interface: its name is shown by
// GET /netlox/v1/version as "dataPlane".
type DataPlaneNamer interface {
	// DataPlaneName names the data plane, e.g. "actors".
	DataPlaneName() string
}

// OperatingStatus is a rule's Octavia-style operating status.
type OperatingStatus string

// Operating statuses, as LoxiLB's GET …/status reports them.
const (
	OperatingOnline    OperatingStatus = "ONLINE"
	OperatingOffline   OperatingStatus = "OFFLINE"
	OperatingDegraded  OperatingStatus = "DEGRADED"
	OperatingError     OperatingStatus = "ERROR"
	OperatingNoMonitor OperatingStatus = "NO_MONITOR"
)

// RuleStatus is the live state of one rule as the data plane reports it.
type RuleStatus struct {
	// Operating overrides the derived operating status when non-empty.
	// Leave it empty to let restapi derive it from the endpoint states the
	// way LoxiLB does.
	Operating OperatingStatus
	// Detail is a short human note on the rule's state.
	Detail string
	// Monitored is true when the data plane health-probes the endpoints
	// whatever the rule's monitor flag says (llb probes mode:4 endpoints by
	// default); the status is then derived from the endpoints, never
	// NO_MONITOR.
	Monitored bool
	// ListenErr is the error binding the rule's listener, if any; it makes
	// the operating status ERROR.
	ListenErr string
	// Endpoints are per-endpoint states, matched to the rule's endpoints by
	// Addr (pairwise in order for duplicates). A rule endpoint without a
	// status is reported inactive.
	Endpoints []EndpointStatus
	// Stats are the rule's traffic counters.
	Stats RuleStats
}

// EndpointStatus is the live state of one endpoint.
type EndpointStatus struct {
	// Addr is endpointIP:targetPort.
	Addr netip.AddrPort
	// Active is true when the endpoint is selectable (probe up, breaker not
	// open, not disabled by the controller).
	Active bool
	// Detail is a short human note, e.g. "probe failing", "breaker open".
	Detail string
	// Probe is the health probe's verdict, separate from the breaker:
	// ProbeUp, ProbeDown, or ProbeOff when the endpoint is not probed; ""
	// when the data plane does not say.
	Probe string
	// Breaker is the circuit-breaker state ("closed", "open", "half_open"); "" if none.
	Breaker string
	// InFlight is the data plane's in-flight request count for the endpoint.
	InFlight int
	// Parked is the number of requests the admission gate holds in the
	// endpoint's queue.
	Parked int
	// KVCapacityBlocks is the engine's KV-block capacity (num_gpu_blocks);
	// 0 when unknown.
	KVCapacityBlocks int64
	// Inventory is true when the data plane mirrors the endpoint's KV
	// events; InventoryBlocks is then meaningful even at 0.
	Inventory bool
	// InventoryBlocks is the size of the endpoint's mirrored KV inventory.
	InventoryBlocks int
	// OffloadBlocks is how many blocks the mirror holds in the engine's
	// CPU offload tier.
	OffloadBlocks int
	// KVIgnored lists the KV events and blocks not applied, by reason.
	KVIgnored []KVIgnored
	// KVPrediction is the cache-truth record; nil when the endpoint is not
	// mirrored.
	KVPrediction *KVPrediction
	// TTFTPrediction is the TTFT prediction record; nil for decode
	// endpoints.
	TTFTPrediction *TTFTPrediction
	// Controller is the external controller's instruction for the
	// endpoint; nil when the data plane has no controller (or did not
	// answer).
	Controller *ControllerStatus
	// Requests is the count of requests sent to the endpoint.
	Requests uint64
	// Bytes is the count of bytes exchanged with the endpoint.
	Bytes uint64
}

// Probe verdicts (EndpointStatus.Probe).
const (
	ProbeUp   = "up"
	ProbeDown = "down"
	ProbeOff  = "off"
)

// RuleStats are a rule's traffic counters (GET …/stats).
type RuleStats struct {
	// ActiveConnections is the current client connection count.
	ActiveConnections uint64
	// BytesIn counts bytes received from clients.
	BytesIn uint64
	// BytesOut counts bytes sent to clients.
	BytesOut uint64
	// TotalConnections counts client connections since the rule was applied.
	TotalConnections uint64
}

// NoDataPlane is the Runtime of a daemon running without a data plane: it
// remembers the rules it was given and reports every endpoint "inactive" with
// detail "no data plane", and every rule OFFLINE. It serves nothing. It exists
// so the control plane can run, persist and answer on its own (tests, config
// staging); it is never a stand-in for a working data plane.
//
// Safe for concurrent use.
type NoDataPlane struct {
	mu    sync.Mutex
	rules map[rule.RuleKey][]netip.AddrPort // guarded by mu
}

// NewNoDataPlane returns an empty NoDataPlane.
func NewNoDataPlane() *NoDataPlane {
	return &NoDataPlane{rules: make(map[rule.RuleKey][]netip.AddrPort)}
}

// Apply records r's endpoints.
func (n *NoDataPlane) Apply(_ context.Context, r rule.Rule) error {
	addrs := make([]netip.AddrPort, len(r.Effective.Endpoints))
	for i, ep := range r.Effective.Endpoints {
		addrs[i] = ep.Addr
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rules[r.Key] = addrs
	return nil
}

// Remove forgets rule k.
func (n *NoDataPlane) Remove(_ context.Context, k rule.RuleKey) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.rules, k)
	return nil
}

// Status reports rule k OFFLINE with every endpoint inactive.
func (n *NoDataPlane) Status(k rule.RuleKey) (RuleStatus, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	addrs, ok := n.rules[k]
	if !ok {
		return RuleStatus{}, false
	}
	st := RuleStatus{Operating: OperatingOffline, Detail: "no data plane attached"}
	for _, a := range addrs {
		st.Endpoints = append(st.Endpoints, EndpointStatus{Addr: a, Detail: "no data plane"})
	}
	return st, true
}

// DataPlaneName implements DataPlaneNamer.
func (n *NoDataPlane) DataPlaneName() string { return "none" }

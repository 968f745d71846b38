package actors

import (
	"errors"
	"fmt"
	"time"

	"github.com/llbproject/llb/ladder"
)

// EndpointStatus is one endpoint's live state as the router sees it.
type EndpointStatus struct {
	// Up is the probe state (true when not monitored).
	Up bool
	// Breaker is the circuit breaker state.
	Breaker BreakerState
	// Ctrl and CtrlWeight are the external controller's instruction.
	Ctrl       ladder.CtrlState
	CtrlWeight uint8
	// ActiveConns is llb's in-flight count on the endpoint.
	ActiveConns uint32
	// Parked is the endpoint's admission queue length.
	Parked uint32
	// Queued is the engine's scraped waiting-queue depth.
	Queued uint32
	// KVCapacityBlocks is the engine's num_gpu_blocks (0 unknown).
	KVCapacityBlocks uint32
	// InventoryBlocks is the mirrored inventory size last seen.
	InventoryBlocks uint32
	// Controller is the external controller's instruction and its
	// staleness (zero Updated: no controller has spoken).
	Controller CtrlStatus
	// PeerInFlight is the other replicas' in-flight count on the endpoint
	// as last published (cluster mode; 0 on a single node).
	PeerInFlight uint32
	// PeerExcluded is true while another replica excludes the endpoint
	// (its breaker open or half-open, or its probe down there).
	PeerExcluded bool
	// Prediction is the endpoint's cache-truth record (zero when its KV
	// events are not mirrored).
	Prediction PredictionStatus
	// TTFT is the endpoint's TTFT prediction record.
	TTFT TTFTPredictionStatus
}

// Available reports whether the endpoint can take new work.
func (e EndpointStatus) Available() bool {
	return e.Up && e.Breaker != BreakerOpen && e.Ctrl != ladder.CtrlDisabled && !e.PeerExcluded
}

// ServiceStatus is a point-in-time view of a service.
type ServiceStatus struct {
	Key       string
	At        time.Time
	Endpoints []EndpointStatus
	// InFlight is admitted requests not yet finished; Parked is requests
	// held by the admission gate.
	InFlight int
	Parked   int
	// Decisions counts decisions made; FanoutMissed the inventory/session
	// replies that missed their deadline; StaleReports the outcome reports
	// for unknown tickets (e.g. across a router restart).
	Decisions    uint64
	FanoutMissed uint64
	StaleReports uint64
	// Sessions is the live Tier-0 pin count; TrieEntries the Tier-1 trie's.
	Sessions    int64
	TrieEntries int
}

// status snapshots the core (router actor only).
func (c *routerCore) status() ServiceStatus {
	st := ServiceStatus{
		Key:          c.cfg.Rule.Key,
		At:           time.Now(),
		Endpoints:    make([]EndpointStatus, len(c.views)),
		InFlight:     len(c.tickets),
		Parked:       len(c.parked),
		Decisions:    c.stats.decisions,
		FanoutMissed: c.stats.missed,
		StaleReports: c.stats.staleTicket,
	}
	ctrl := c.ctrlStatus(st.At)
	for i := range c.views {
		v := &c.views[i]
		b := BreakerClosed
		switch {
		case v.BreakerOpen:
			b = BreakerOpen
		case c.halfOpen.Has(i):
			b = BreakerHalfOpen
		}
		st.Endpoints[i] = EndpointStatus{
			Up: !v.Down, Breaker: b, Ctrl: v.Ctrl, CtrlWeight: v.CtrlWeight,
			ActiveConns: v.ActiveConns - uint32(min(c.reserved[i], v.ActiveConns)), Parked: v.Parked,
			Queued: v.QueuedRequests, KVCapacityBlocks: v.KVCapacityBlocks, InventoryBlocks: v.InventoryBlocks,
			Controller: ctrl[i], Prediction: c.predictionStatus(i), TTFT: c.ttftStatus(i),
			PeerInFlight: c.peer.load[i], PeerExcluded: c.peer.excl.Has(i),
		}
	}
	if t := c.lad.Trie(); t != nil {
		st.TrieEntries = t.Len()
	}
	return st
}

// Status asks the router for a snapshot; ok is false when the service is
// stopped or the router did not answer in time.
func (svc *Service) Status(timeout time.Duration) (ServiceStatus, bool) {
	if svc.stopped.Load() {
		return ServiceStatus{}, false
	}
	reply := make(chan ServiceStatus, 1)
	svc.root.Send(svc.router, statusReq{reply: reply})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case st := <-reply:
		for i := range svc.sessionLen {
			st.Sessions += svc.sessionLen[i].Load()
		}
		return st, true
	case <-t.C:
		return ServiceStatus{}, false
	}
}

// ErrNoInventory is returned by Inventory for an endpoint without KV feeds.
var ErrNoInventory = errors.New("actors: endpoint has no KV inventory")

// Inventory returns a page of endpoint ep's mirrored block keys and its
// per-rank mirror and feed statistics, asking its inventory actor (not on
// the routing path; bounded by timeout).
func (svc *Service) Inventory(ep, offset, limit int, timeout time.Duration) (InventoryPage, error) {
	if svc.stopped.Load() {
		return InventoryPage{}, ErrStopped
	}
	if ep < 0 || ep >= len(svc.inventories) {
		return InventoryPage{}, fmt.Errorf("%w: %d", ErrNoEndpoint, ep)
	}
	if svc.inventories[ep] == nil {
		return InventoryPage{}, fmt.Errorf("%w: %d", ErrNoInventory, ep)
	}
	reply := make(chan InventoryPage, 1)
	svc.root.Send(svc.inventories[ep], inventoryPageReq{offset: max(offset, 0), limit: max(limit, 0), reply: reply})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case p := <-reply:
		return p, nil
	case <-t.C:
		return InventoryPage{}, ErrRouterTimeout
	}
}

package lifecycle

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rule"
)

// The data plane's optional REST views: the KV inventory
// (restapi.InventoryViewer) and the external controller
// (restapi.ControllerRuntime). They ask the rule's actors service, off the
// routing path, each with a bounded wait, and translate between actors'
// types and restapi's (restapi imports nothing of the data plane).

// viewTimeout bounds how long a view waits for a service's actor.
const viewTimeout = 2 * time.Second

var (
	_ restapi.InventoryViewer   = (*DataPlane)(nil)
	_ restapi.ControllerRuntime = (*DataPlane)(nil)
)

// service returns rule k's running service, or an error wrapping
// restapi.ErrNotRunning that says why it is not running.
func (d *DataPlane) service(k rule.RuleKey) (*actors.Service, error) {
	if svc := d.rt.service(k.String()); svc != nil {
		return svc, nil
	}
	d.mu.Lock()
	why, un := d.unserved[k]
	d.mu.Unlock()
	if un {
		return nil, fmt.Errorf("%w: %s", restapi.ErrNotRunning, why)
	}
	return nil, fmt.Errorf("%w: it was not applied (GET …/status shows the apply error)", restapi.ErrNotRunning)
}

// Inventory implements restapi.InventoryViewer.
func (d *DataPlane) Inventory(k rule.RuleKey, ep, offset, limit int) (restapi.InventoryPage, error) {
	svc, err := d.service(k)
	if err != nil {
		return restapi.InventoryPage{}, err
	}
	p, err := svc.Inventory(ep, offset, limit, viewTimeout)
	if err != nil {
		return restapi.InventoryPage{}, viewErr(err)
	}
	out := restapi.InventoryPage{HashAlgo: inventory.HashAlgoName(svc.Config().KV.Keys), Keys: p.Keys}
	for rank, m := range p.Ranks {
		// The listing is of engine keys, rank after rank.
		out.Total += m.EngineBlocks
		r := restapi.InventoryRank{Rank: rank, Mirror: mirrorStats(m)}
		if eps := svc.Config().Rule.Endpoints; ep < len(eps) && rank < len(eps[ep].Feeds) {
			r.Rank = eps[ep].Feeds[rank].Rank
		}
		if rank < len(p.Feeds) {
			f := feedStats(p.Feeds[rank])
			r.Feed = &f
		}
		out.Ranks = append(out.Ranks, r)
	}
	if st, ok := svc.Status(viewTimeout); ok && ep < len(st.Endpoints) {
		out.CapacityBlocks = int64(st.Endpoints[ep].KVCapacityBlocks)
		out.Prediction = kvPrediction(st.Endpoints[ep].Prediction)
	}
	return out, nil
}

// kvIgnored merges every rank's feed and mirror tallies into restapi's
// shape.
func kvIgnored(ranks []inventory.MirrorStats, feeds []inventory.FeedStats) []restapi.KVIgnored {
	tallies := make([]inventory.IgnoreTally, 0, len(ranks)+len(feeds))
	for _, f := range feeds {
		tallies = append(tallies, f.Ignored)
	}
	for _, m := range ranks {
		tallies = append(tallies, m.Ignored)
	}
	return ignoredViews(tallies...)
}

// ignoredViews renders tallies in restapi's shape (nil when empty).
func ignoredViews(tallies ...inventory.IgnoreTally) []restapi.KVIgnored {
	var out []restapi.KVIgnored
	for _, v := range inventory.IgnoredViews(tallies...) {
		out = append(out, restapi.KVIgnored{Reason: v.Reason, Events: v.Events, Blocks: v.Blocks, Cause: v.Cause})
	}
	return out
}

// kvPrediction is an endpoint's cache-truth record in restapi's shape.
func kvPrediction(p actors.PredictionStatus) *restapi.KVPrediction {
	out := &restapi.KVPrediction{Match: p.Match, Over: p.Over, Under: p.Under, Late: p.Late, State: restapi.PredictionOK}
	if p.HaveLast {
		out.LastPredicted, out.LastActual = new(p.LastPredicted), new(p.LastActual)
	}
	if p.Distrusted {
		out.State, out.Demoted, out.Cause, out.Detail = restapi.PredictionMismatch, p.Demoted, p.Cause, p.Detail
	}
	return out
}

// ttftPrediction is an endpoint's TTFT prediction record in restapi's
// shape.
func ttftPrediction(p actors.TTFTPredictionStatus) *restapi.TTFTPrediction {
	out := &restapi.TTFTPrediction{
		Compared: p.Compared, Wrong: p.Wrong, State: restapi.TTFTPredictionOK, BiasPct: math.Round(p.Bias*1000) / 10,
		OverheadMs: round2(p.OverheadMs), UncachedMsPer1kBlocks: round2(p.UncachedMs), QueuedMsPer1kBlocks: round2(p.QueuedMs),
		FullCacheMs: round2(p.FullCacheMs), LackingMsPer1kBlocks: round2(p.LackingMs),
		QueueingMs: round2(p.QueueingMs), PerWaitingMs: round2(p.PerWaitingMs),
	}
	switch {
	case p.Drifting:
		out.State = restapi.TTFTPredictionDrifting
	case !p.Trained:
		out.State = restapi.TTFTPredictionLearning
	}
	return out
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// SetController implements restapi.ControllerRuntime.
func (d *DataPlane) SetController(k rule.RuleKey, ep int, u restapi.ControllerUpdate) error {
	state, err := ctrlState(u.State)
	if err != nil {
		return err
	}
	svc, err := d.service(k)
	if err != nil {
		return err
	}
	err = svc.SetController(ep, actors.CtrlUpdate{State: state, Weight: uint8(min(max(u.Weight, 0), 100)), Epoch: u.Epoch}, viewTimeout)
	return viewErr(err)
}

// Controller implements restapi.ControllerRuntime.
func (d *DataPlane) Controller(k rule.RuleKey, ep int) (restapi.ControllerStatus, error) {
	svc, err := d.service(k)
	if err != nil {
		return restapi.ControllerStatus{}, err
	}
	st, ok := svc.Status(viewTimeout)
	switch {
	case !ok:
		return restapi.ControllerStatus{}, fmt.Errorf("%w: the router did not report the endpoint's state", restapi.ErrDataPlaneBusy)
	case ep < 0 || ep >= len(st.Endpoints):
		return restapi.ControllerStatus{}, fmt.Errorf("%w: %d (the running rule has %d)", restapi.ErrNoEndpoint, ep, len(st.Endpoints))
	}
	return *controllerStatus(st.Endpoints[ep].Controller), nil
}

// viewErr maps an actors error onto restapi's classes.
func viewErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, actors.ErrStaleEpoch):
		return fmt.Errorf("%w: %w", restapi.ErrStaleEpoch, err)
	case errors.Is(err, actors.ErrNoEndpoint):
		return fmt.Errorf("%w: %w", restapi.ErrNoEndpoint, err)
	case errors.Is(err, actors.ErrNoInventory):
		return fmt.Errorf("%w: %w", restapi.ErrNoInventory, err)
	case errors.Is(err, actors.ErrRouterTimeout), errors.Is(err, actors.ErrStopped):
		// ErrStopped: the service stopped between lookup and call (a
		// replace); its successor answers a retry.
		return fmt.Errorf("%w: %w", restapi.ErrDataPlaneBusy, err)
	}
	return err
}

// ctrlState parses restapi's controller state names.
func ctrlState(s string) (ladder.CtrlState, error) {
	switch s {
	case restapi.CtrlActive:
		return ladder.CtrlActive, nil
	case restapi.CtrlDraining:
		return ladder.CtrlDraining, nil
	case restapi.CtrlDisabled:
		return ladder.CtrlDisabled, nil
	case restapi.CtrlNone:
		return ladder.CtrlNone, nil
	}
	return ladder.CtrlNone, fmt.Errorf("controller state %q: want ACTIVE, DRAINING, DISABLED or NONE", s)
}

// ctrlName names a controller state the way restapi does.
func ctrlName(s ladder.CtrlState) string {
	switch s {
	case ladder.CtrlActive:
		return restapi.CtrlActive
	case ladder.CtrlDraining:
		return restapi.CtrlDraining
	case ladder.CtrlDisabled:
		return restapi.CtrlDisabled
	}
	return restapi.CtrlNone
}

// controllerStatus is an endpoint's controller view in restapi's shape;
// without an instruction the weight is neutral and the epoch is the last
// one applied (a release keeps it).
func controllerStatus(c actors.CtrlStatus) *restapi.ControllerStatus {
	if c.State == ladder.CtrlNone {
		return &restapi.ControllerStatus{State: restapi.CtrlNone, Weight: 100, EffectiveWeight: 100, Epoch: c.Epoch}
	}
	return &restapi.ControllerStatus{
		State:           ctrlName(c.State),
		Weight:          int(c.Weight),
		EffectiveWeight: int(c.Effective),
		Epoch:           c.Epoch,
		Updated:         c.Updated.UTC(),
		Stale:           c.Stale,
	}
}

// mirrorStats is one rank's mirror in restapi's shape.
func mirrorStats(m inventory.MirrorStats) restapi.MirrorStats {
	c := restapi.ContractStatus{State: restapi.ContractOK, Verified: m.Contract.Verified,
		Mismatched: m.Contract.Mismatched, Unverifiable: m.Contract.Unverifiable}
	if m.Contract.Tripped {
		c.State, c.Reason, c.Detail = restapi.ContractTripped, m.Contract.Reason, m.Contract.Detail
	}
	return restapi.MirrorStats{
		Blocks: m.Blocks, EngineBlocks: m.EngineBlocks, MaxBlocks: m.MaxBlocks, TokenKeyed: m.TokenKeyed,
		StoredBlocks: m.StoredBlocks, RemovedBlocks: m.RemovedBlocks, Clears: m.Clears, Resyncs: m.Resyncs,
		Evictions: m.Evictions, MemBytes: m.MemBytes, Contract: c,
		OffloadBlocks: m.OffloadBlocks, Ignored: ignoredViews(m.Ignored),
	}
}

// feedStats is one rank's feed in restapi's shape.
func feedStats(f inventory.FeedStats) restapi.FeedStats {
	out := restapi.FeedStats{
		Connected: f.Connected, Reconnects: f.Reconnects, RecvErrors: f.RecvErrors, Batches: f.Batches,
		Events: f.Events, EventsPerSec: f.EventsPerSec, Gaps: f.Gaps, LostBatches: f.LostBatches,
		Duplicates: f.Duplicates, Restarts: f.Restarts, Resyncs: f.Resyncs, Replays: f.Replays,
		ReplayFailures: f.ReplayFailures, Ignored: ignoredViews(f.Ignored),
	}
	if f.HaveSeq {
		seq := f.LastSeq
		out.LastSeq = &seq
	}
	return out
}

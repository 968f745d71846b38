package actors

import (
	"errors"
	"fmt"
	"time"

	"github.com/llbproject/llb/ladder"
)

// The external controller interface (the seed page's "layer 3"): an
// operator or a controller process sets, per endpoint, a weight (0–100,
// 100 neutral; it scales the endpoint's capacity in the Tier-1.5 law and
// Tier 2) and a state (ACTIVE, DRAINING — pinned work only, DISABLED —
// excluded), each update carrying an epoch. When updates stop, the weights
// glide back to neutral; staleness never drops or zero-fills an endpoint.

// Controller timing as NewServiceConfig sets it.
const (
	// DefaultCtrlStaleAfter is how long an endpoint's last controller update
	// stays fresh.
	DefaultCtrlStaleAfter = 30 * time.Second
	// DefaultCtrlDecayWindow is how long a stale weight takes to glide back
	// to neutral (LoxiLB's LOXILB_AI_CTRL_DECAY_WINDOW_SEC default).
	DefaultCtrlDecayWindow = 30 * time.Second
)

// ErrStaleEpoch rejects a controller update older than one already applied.
var ErrStaleEpoch = errors.New("actors: controller update epoch is older than the applied one")

// ErrNoEndpoint rejects a controller update for an endpoint index the rule
// does not have.
var ErrNoEndpoint = errors.New("actors: no such endpoint")

// CtrlConfig times the controller fold-in.
type CtrlConfig struct {
	// StaleAfter: an endpoint whose last update is older is stale
	// (NewServiceConfig: DefaultCtrlStaleAfter).
	StaleAfter time.Duration
	// DecayWindow: a stale weight reaches neutral after this long
	// (NewServiceConfig: DefaultCtrlDecayWindow).
	DecayWindow time.Duration
}

// CtrlUpdate is one controller instruction for one endpoint.
type CtrlUpdate struct {
	// State is ACTIVE, DRAINING or DISABLED (ladder.CtrlActive, ...);
	// ladder.CtrlNone releases the endpoint from the controller.
	State ladder.CtrlState
	// Weight is 0–100 (values above 100 are clamped); 100 is neutral.
	Weight uint8
	// Epoch orders updates: one older than the highest epoch applied to
	// the endpoint (a NONE release included) is refused (ErrStaleEpoch); an
	// equal epoch re-applies (idempotent retries). Epochs only move forward.
	Epoch uint64
}

// CtrlStatus is an endpoint's controller view.
type CtrlStatus struct {
	CtrlUpdate
	// Effective is the weight in force now (gliding to 100 when stale).
	Effective uint8
	// Updated is when the last update was applied (zero: never).
	Updated time.Time
	// Stale is true once Updated is older than StaleAfter.
	Stale bool
}

// ctrlState is the router core's record of one endpoint's instruction.
type ctrlState struct {
	set     CtrlUpdate
	updated time.Time // zero while no instruction is in force (never, or NONE)
	// epoch is the highest epoch applied, NONE included: releasing an
	// endpoint does not reset it, so an older instruction cannot come back
	// after a release.
	//
	// Invariant: epoch only grows; set.Epoch == epoch.
	epoch uint64
}

// ctrlReq carries a SetController call to the router.
type ctrlReq struct {
	ep    int
	u     CtrlUpdate
	reply chan error
}

// applyCtrl records u for endpoint ep (router actor only).
func (c *routerCore) applyCtrl(now time.Time, ep int, u CtrlUpdate) error {
	if ep < 0 || ep >= len(c.views) {
		return fmt.Errorf("%w: %d (rule has %d)", ErrNoEndpoint, ep, len(c.views))
	}
	cur := &c.ctrl[ep]
	if u.Epoch < cur.epoch {
		return fmt.Errorf("%w: %d < %d", ErrStaleEpoch, u.Epoch, cur.epoch)
	}
	u.Weight = min(u.Weight, 100)
	cur.set, cur.updated, cur.epoch = u, now, u.Epoch
	if u.State == ladder.CtrlNone {
		// Released: neutral weight, no state, but the epoch stays.
		*cur = ctrlState{set: CtrlUpdate{State: ladder.CtrlNone, Weight: 100, Epoch: u.Epoch}, epoch: u.Epoch}
		u = cur.set
	}
	v := &c.views[ep]
	v.Ctrl = u.State
	v.CtrlWeight = u.Weight
	if u.State == ladder.CtrlDisabled && v.Parked > 0 {
		c.ports.drainParked(ep)
	}
	return nil
}

// decayCtrl glides stale weights toward neutral (called every second).
func (c *routerCore) decayCtrl(now time.Time) {
	for ep := range c.ctrl {
		cs := &c.ctrl[ep]
		if cs.updated.IsZero() {
			continue
		}
		c.views[ep].CtrlWeight = c.effectiveWeight(now, cs)
	}
}

func (c *routerCore) effectiveWeight(now time.Time, cs *ctrlState) uint8 {
	cfg := c.cfg.Ctrl
	staleAt := cs.updated.Add(cfg.StaleAfter)
	w := cs.set.Weight
	if now.Before(staleAt) || w >= 100 {
		return w
	}
	frac := float64(now.Sub(staleAt)) / float64(cfg.DecayWindow)
	if frac >= 1 {
		return 100
	}
	return w + uint8(float64(100-w)*frac)
}

// ctrlStatus reports every endpoint's controller view.
func (c *routerCore) ctrlStatus(now time.Time) []CtrlStatus {
	out := make([]CtrlStatus, len(c.ctrl))
	for ep := range c.ctrl {
		cs := &c.ctrl[ep]
		out[ep] = CtrlStatus{CtrlUpdate: cs.set, Updated: cs.updated, Effective: 100}
		if !cs.updated.IsZero() {
			out[ep].Effective = c.effectiveWeight(now, cs)
			out[ep].Stale = now.After(cs.updated.Add(c.cfg.Ctrl.StaleAfter))
		}
	}
	return out
}

// SetController applies a controller instruction to endpoint ep and waits
// (up to timeout) for the router to accept it.
func (svc *Service) SetController(ep int, u CtrlUpdate, timeout time.Duration) error {
	if svc.stopped.Load() {
		return ErrStopped
	}
	reply := make(chan error, 1)
	svc.root.Send(svc.router, ctrlReq{ep: ep, u: u, reply: reply})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-reply:
		return err
	case <-t.C:
		return ErrRouterTimeout
	}
}

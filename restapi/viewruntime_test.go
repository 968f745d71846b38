package restapi

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/rule"
)

// viewRuntime is a fake data plane for the view routes: it implements
// Runtime, InventoryViewer and ControllerRuntime, records the inventory
// calls, returns a configured page or error, and keeps controller state per
// endpoint with the data plane's epoch rule (an older epoch is stale).
type viewRuntime struct {
	mu        sync.Mutex
	rules     map[rule.RuleKey][]netip.AddrPort
	ctrl      map[rule.RuleKey][]ControllerStatus
	page      InventoryPage
	invErr    error
	invCalls  []invCall
	setErr    error
	setCalls  []ControllerUpdate
	hideCtrl  bool  // Status reports no controller state (a router timeout)
	ctrlErr   error // Controller fails with it
	updatedAt time.Time
}

type invCall struct {
	key               rule.RuleKey
	ep, offset, limit int
}

func newViewRuntime() *viewRuntime {
	return &viewRuntime{
		rules:     make(map[rule.RuleKey][]netip.AddrPort),
		ctrl:      make(map[rule.RuleKey][]ControllerStatus),
		updatedAt: testEpoch.Add(time.Minute),
	}
}

func neutral() ControllerStatus {
	return ControllerStatus{State: CtrlNone, Weight: 100, EffectiveWeight: 100}
}

func (v *viewRuntime) Apply(_ context.Context, r rule.Rule) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	addrs := make([]netip.AddrPort, len(r.Effective.Endpoints))
	ctrl := make([]ControllerStatus, len(addrs))
	for i, ep := range r.Effective.Endpoints {
		addrs[i], ctrl[i] = ep.Addr, neutral()
	}
	v.rules[r.Key], v.ctrl[r.Key] = addrs, ctrl
	return nil
}

func (v *viewRuntime) Remove(_ context.Context, k rule.RuleKey) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.rules, k)
	delete(v.ctrl, k)
	return nil
}

func (v *viewRuntime) Status(k rule.RuleKey) (RuleStatus, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	addrs, ok := v.rules[k]
	if !ok {
		return RuleStatus{}, false
	}
	st := RuleStatus{Detail: "fake"}
	for i, a := range addrs {
		es := EndpointStatus{Addr: a, Active: true, Probe: ProbeUp}
		if !v.hideCtrl {
			c := v.ctrl[k][i]
			es.Controller = &c
		}
		st.Endpoints = append(st.Endpoints, es)
	}
	return st, true
}

func (v *viewRuntime) Inventory(k rule.RuleKey, ep, offset, limit int) (InventoryPage, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.invCalls = append(v.invCalls, invCall{k, ep, offset, limit})
	return v.page, v.invErr
}

func (v *viewRuntime) SetController(k rule.RuleKey, ep int, u ControllerUpdate) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.setCalls = append(v.setCalls, u)
	if v.setErr != nil {
		return v.setErr
	}
	cur := &v.ctrl[k][ep]
	if u.Epoch < cur.Epoch {
		return fmt.Errorf("%w: %d < %d", ErrStaleEpoch, u.Epoch, cur.Epoch)
	}
	if u.State == CtrlNone {
		*cur = neutral()
		cur.Epoch = u.Epoch // a release keeps the epoch
		return nil
	}
	*cur = ControllerStatus{State: u.State, Weight: u.Weight, EffectiveWeight: u.Weight, Epoch: u.Epoch, Updated: v.updatedAt}
	return nil
}

func (v *viewRuntime) Controller(k rule.RuleKey, ep int) (ControllerStatus, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ctrlErr != nil {
		return ControllerStatus{}, v.ctrlErr
	}
	return v.ctrl[k][ep], nil
}

func (v *viewRuntime) calls() ([]invCall, []ControllerUpdate) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]invCall(nil), v.invCalls...), append([]ControllerUpdate(nil), v.setCalls...)
}

// viewServer is a restored server over a fresh viewRuntime holding the two
// seed examples (the P/D rule has id "id-1", the CHWBL rule "id-2").
func viewServer(t *testing.T) (*testServer, *viewRuntime) {
	t.Helper()
	rt := newViewRuntime()
	ts := started(t, func(c *Config) { c.Runtime = rt })
	ts.mustPost(pdExample)
	ts.mustPost(chwblExample)
	return ts, rt
}

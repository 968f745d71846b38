package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rule"
)

func TestViewErr_KeepsTheActorsClassInRestapiTerms(t *testing.T) {
	tests := []struct {
		give error
		want error
	}{
		{fmt.Errorf("%w: 6 < 7", actors.ErrStaleEpoch), restapi.ErrStaleEpoch},
		{fmt.Errorf("%w: 9", actors.ErrNoEndpoint), restapi.ErrNoEndpoint},
		{fmt.Errorf("%w: 1", actors.ErrNoInventory), restapi.ErrNoInventory},
		{actors.ErrRouterTimeout, restapi.ErrDataPlaneBusy},
		{actors.ErrStopped, restapi.ErrDataPlaneBusy},
	}
	for _, tt := range tests {
		t.Run(tt.give.Error(), func(t *testing.T) {
			got := viewErr(tt.give)
			if !errors.Is(got, tt.want) || !errors.Is(got, tt.give) {
				t.Errorf("got %v; want it to be %v and keep %v", got, tt.want, tt.give)
			}
		})
	}
	if viewErr(nil) != nil {
		t.Error("viewErr(nil) is not nil")
	}
	other := errors.New("other")
	if got := viewErr(other); got != other {
		t.Errorf("unclassified: got %v; want it unchanged", got)
	}
}

func TestCtrlState_NamesRoundTrip(t *testing.T) {
	for _, s := range []ladder.CtrlState{ladder.CtrlNone, ladder.CtrlActive, ladder.CtrlDraining, ladder.CtrlDisabled} {
		got, err := ctrlState(ctrlName(s))
		if err != nil || got != s {
			t.Errorf("ctrlState(ctrlName(%d)) = %d, %v; want %d", s, got, err, s)
		}
	}
	if _, err := ctrlState("PAUSED"); err == nil {
		t.Error(`ctrlState("PAUSED"): no error`)
	}
}

func TestControllerStatus_NoInstructionIsNeutral(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		give actors.CtrlStatus
		want restapi.ControllerStatus
	}{
		{"none", actors.CtrlStatus{Effective: 100}, restapi.ControllerStatus{State: restapi.CtrlNone, Weight: 100, EffectiveWeight: 100}},
		{"draining_stale", actors.CtrlStatus{CtrlUpdate: actors.CtrlUpdate{State: ladder.CtrlDraining, Weight: 40, Epoch: 7}, Effective: 70, Updated: at, Stale: true},
			restapi.ControllerStatus{State: restapi.CtrlDraining, Weight: 40, EffectiveWeight: 70, Epoch: 7, Updated: at, Stale: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := *controllerStatus(tt.give); got != tt.want {
				t.Errorf("got %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestMirrorAndFeedStats_CarryTheContractAndSequence(t *testing.T) {
	m := mirrorStats(inventory.MirrorStats{Blocks: 3, EngineBlocks: 4, Evictions: 2,
		Contract: inventory.ContractState{Tripped: true, Reason: inventory.ContractBlockSize, Detail: "fix kvBlockSize", Mismatched: 1}})
	if m.Blocks != 3 || m.EngineBlocks != 4 || m.Evictions != 2 || m.Contract != (restapi.ContractStatus{
		State: restapi.ContractTripped, Reason: "block_size", Detail: "fix kvBlockSize", Mismatched: 1}) {
		t.Errorf("tripped mirror: %+v", m)
	}
	if ok := mirrorStats(inventory.MirrorStats{}); ok.Contract.State != restapi.ContractOK || ok.Contract.Reason != "" {
		t.Errorf("healthy mirror contract: %+v; want ok", ok.Contract)
	}
	if f := feedStats(inventory.FeedStats{Connected: true}); f.LastSeq != nil {
		t.Errorf("feed before any batch: last_seq %d; want null", *f.LastSeq)
	}
	if f := feedStats(inventory.FeedStats{HaveSeq: true, LastSeq: 0, Gaps: 2}); f.LastSeq == nil || *f.LastSeq != 0 || f.Gaps != 2 {
		t.Errorf("feed at seq 0: %+v; want last_seq 0 and gaps 2", f)
	}
}

func TestEndpointStatus_SeparatesProbeBreakerAndController(t *testing.T) {
	probe := actors.ProbeFunc(func(context.Context) error { return nil })
	cfg := func(breaker bool, probed bool, host string, feeds int) actors.ServiceConfig {
		ec := rule.CompiledEndpoint{Addr: netip.AddrPortFrom(netip.MustParseAddr(host), 8100), Feeds: make([]rule.Feed, feeds)}
		sc := actors.ServiceConfig{Rule: &rule.Compiled{Breaker: rule.Breaker{Enabled: breaker}, Endpoints: []rule.CompiledEndpoint{ec}}}
		if probed {
			sc.Probes = []actors.ProbeFunc{probe}
		}
		return sc
	}
	tests := []struct {
		name        string
		cfg         actors.ServiceConfig
		give        actors.EndpointStatus
		wantActive  bool
		wantProbe   string
		wantBreaker string
		wantDetail  string
	}{
		{"unprobed_no_breaker", cfg(false, false, "127.0.0.1", 0), actors.EndpointStatus{Up: true}, true, restapi.ProbeOff, "", ""},
		{"probe_down", cfg(true, true, "127.0.0.1", 1), actors.EndpointStatus{Up: false}, false, restapi.ProbeDown, "closed", "probe failing"},
		{"breaker_open_probe_up", cfg(true, true, "127.0.0.1", 1), actors.EndpointStatus{Up: true, Breaker: actors.BreakerOpen}, false, restapi.ProbeUp, "open", "breaker open"},
		{"disabled_by_controller", cfg(true, true, "2001:db8::1", 0), actors.EndpointStatus{Up: true, Ctrl: ladder.CtrlDisabled}, false, restapi.ProbeUp, "closed", "disabled by controller"},
		{"draining", cfg(false, true, "127.0.0.1", 0), actors.EndpointStatus{Up: true, Ctrl: ladder.CtrlDraining}, true, restapi.ProbeUp, "", "draining"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := endpointStatus(tt.cfg, 0, tt.give)
			if got.Active != tt.wantActive || got.Probe != tt.wantProbe || got.Breaker != tt.wantBreaker || got.Detail != tt.wantDetail {
				t.Errorf("got active %t probe %q breaker %q detail %q; want %t %q %q %q",
					got.Active, got.Probe, got.Breaker, got.Detail, tt.wantActive, tt.wantProbe, tt.wantBreaker, tt.wantDetail)
			}
			wantAddr := tt.cfg.Rule.Endpoints[0].Addr
			if got.Addr != wantAddr || got.Inventory != (len(tt.cfg.Rule.Endpoints[0].Feeds) > 0) || got.Controller == nil {
				t.Errorf("got addr %v inventory %t controller %v; want %v, feeds > 0, a controller view", got.Addr, got.Inventory, got.Controller, wantAddr)
			}
		})
	}
}

package lifecycle

import (
	"net/netip"
	"testing"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/replica"
	"github.com/llbproject/llb/rule"
)

func TestSessionService_ChangesWithTheEndpointsOnly(t *testing.T) {
	base := benchRule(2)
	same := benchRule(2)
	same.Spec.CacheAware = true // not an endpoint change: pins stay valid
	moved := benchRule(2)
	moved.Endpoints[0].Addr = netip.MustParseAddrPort("127.0.0.9:8100")
	role := benchRule(2)
	role.Endpoints[1].Spec.Role = ladder.RoleDecode
	tests := []struct {
		name     string
		give     *rule.Compiled
		wantSame bool
	}{
		{"another setting", same, true},
		{"an endpoint moved", moved, false},
		{"an endpoint changed role", role, false},
		{"an endpoint added", benchRule(3), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sessionService(tt.give) == sessionService(base); got != tt.wantSame {
				t.Fatalf("same table: got %v; want %v (%s vs %s)", got, tt.wantSame, sessionService(tt.give), sessionService(base))
			}
		})
	}
}

func TestClusterPort_PublishesHealthAsTheWireStates(t *testing.T) {
	p := &clusterPort{addrs: []string{"127.0.0.1:8100"}, changed: make([]time.Time, 1)}
	tests := []struct {
		name        string
		give        actors.PeerEndpoint
		wantBreaker replica.BreakerState
		wantProbe   replica.ProbeState
		excluded    bool
	}{
		{"unmonitored without breaker", actors.PeerEndpoint{InFlight: 3}, replica.BreakerUnknown, replica.ProbeUnknown, false},
		{"closed and up", actors.PeerEndpoint{HasBreaker: true, Monitored: true}, replica.BreakerClosed, replica.ProbeUp, false},
		{"open", actors.PeerEndpoint{HasBreaker: true, Breaker: actors.BreakerOpen}, replica.BreakerOpen, replica.ProbeUnknown, true},
		{"half open", actors.PeerEndpoint{HasBreaker: true, Breaker: actors.BreakerHalfOpen}, replica.BreakerHalfOpen, replica.ProbeUnknown, true},
		{"probe down", actors.PeerEndpoint{Monitored: true, Down: true}, replica.BreakerUnknown, replica.ProbeDown, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := p.endpointLoad(0, tt.give)
			if l.Breaker != tt.wantBreaker || l.Probe != tt.wantProbe || l.Excluded() != tt.excluded || l.InFlight != int64(tt.give.InFlight) || l.Addr != "127.0.0.1:8100" {
				t.Fatalf("got %+v (excluded %v); want breaker %v probe %v excluded %v", l, l.Excluded(), tt.wantBreaker, tt.wantProbe, tt.excluded)
			}
		})
	}
}

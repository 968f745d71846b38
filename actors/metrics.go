package actors

import (
	"strconv"
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/internal/promlabel"
	"github.com/llbproject/llb/ladder"
)

// Metric names the runtime exports. loxilb_* names keep LoxiLB's meaning;
// llb_* names are ours.
const (
	mSessionsActive   = "loxilb_pd_sessions_active"
	mTrieNodes        = "loxilb_pd_trie_nodes"
	mCBFlips          = "loxilb_pd_cb_flips_total"
	mCBState          = "llb_breaker_state" // 0 closed, 1 open, 2 half-open
	mProbeFlips       = "llb_probe_transitions_total"
	mEndpointUp       = "llb_endpoint_up"
	mAdmissionQueued  = "loxilb_pd_admission_queued_total"
	mAdmissionShed    = "loxilb_pd_admission_shed_total"
	mAdmissionRefused = "llb_admission_refused_total"
	mFanoutMissed     = "llb_router_fanout_missed_total"
	mRouteTimeouts    = "llb_router_timeouts_total"
	mActorRestarts    = "llb_actor_restarts_total"
	mActorsLost       = "llb_actors_lost_total"
	mDecisionErrors   = "llb_router_internal_errors_total"
	mPanicRouted      = "llb_panic_routing_total"
)

// svcMetrics is one service's runtime metrics. Every method is safe on a
// nil receiver (metrics disabled) and from any goroutine.
type svcMetrics struct {
	set  *metrics.Set
	svc  string
	core *Service

	mu    sync.Mutex
	names []string

	restarts, lost, routeTimeouts, fanout, internal *metrics.Counter
	panics                                          *metrics.Counter
	queued, shedC, refused                          *metrics.Counter
	cbFlips, probeFlips                             []*metrics.Counter
	cbState                                         []*metrics.Gauge
	up                                              []*metrics.Gauge
	trie, sessions                                  *metrics.Gauge
	truth                                           []truthMetrics
	ttft                                            []*signedHistogram
}

func newSvcMetrics(set *metrics.Set, svcKey string, svc *Service) *svcMetrics {
	if set == nil {
		return nil
	}
	m := &svcMetrics{set: set, svc: svcKey, core: svc}
	m.restarts = m.counter(mActorRestarts, "")
	m.lost = m.counter(mActorsLost, "")
	m.routeTimeouts = m.counter(mRouteTimeouts, "")
	m.fanout = m.counter(mFanoutMissed, "")
	m.internal = m.counter(mDecisionErrors, "")
	m.panics = m.counter(mPanicRouted, "")
	m.queued = m.counter(mAdmissionQueued, "")
	m.shedC = m.counter(mAdmissionShed, "")
	m.refused = m.counter(mAdmissionRefused, "")
	n := len(svc.cfg.Rule.Endpoints)
	m.cbFlips = make([]*metrics.Counter, n)
	m.probeFlips = make([]*metrics.Counter, n)
	m.cbState = make([]*metrics.Gauge, n)
	m.up = make([]*metrics.Gauge, n)
	for i := 0; i < n; i++ {
		ep := `ep_idx="` + strconv.Itoa(i) + `"`
		m.cbFlips[i] = m.counter(mCBFlips, ep)
		m.probeFlips[i] = m.counter(mProbeFlips, ep)
		m.cbState[i] = m.gauge(mCBState, ep, nil)
		m.up[i] = m.gauge(mEndpointUp, ep, nil)
		m.up[i].Set(1)
		ec := &svc.cfg.Rule.Endpoints[i]
		if ec.Spec.Role == ladder.RoleDecode {
			m.ttft = append(m.ttft, nil)
		} else {
			m.ttft = append(m.ttft, m.newTTFTMetrics(i, ec.Addr.String()))
		}
		if len(ec.Feeds) > 0 {
			m.truth = append(m.truth, m.newTruthMetrics(i, ec.Addr.String()))
		} else {
			m.truth = append(m.truth, truthMetrics{})
		}
	}
	// Plain gauges, set by housekeeping: a gauge with a callback would keep
	// pointing at the first service to register the name after a replace.
	m.sessions = m.gauge(mSessionsActive, "", nil)
	m.trie = m.gauge(mTrieNodes, "", nil)
	return m
}

func (m *svcMetrics) name(base, extra string) string {
	labels := `service="` + promlabel.Escape(m.svc) + `"`
	if extra != "" {
		labels += "," + extra
	}
	n := base + "{" + labels + "}"
	m.mu.Lock()
	m.names = append(m.names, n)
	m.mu.Unlock()
	return n
}

func (m *svcMetrics) counter(base, extra string) *metrics.Counter {
	return m.set.GetOrCreateCounter(m.name(base, extra))
}

func (m *svcMetrics) gauge(base, extra string, f func() float64) *metrics.Gauge {
	return m.set.GetOrCreateGauge(m.name(base, extra), f)
}

// unregister removes the service's series (the rule was deleted). A
// service replaced by a successor with the same key keeps them: the
// successor gets the same series back from the set, so counters carry on.
func (m *svcMetrics) unregister() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.names {
		m.set.UnregisterMetric(n)
	}
	m.names = nil
}

func (m *svcMetrics) restart() {
	if m != nil {
		m.restarts.Inc()
	}
}

func (m *svcMetrics) childLost() {
	if m != nil {
		m.lost.Inc()
	}
}

func (m *svcMetrics) routeTimeout() {
	if m != nil {
		m.routeTimeouts.Inc()
	}
}

func (m *svcMetrics) fanoutMissed(n int) {
	if m != nil && n > 0 {
		m.fanout.Add(n)
	}
}

func (m *svcMetrics) internalError() {
	if m != nil {
		m.internal.Inc()
	}
}

func (m *svcMetrics) panicRouted() {
	if m != nil {
		m.panics.Inc()
	}
}

func (m *svcMetrics) parked() {
	if m != nil {
		m.queued.Inc()
	}
}

func (m *svcMetrics) shed(a ladder.Admission) {
	if m == nil {
		return
	}
	if a == ladder.Refuse {
		m.refused.Inc()
	} else {
		m.shedC.Inc()
	}
}

func (m *svcMetrics) breakerFlip(ep int, st BreakerState) {
	if m == nil || ep >= len(m.cbFlips) {
		return
	}
	m.cbFlips[ep].Inc()
	m.cbState[ep].Set(float64(st))
}

func (m *svcMetrics) probeFlip(ep int, up bool) {
	if m == nil || ep >= len(m.probeFlips) {
		return
	}
	m.probeFlips[ep].Inc()
	v := 0.0
	if up {
		v = 1
	}
	m.up[ep].Set(v)
}

func (m *svcMetrics) sessionsActive(n int64) {
	if m != nil {
		m.sessions.Set(float64(n))
	}
}

func (m *svcMetrics) trieNodes(t *ladder.Trie) {
	if m == nil || t == nil {
		return
	}
	m.trie.Set(float64(t.Nodes()))
}

package gateway

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/internal/promlabel"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/tokenizer"
)

// Metrics are one rule's data-plane metrics, registered in a caller-owned
// *metrics.Set with the label service="<rule name>". Names follow LoxiLB's
// (loxilb-compat.md §2.6) so existing dashboards work; llb_route_tier_total
// is llb's own. Every method is safe for concurrent use and allocation-free
// after a label value's first use.
//
//	loxilb_ai_requests_total                      completion/chat requests received
//	loxilb_ai_request_duration_seconds            their duration (histogram)
//	loxilb_ai_active_streams                      SSE responses being relayed now
//	loxilb_proxy_http_responses_by_status_total   responses by {code} (499: client left)
//	loxilb_proxy_http_ttfb_seconds                request start → first byte to the client
//	loxilb_ai_pd_requests_total                   requests that ran the P/D two-leg protocol
//	loxilb_ai_pd_prefill_duration_seconds         prefill leg, send → full JSON
//	loxilb_ai_pd_decode_ttft_seconds              decode leg, send → first body byte
//	loxilb_ai_pd_kv_params_{found,missing}_total  prefill answers with/without usable kv_transfer_params
//	loxilb_pd_prefill_ep_died_total               prefill connect failures and resets
//	loxilb_pd_decode_ep_died_total                decode failures before the first client byte
//	loxilb_pd_decode_zero_byte_eof_total          decode 2xx that ended with an empty body
//	loxilb_pd_connect_failover_total              re-routes after a dead endpoint (single and P/D)
//	loxilb_ai_pd_session_hits_total               decisions made by Tier 0
//	loxilb_pd_kv_tier15_hits_total{ep_idx}        decisions made by Tier 1.5, by endpoint
//	loxilb_pd_kv_tier15_miss_reason_total{reason} Tier-1.5 fall-throughs by reason (LoxiLB
//	                                              spellings mode_off, text_empty, hashes,
//	                                              no_worker; ladder's names otherwise)
//	loxilb_pd_kv_tier15_fallthrough_total         Tier-1.5 fall-throughs with KV-exact on
//	loxilb_pd_kv_tier15_spills_total              decisions the load law moved off the overlap winner
//	loxilb_pd_kv_tier15_cold_seeds_total          Tier-1.5 hits diverted to a cold endpoint
//	llb_rule_engine{engine}                       1: the engine behind the rule (kvEngineType)
//	llb_route_tier_total{tier}                    admitted decisions by deciding tier
//	llb_loop_detected_total                       requests refused with 508 (X-Llb-Hop loop)
//	llb_client_send_timeouts_total                answers cut because the client accepted no
//	                                              byte for the send bound (sendbound.go)
//	llb_migrations_total{outcome}                 requests whose worker failed mid-answer
//	                                              (migrate.go): migrated (a stream went on
//	                                              elsewhere), resent (nothing had reached the
//	                                              client), and cut: unsupported, limit, failed
type Metrics struct {
	set     *metrics.Set
	service string

	mu    sync.Mutex // guards names (registration only)
	names []string

	// P/D serving.
	pdRequests      *metrics.Counter
	prefillDuration *metrics.PrometheusHistogram
	decodeTTFT      *metrics.PrometheusHistogram
	kvParamsFound   *metrics.Counter
	kvParamsMissing *metrics.Counter
	sessionHits     *metrics.Counter

	// Failover.
	prefillDied     *metrics.Counter
	decodeDied      *metrics.Counter
	decodeZeroByte  *metrics.Counter
	connectFailover *metrics.Counter

	// Refusals and cuts.
	loops        *metrics.Counter
	sendTimeouts *metrics.Counter

	// Migration, by outcome.
	migrations [numMigOutcomes]*metrics.Counter

	// Generic proxy.
	aiRequests    *metrics.Counter
	aiDuration    *metrics.PrometheusHistogram
	ttfb          *metrics.PrometheusHistogram
	activeStreams *metrics.Gauge
	byStatus      [600]atomic.Pointer[metrics.Counter]

	// Tier 1.5, derived from decisions.
	tier15Hits        [ladder.MaxEndpoints]atomic.Pointer[metrics.Counter]
	tier15Miss        [256]atomic.Pointer[metrics.Counter]
	tier15Fallthrough *metrics.Counter
	tier15Spills      *metrics.Counter
	tier15ColdSeeds   *metrics.Counter

	// Route tiers.
	tiers [16]atomic.Pointer[metrics.Counter]
}

// durationBuckets are the histogram bounds in seconds: 0.5 ms to 10 min.
var durationBuckets = []float64{
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600,
}

// NewMetrics registers the rule's metrics in set (a new private set when
// nil) under service. Registering a second Metrics with the same service in
// the same set reuses the existing series.
func NewMetrics(set *metrics.Set, service string) *Metrics {
	if set == nil {
		set = metrics.NewSet()
	}
	m := &Metrics{set: set, service: promlabel.Escape(service)}
	m.pdRequests = m.counter("loxilb_ai_pd_requests_total", "")
	m.prefillDuration = m.histogram("loxilb_ai_pd_prefill_duration_seconds")
	m.decodeTTFT = m.histogram("loxilb_ai_pd_decode_ttft_seconds")
	m.kvParamsFound = m.counter("loxilb_ai_pd_kv_params_found_total", "")
	m.kvParamsMissing = m.counter("loxilb_ai_pd_kv_params_missing_total", "")
	m.sessionHits = m.counter("loxilb_ai_pd_session_hits_total", "")
	m.prefillDied = m.counter("loxilb_pd_prefill_ep_died_total", "")
	m.decodeDied = m.counter("loxilb_pd_decode_ep_died_total", "")
	m.decodeZeroByte = m.counter("loxilb_pd_decode_zero_byte_eof_total", "")
	m.connectFailover = m.counter("loxilb_pd_connect_failover_total", "")
	m.loops = m.counter("llb_loop_detected_total", "")
	m.sendTimeouts = m.counter("llb_client_send_timeouts_total", "")
	for i, name := range migOutcomeNames {
		m.migrations[i] = m.counter("llb_migrations_total", `outcome="`+name+`"`)
	}
	m.aiRequests = m.counter("loxilb_ai_requests_total", "")
	m.aiDuration = m.histogram("loxilb_ai_request_duration_seconds")
	m.ttfb = m.histogram("loxilb_proxy_http_ttfb_seconds")
	m.activeStreams = m.gauge("loxilb_ai_active_streams")
	m.tier15Fallthrough = m.counter("loxilb_pd_kv_tier15_fallthrough_total", "")
	m.tier15Spills = m.counter("loxilb_pd_kv_tier15_spills_total", "")
	m.tier15ColdSeeds = m.counter("loxilb_pd_kv_tier15_cold_seeds_total", "")
	return m
}

// Set returns the set the metrics live in.
func (m *Metrics) Set() *metrics.Set { return m.set }

// Unregister removes every series this Metrics registered (rule deleted).
func (m *Metrics) Unregister() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.names {
		m.set.UnregisterMetric(n)
	}
	m.names = nil
}

// name renders `base{service="…"[,extra]}`.
func (m *Metrics) name(base, extra string) string {
	var b strings.Builder
	b.WriteString(base)
	b.WriteString(`{service="`)
	b.WriteString(m.service)
	b.WriteByte('"')
	if extra != "" {
		b.WriteByte(',')
		b.WriteString(extra)
	}
	b.WriteByte('}')
	return b.String()
}

func (m *Metrics) track(n string) {
	m.mu.Lock()
	m.names = append(m.names, n)
	m.mu.Unlock()
}

func (m *Metrics) counter(base, extra string) *metrics.Counter {
	n := m.name(base, extra)
	m.track(n)
	return m.set.GetOrCreateCounter(n)
}

func (m *Metrics) histogram(base string) *metrics.PrometheusHistogram {
	n := m.name(base, "")
	m.track(n)
	return m.set.GetOrCreatePrometheusHistogramExt(n, durationBuckets)
}

func (m *Metrics) gauge(base string) *metrics.Gauge {
	n := m.name(base, "")
	m.track(n)
	return m.set.GetOrCreateGauge(n, nil)
}

// lazy returns the counter in slot, creating it with extra labels on first
// use.
func (m *Metrics) lazy(slot *atomic.Pointer[metrics.Counter], base, extra string) *metrics.Counter {
	if c := slot.Load(); c != nil {
		return c
	}
	c := m.counter(base, extra)
	slot.Store(c)
	return c
}

// engine exports llb_rule_engine{engine} 1 (the engine is immutable per
// rule; "" is vLLM).
func (m *Metrics) engine(name string) {
	if name == "" {
		name = "vllm"
	}
	n := m.name("llb_rule_engine", `engine="`+promlabel.Escape(name)+`"`)
	m.track(n)
	m.set.GetOrCreateGauge(n, nil).Set(1)
}

// migration counts one migration outcome (migMigrated, ...).
func (m *Metrics) migration(outcome int) { m.migrations[outcome].Inc() }

// status counts one response to a client by HTTP status (499: the client
// left before an answer).
func (m *Metrics) status(code int) {
	if code < 100 || code >= len(m.byStatus) {
		code = 599
	}
	if c := m.byStatus[code].Load(); c != nil {
		c.Inc()
		return
	}
	m.lazy(&m.byStatus[code], "loxilb_proxy_http_responses_by_status_total", `code="`+strconv.Itoa(code)+`"`).Inc()
}

// decision records the routing tiers and Tier-1.5 counters a decision
// implies. Called once per admitted routing decision.
func (m *Metrics) decision(d *ladder.Decision) {
	t := int(d.Tier)
	if t < len(m.tiers) {
		m.lazy(&m.tiers[t], "llb_route_tier_total", `tier="`+d.Tier.String()+`"`).Inc()
	}
	switch d.Tier {
	case ladder.Tier15:
		if d.Prefill >= 0 && d.Prefill < len(m.tier15Hits) {
			m.lazy(&m.tier15Hits[d.Prefill], "loxilb_pd_kv_tier15_hits_total", `ep_idx="`+strconv.Itoa(d.Prefill)+`"`).Inc()
		}
	case ladder.Tier0:
		m.sessionHits.Inc()
	}
	if r := d.Trace.Reason(ladder.Tier15); r != ladder.ReasonNone {
		m.lazy(&m.tier15Miss[r], "loxilb_pd_kv_tier15_miss_reason_total", `reason="`+tier15MissLabel(r)+`"`).Inc()
		if r != ladder.ReasonKVOff {
			m.tier15Fallthrough.Inc()
		}
	}
	if d.Flags.Has(ladder.FlagSpill) {
		m.tier15Spills.Inc()
	}
	if d.Flags.Has(ladder.FlagColdSeed) {
		m.tier15ColdSeeds.Inc()
	}
}

// tier15MissLabel spells a Tier-1.5 fall-through reason the way LoxiLB's
// loxilb_pd_kv_tier15_miss_reason_total does where LoxiLB has the reason
// (mode_off, text_empty, hashes, no_worker, ...), and with ladder's name
// otherwise.
func tier15MissLabel(r ladder.Reason) string {
	switch r {
	case ladder.ReasonKVOff:
		return "mode_off"
	case ladder.ReasonEmptyText:
		return "text_empty"
	case ladder.ReasonHashContract:
		return "hashes"
	case ladder.ReasonNoCandidate:
		return "no_worker"
	}
	return r.String()
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// TokenizerCounters registers the in-process tokenizer's series (only for
// rules that have one):
//
//	llb_tokenizer_requests_total{path}   Tier-1.5 tokenizations by path: local or engine
//	llb_tokenizer_checks_total           local answers re-checked against the engine
//	llb_tokenizer_mismatch_total         checks whose ids differed (the model then uses the engine)
//	llb_tokenizer_check_errors_total     checks the engine did not answer
func (m *Metrics) TokenizerCounters() tokenizer.Counters {
	return tokenizer.Counters{
		Local:       m.counter("llb_tokenizer_requests_total", `path="local"`),
		Remote:      m.counter("llb_tokenizer_requests_total", `path="engine"`),
		Checks:      m.counter("llb_tokenizer_checks_total", ""),
		Mismatches:  m.counter("llb_tokenizer_mismatch_total", ""),
		CheckErrors: m.counter("llb_tokenizer_check_errors_total", ""),
	}
}

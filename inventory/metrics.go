package inventory

import (
	"strconv"
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// Metric names. The loxilb_* names are LoxiLB's and keep its meaning; the
// llb_* names are llb's additions.
const (
	// MetricSubscriberConnected: 1 while the feed's SUB socket is connected.
	MetricSubscriberConnected = "loxilb_kv_subscriber_connected"
	// MetricSubscriberReconnects: TCP reconnects of the SUB socket.
	MetricSubscriberReconnects = "loxilb_kv_subscriber_reconnect_total"
	// MetricSubscriberDisconnects: connections of the SUB socket lost
	// (publisher gone, network fault, or a message above the size limit,
	// which libzmq refuses by dropping the connection).
	MetricSubscriberDisconnects = "llb_kv_subscriber_disconnects_total"
	// MetricSubscriberRecvErrors: receive failures and malformed
	// frames/payloads.
	MetricSubscriberRecvErrors = "loxilb_kv_subscriber_recv_error_total"
	// MetricCapEvictions: blocks evicted because the mirror hit its cap.
	MetricCapEvictions = "loxilb_kv_inv_cap_evictions_total"
	// MetricBlocks: blocks currently mirrored in GPU memory.
	MetricBlocks = "loxilb_pd_kv_blocks"
	// MetricOffloadBlocks: blocks currently mirrored in an offload tier
	// (CPU memory) only.
	MetricOffloadBlocks = "llb_kv_offload_blocks"

	// MetricSeqGaps: sequence gaps seen (batches lost).
	MetricSeqGaps = "llb_kv_seq_gaps_total"
	// MetricSeqLostBatches: batches missing across all gaps, each gap
	// capped at what the publisher could have sent since the batch before
	// it (MaxPublishRate).
	MetricSeqLostBatches = "llb_kv_seq_lost_batches_total"
	// MetricResyncs: mirror clears ordered by the feed (big gap, restart,
	// failed replay).
	MetricResyncs = "llb_kv_resyncs_total"
	// MetricRestarts: publisher restarts detected (sequence went backwards).
	MetricRestarts = "llb_kv_publisher_restarts_total"
	// MetricReplays: gaps filled by replay.
	MetricReplays = "llb_kv_replays_total"
	// MetricReplayFailures: replays that could not fill a gap.
	MetricReplayFailures = "llb_kv_replay_failures_total"
	// MetricBatches: batches decoded and handed to the sink.
	MetricBatches = "llb_kv_batches_total"
	// MetricSeqDuplicates: batches dropped for a repeated sequence number.
	MetricSeqDuplicates = "llb_kv_seq_duplicates_total"
	// MetricEvents: events decoded and handed to the sink.
	MetricEvents = "llb_kv_events_total"
	// MetricEventsInvalid: events dropped for bad fields.
	MetricEventsInvalid = "llb_kv_events_invalid_total"
	// MetricEventsUnknown: events with unknown tags (skipped).
	MetricEventsUnknown = "llb_kv_events_unknown_total"
	// MetricContractMismatches: stored runs whose re-hash differs from the
	// event keys (exact mode) or that cannot be indexed (token mode).
	MetricContractMismatches = "llb_kv_contract_mismatch_total"
	// MetricContractGuard: 1 while the hash_contract guard is raised.
	MetricContractGuard = "llb_kv_contract_guard"
)

// EndpointID names one KV feed and its mirror: a service (rule), the
// endpoint's index in it, and the data-parallel rank.
type EndpointID struct {
	// Service is the rule / service name (the "service" label).
	Service string
	// EpIdx is the endpoint index within the rule.
	EpIdx int
	// Rank is the data-parallel rank (0 without DP).
	Rank int
}

// labels renders the Prometheus label set.
func (id EndpointID) labels() string {
	var b strings.Builder
	b.WriteString(`service="`)
	writeLabelValue(&b, id.Service)
	b.WriteString(`",ep_idx="`)
	b.WriteString(strconv.Itoa(id.EpIdx))
	b.WriteString(`",rank="`)
	b.WriteString(strconv.Itoa(id.Rank))
	b.WriteString(`"`)
	return b.String()
}

// writeLabelValue escapes a label value as the Prometheus text format wants.
func writeLabelValue(b *strings.Builder, v string) {
	for _, r := range v {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
}

// metricGroup registers one owner's series in a Set and unregisters them all
// on close. With a nil Set the series live in a private Set, so counters
// still count (Stats reads them) but nothing is exported.
//
// One live owner per EndpointID per Set: close the old Feed/Mirror before
// starting its replacement, or the old one's close removes the new series.
type metricGroup struct {
	set    *metrics.Set
	labels string
	names  []string
}

func newMetricGroup(set *metrics.Set, id EndpointID) *metricGroup {
	if set == nil {
		set = metrics.NewSet()
	}
	return &metricGroup{set: set, labels: id.labels()}
}

func (g *metricGroup) name(base string) string {
	n := base + "{" + g.labels + "}"
	g.names = append(g.names, n)
	return n
}

// counter returns the owner's counter base{labels}.
func (g *metricGroup) counter(base string) *metrics.Counter {
	return g.set.GetOrCreateCounter(g.name(base))
}

// counterLabeled returns the owner's counter base{labels,extra}; extra is
// one or more rendered labels (`reason="medium"`).
func (g *metricGroup) counterLabeled(base, extra string) *metrics.Counter {
	n := base + "{" + g.labels + "," + extra + "}"
	g.names = append(g.names, n)
	return g.set.GetOrCreateCounter(n)
}

// gauge returns the owner's settable gauge base{labels}.
func (g *metricGroup) gauge(base string) *metrics.Gauge {
	return g.set.GetOrCreateGauge(g.name(base), nil)
}

// close unregisters every series this group created.
func (g *metricGroup) close() {
	for _, n := range g.names {
		g.set.UnregisterMetric(n)
	}
	g.names = nil
}

// feedSeries are the series a KV feed (the ZMQ subscriber Feed and the
// TensorRT-LLM DrainFeed alike) keeps for its endpoint.
type feedSeries struct {
	connected                         *metrics.Gauge
	reconnects, disconnects, recvErrs *metrics.Counter
	batches, events, invalid, unknown *metrics.Counter
	duplicates, gaps, lost            *metrics.Counter
	resyncs, restarts                 *metrics.Counter
}

// newFeedSeries registers a feed's series in mg, disconnected.
func newFeedSeries(mg *metricGroup) feedSeries {
	s := feedSeries{
		connected:   mg.gauge(MetricSubscriberConnected),
		reconnects:  mg.counter(MetricSubscriberReconnects),
		disconnects: mg.counter(MetricSubscriberDisconnects),
		recvErrs:    mg.counter(MetricSubscriberRecvErrors),
		batches:     mg.counter(MetricBatches),
		events:      mg.counter(MetricEvents),
		invalid:     mg.counter(MetricEventsInvalid),
		unknown:     mg.counter(MetricEventsUnknown),
		duplicates:  mg.counter(MetricSeqDuplicates),
		gaps:        mg.counter(MetricSeqGaps),
		lost:        mg.counter(MetricSeqLostBatches),
		resyncs:     mg.counter(MetricResyncs),
		restarts:    mg.counter(MetricRestarts),
	}
	s.connected.Set(0)
	return s
}

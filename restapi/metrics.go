package restapi

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Metric names restapi registers in the Set it is given.
const (
	metricRequests       = "llb_rest_requests_total"
	metricDuration       = "llb_rest_request_duration_seconds"
	metricRules          = "llb_rules"
	metricRuleChanges    = "llb_rule_changes_total"
	metricStateWrites    = "llb_state_writes_total"
	metricStateWriteErrs = "llb_state_write_errors_total"
	metricRestored       = "llb_state_restored_rules"
	metricRejected       = "llb_state_rejected_rules"
	metricCorrupt        = "llb_state_corrupt_files_total"
	metricApplyErrs      = "llb_runtime_apply_errors_total"
	metricAuthFailures   = "llb_rest_auth_failures_total"
)

// serverMetrics are the REST layer's own series. Label values come from route
// templates and status codes only, so cardinality is bounded.
type serverMetrics struct {
	set            *metrics.Set
	stateWrites    *metrics.Counter
	stateWriteErrs *metrics.Counter
	restored       *metrics.Counter
	rejected       *metrics.Counter
	corrupt        *metrics.Counter
	applyErrs      *metrics.Counter
	authFailures   *metrics.Counter
}

// newServerMetrics registers restapi's series in set. rules reports the
// current rule count. It fails if set already holds them: one Server per Set.
func newServerMetrics(set *metrics.Set, rules func() int) (*serverMetrics, error) {
	if slices.Contains(set.ListMetricNames(), metricRules) {
		return nil, fmt.Errorf("restapi: metrics set already has %s: use one metrics.Set per Server", metricRules)
	}
	set.NewGauge(metricRules, func() float64 { return float64(rules()) })
	return &serverMetrics{
		set:            set,
		stateWrites:    set.NewCounter(metricStateWrites),
		stateWriteErrs: set.NewCounter(metricStateWriteErrs),
		restored:       set.NewCounter(metricRestored),
		rejected:       set.NewCounter(metricRejected),
		corrupt:        set.NewCounter(metricCorrupt),
		applyErrs:      set.NewCounter(metricApplyErrs),
		authFailures:   set.NewCounter(metricAuthFailures),
	}, nil
}

// Cluster-mode metric names.
const (
	metricStoreRevision = "llb_rulestore_revision"
	metricStoreSynced   = "llb_rulestore_synced"
	metricStoreUp       = "llb_rulestore_up"
	metricStoreEvents   = "llb_rulestore_watch_events_total"
	metricStoreRejected = "llb_rulestore_rejected_total"
)

// shared registers the shared store's series.
func (m *serverMetrics) shared(set *metrics.Set, sh *sharedState) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	set.NewGauge(metricStoreRevision, func() float64 { return float64(sh.view().Revision) })
	set.NewGauge(metricStoreSynced, func() float64 { return b(sh.view().Synced) })
	set.NewGauge(metricStoreUp, func() float64 { return b(sh.view().OK) })
	set.NewGauge(metricStoreEvents, func() float64 { return float64(sh.view().Events) })
	set.NewGauge(metricStoreRejected, func() float64 { return float64(sh.view().Rejected) })
}

// request records one answered request.
func (m *serverMetrics) request(method, route string, status int, d time.Duration) {
	m.set.GetOrCreateCounter(metricRequests + `{method="` + method + `",route="` + route + `",code="` + strconv.Itoa(status) + `"}`).Inc()
	m.set.GetOrCreatePrometheusHistogram(metricDuration + `{route="` + route + `"}`).Update(d.Seconds())
}

// change records one accepted rule change.
func (m *serverMetrics) change(kind ChangeKind) {
	m.set.GetOrCreateCounter(metricRuleChanges + `{change="` + string(kind) + `"}`).Inc()
}

package catalog

import (
	"fmt"
	"slices"

	"github.com/VictoriaMetrics/metrics"
)

// Metric names the catalog registers in the Set it is given.
const (
	metricRules          = "llb_rules"
	metricRuleChanges    = "llb_rule_changes_total"
	metricStateWrites    = "llb_state_writes_total"
	metricStateWriteErrs = "llb_state_write_errors_total"
	metricRestored       = "llb_state_restored_rules"
	metricRejected       = "llb_state_rejected_rules"
	metricCorrupt        = "llb_state_corrupt_files_total"
	metricApplyErrs      = "llb_runtime_apply_errors_total"
)

// Cluster-mode metric names.
const (
	metricStoreRevision = "llb_rulestore_revision"
	metricStoreSynced   = "llb_rulestore_synced"
	metricStoreUp       = "llb_rulestore_up"
	metricStoreEvents   = "llb_rulestore_watch_events_total"
	metricStoreRejected = "llb_rulestore_rejected_total"
)

// catalogMetrics are the catalog's own series. Label values are change
// kinds only, so cardinality is bounded.
type catalogMetrics struct {
	set            *metrics.Set
	stateWrites    *metrics.Counter
	stateWriteErrs *metrics.Counter
	restored       *metrics.Counter
	rejected       *metrics.Counter
	corrupt        *metrics.Counter
	applyErrs      *metrics.Counter
}

// newCatalogMetrics registers the catalog's series in set. rules reports
// the current rule count. It fails if set already holds them: one Catalog
// per Set.
func newCatalogMetrics(set *metrics.Set, rules func() int) (*catalogMetrics, error) {
	if slices.Contains(set.ListMetricNames(), metricRules) {
		return nil, fmt.Errorf("restapi: metrics set already has %s: use one metrics.Set per Server", metricRules)
	}
	set.NewGauge(metricRules, func() float64 { return float64(rules()) })
	return &catalogMetrics{
		set:            set,
		stateWrites:    set.NewCounter(metricStateWrites),
		stateWriteErrs: set.NewCounter(metricStateWriteErrs),
		restored:       set.NewCounter(metricRestored),
		rejected:       set.NewCounter(metricRejected),
		corrupt:        set.NewCounter(metricCorrupt),
		applyErrs:      set.NewCounter(metricApplyErrs),
	}, nil
}

// shared registers the shared store's series.
func (m *catalogMetrics) shared(set *metrics.Set, sh *sharedState) {
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

// change records one accepted rule change.
func (m *catalogMetrics) change(kind ChangeKind) {
	m.set.GetOrCreateCounter(metricRuleChanges + `{change="` + string(kind) + `"}`).Inc()
}

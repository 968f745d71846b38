package restapi

import (
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Metric names restapi registers in the Set it is given (the catalog
// registers the configuration's own).
const (
	metricRequests     = "llb_rest_requests_total"
	metricDuration     = "llb_rest_request_duration_seconds"
	metricAuthFailures = "llb_rest_auth_failures_total"
)

// serverMetrics are the REST layer's own series. Label values come from route
// templates and status codes only, so cardinality is bounded.
type serverMetrics struct {
	set          *metrics.Set
	authFailures *metrics.Counter
}

// newServerMetrics registers restapi's series in set (after the catalog,
// which refuses a set that already serves another Server).
func newServerMetrics(set *metrics.Set) *serverMetrics {
	return &serverMetrics{set: set, authFailures: set.NewCounter(metricAuthFailures)}
}

// request records one answered request.
func (m *serverMetrics) request(method, route string, status int, d time.Duration) {
	m.set.GetOrCreateCounter(metricRequests + `{method="` + method + `",route="` + route + `",code="` + strconv.Itoa(status) + `"}`).Inc()
	m.set.GetOrCreatePrometheusHistogram(metricDuration + `{route="` + route + `"}`).Update(d.Seconds())
}

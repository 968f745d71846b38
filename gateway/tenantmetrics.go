package gateway

import (
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/internal/promlabel"
	"github.com/llbproject/llb/ladder"
)

// TenantMetrics are the per-tenant and per-class series, process-wide (a
// tenant's traffic may cross rules), registered in a caller-owned
// *metrics.Set:
//
//	llb_tenant_requests_total{tenant,class}            generation requests received
//	llb_tenant_tokens_total{tenant,class,kind}         tokens served, kind prompt|completion
//	                                                   (the engine's usage; estimated without it)
//	llb_tenant_parked_seconds_total{tenant,class}      time spent parked by admission
//	llb_tenant_parked_total{tenant,class}              requests that parked
//	llb_tenant_refusals_total{tenant,class,code}       requests llb refused, by error code
//	                                                   (invalid_api_key, model_not_allowed,
//	                                                   rate_limit_exceeded, tenant_quota_exceeded,
//	                                                   token_quota_exceeded, pd_overloaded, ...)
//	llb_class_ttft_seconds{class}                      time to the first byte to the client
//	llb_class_parked_seconds{class}                    time parked, of the requests that parked
//
// The tenant label is bounded: the first MaxTenantLabels tenants seen get
// their own value, every later one is counted under "_other"; the
// anonymous tenant (no key, no fairness id) is "_none". Safe for
// concurrent use.
type TenantMetrics struct {
	set *metrics.Set
	max int

	mu      sync.Mutex // guards labels and series (registration only)
	labels  map[string]string
	series  sync.Map // seriesKey → *tenantSeries
	classes [ladder.NumClasses]classSeries
}

// DefaultMaxTenantLabels bounds the tenant label's values.
const DefaultMaxTenantLabels = 64

// Tenant label values that are not tenant ids.
const (
	tenantLabelNone  = "_none"
	tenantLabelOther = "_other"
)

type seriesKey struct {
	tenant string // the label value
	class  ladder.Class
}

type tenantSeries struct {
	requests, parked          *metrics.Counter
	parkedSecs                *metrics.FloatCounter
	promptTokens, complTokens *metrics.Counter
	mu                        sync.Mutex
	refusals                  map[string]*metrics.Counter
	name                      func(base, extra string) string
	set                       *metrics.Set
}

type classSeries struct {
	ttft, parked *metrics.PrometheusHistogram
}

// NewTenantMetrics registers the series in set (a private set when nil),
// with at most maxLabels tenant label values (≤ 0: DefaultMaxTenantLabels).
func NewTenantMetrics(set *metrics.Set, maxLabels int) *TenantMetrics {
	if set == nil {
		set = metrics.NewSet()
	}
	if maxLabels <= 0 {
		maxLabels = DefaultMaxTenantLabels
	}
	m := &TenantMetrics{set: set, max: maxLabels, labels: map[string]string{}}
	for i := range m.classes {
		c := ladder.ClassAt(i).String()
		m.classes[i] = classSeries{
			ttft:   set.GetOrCreatePrometheusHistogramExt(`llb_class_ttft_seconds{class="`+c+`"}`, durationBuckets),
			parked: set.GetOrCreatePrometheusHistogramExt(`llb_class_parked_seconds{class="`+c+`"}`, durationBuckets),
		}
	}
	return m
}

// label is tenant's label value (bounded).
func (m *TenantMetrics) label(tenant string) string {
	if tenant == "" {
		return tenantLabelNone
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.labels[tenant]; ok {
		return l
	}
	l := tenantLabelOther
	if len(m.labels) < m.max {
		l = promlabel.Escape(tenant)
	}
	m.labels[tenant] = l
	return l
}

func (m *TenantMetrics) of(tenant string, class ladder.Class) *tenantSeries {
	k := seriesKey{tenant: m.label(tenant), class: class}
	if s, ok := m.series.Load(k); ok {
		return s.(*tenantSeries)
	}
	labels := `tenant="` + k.tenant + `",class="` + class.String() + `"`
	name := func(base, extra string) string {
		var b strings.Builder
		b.WriteString(base)
		b.WriteByte('{')
		b.WriteString(labels)
		if extra != "" {
			b.WriteByte(',')
			b.WriteString(extra)
		}
		b.WriteByte('}')
		return b.String()
	}
	s := &tenantSeries{
		requests:     m.set.GetOrCreateCounter(name("llb_tenant_requests_total", "")),
		parked:       m.set.GetOrCreateCounter(name("llb_tenant_parked_total", "")),
		parkedSecs:   m.set.GetOrCreateFloatCounter(name("llb_tenant_parked_seconds_total", "")),
		promptTokens: m.set.GetOrCreateCounter(name("llb_tenant_tokens_total", `kind="prompt"`)),
		complTokens:  m.set.GetOrCreateCounter(name("llb_tenant_tokens_total", `kind="completion"`)),
		refusals:     map[string]*metrics.Counter{},
		name:         name,
		set:          m.set,
	}
	got, _ := m.series.LoadOrStore(k, s)
	return got.(*tenantSeries)
}

// request counts one generation request of tenant in class.
func (m *TenantMetrics) request(tenant string, class ladder.Class) {
	m.of(tenant, class).requests.Inc()
}

// served records what an answered request cost and waited.
func (m *TenantMetrics) served(tenant string, class ladder.Class, prompt, completion uint32, parked, ttft time.Duration) {
	s := m.of(tenant, class)
	s.promptTokens.Add(int(prompt))
	s.complTokens.Add(int(completion))
	cs := &m.classes[class.Index()]
	if parked > 0 {
		s.parked.Inc()
		s.parkedSecs.Add(parked.Seconds())
		cs.parked.Update(parked.Seconds())
	}
	if ttft > 0 {
		cs.ttft.Update(ttft.Seconds())
	}
}

// refused counts a request llb refused with error code.
func (m *TenantMetrics) refused(tenant string, class ladder.Class, code string) {
	s := m.of(tenant, class)
	s.mu.Lock()
	c := s.refusals[code]
	if c == nil {
		c = s.set.GetOrCreateCounter(s.name("llb_tenant_refusals_total", `code="`+promlabel.Escape(code)+`"`))
		s.refusals[code] = c
	}
	s.mu.Unlock()
	c.Inc()
}

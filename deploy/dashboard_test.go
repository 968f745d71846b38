package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/llbproject/llb/ladder"
)

// dashboard is the part of a Grafana dashboard model the tests read.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Definition string          `json:"definition"`
			Query      json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr         string `json:"expr"`
		RefID        string `json:"refId"`
		LegendFormat string `json:"legendFormat"`
		Datasource   *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

// loadDashboard parses grafana/llb.json strictly.
func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/llb.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/llb.json does not parse: %v", err)
	}
	return d
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// queries are every PromQL expression of the dashboard (targets and
// template variables), with what each belongs to.
func queries(d dashboard) map[string]string {
	out := map[string]string{}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			out[tg.Expr] = "panel " + p.Title
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			out[v.Definition] = "variable " + v.Name
		}
	}
	return out
}

var (
	byClauseRE = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	matcherRE  = regexp.MustCompile(`([a-z_][a-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"`)
	legendRE   = regexp.MustCompile(`\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}`)
	labelVals  = regexp.MustCompile(`label_values\(\s*[a-z0-9_]+\s*,\s*([a-z_][a-z0-9_]*)\s*\)`)
	tierRE     = regexp.MustCompile(`\btier\s*=\s*"([^"]*)"`)
)

func TestDashboard_IsAWellFormedGrafanaModel(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 {
		t.Errorf("title %q, uid %q, schemaVersion %d; want all set (schema ≥ 30)", d.Title, d.UID, d.SchemaVersion)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	if !slices.Contains(vars, "datasource") || !slices.Contains(vars, "service") {
		t.Errorf("template variables %v; want datasource and service", vars)
	}
	ids := map[int]string{}
	for _, p := range allPanels(d.Panels) {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d is zero or also used by %q", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v does not fit the 24-column grid", p.Title, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v; want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: target %+v needs an expr and a unique refId", p.Title, tg)
			}
			refs[tg.RefID] = true
			if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") || strings.Count(tg.Expr, "{") != strings.Count(tg.Expr, "}") {
				t.Errorf("panel %q: unbalanced brackets in %s", p.Title, tg.Expr)
			}
		}
	}
}

func TestDashboard_QueriesOnlyMetricsLlbExports(t *testing.T) {
	src := scanSources(t)
	exported := src.metricNames()
	for expr, where := range queries(loadDashboard(t)) {
		for _, m := range metricNameRE.FindAllString(expr, -1) {
			base, suffix := m, ""
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, s); ok && src.histograms[b] {
					base, suffix = b, s
				}
			}
			if !exported[base] {
				t.Errorf("%s: %s is not a metric llb exports (query %s)", where, m, expr)
			}
			if suffix == "" && src.histograms[base] {
				t.Errorf("%s: %s is a histogram; query its _bucket, _sum or _count (query %s)", where, m, expr)
			}
			if strings.HasSuffix(m, "_bucket") && suffix == "" {
				t.Errorf("%s: %s is not a histogram llb registers (query %s)", where, m, expr)
			}
		}
	}
}

func TestDashboard_UsesOnlyLabelsAndTiersLlbWrites(t *testing.T) {
	labels := scanSources(t).labelNames()
	labels["le"] = true // histogram buckets
	known := func(where, expr, l string) {
		if !labels[l] {
			t.Errorf("%s: label %q is not one llb writes (%s)", where, l, expr)
		}
	}
	var tiers []string
	for i := range 64 {
		s := ladder.Tier(i).String()
		if strings.HasPrefix(s, "tier(") {
			break
		}
		tiers = append(tiers, s)
	}
	d := loadDashboard(t)
	for expr, where := range queries(d) {
		for _, m := range byClauseRE.FindAllStringSubmatch(expr, -1) {
			for _, l := range strings.Split(m[1], ",") {
				known(where, expr, strings.TrimSpace(l))
			}
		}
		for _, m := range matcherRE.FindAllStringSubmatch(expr, -1) {
			known(where, expr, m[1])
		}
		for _, m := range labelVals.FindAllStringSubmatch(expr, -1) {
			known(where, expr, m[1])
		}
		for _, m := range tierRE.FindAllStringSubmatch(expr, -1) {
			if !slices.Contains(tiers, m[1]) {
				t.Errorf("%s: tier %q is not a ladder tier %v (%s)", where, m[1], tiers, expr)
			}
		}
	}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			for _, m := range legendRE.FindAllStringSubmatch(tg.LegendFormat, -1) {
				known("panel "+p.Title, tg.LegendFormat, m[1])
			}
		}
	}
}

func TestDashboard_CoversTheOperatorSignals(t *testing.T) {
	var all strings.Builder
	for expr := range queries(loadDashboard(t)) {
		all.WriteString(expr + "\n")
	}
	for _, m := range []string{
		"llb_route_tier_total",
		"loxilb_pd_kv_tier15_hits_total", "loxilb_pd_kv_tier15_miss_reason_total",
		"loxilb_pd_kv_tier15_spills_total", "loxilb_pd_kv_tier15_cold_seeds_total",
		"loxilb_ai_pd_decode_ttft_seconds_bucket", "loxilb_ai_pd_prefill_duration_seconds_bucket",
		"loxilb_proxy_http_ttfb_seconds_bucket", "loxilb_proxy_http_responses_by_status_total",
		"llb_breaker_state", "loxilb_pd_cb_flips_total", "llb_endpoint_up",
		"loxilb_kv_subscriber_connected", "loxilb_pd_kv_blocks",
		"loxilb_pd_admission_queued_total", "loxilb_pd_admission_shed_total",
		"loxilb_pd_sessions_active", "llb_actor_restarts_total",
	} {
		if !regexp.MustCompile(`\b` + m + `\b`).MatchString(all.String()) {
			t.Errorf("no panel queries %s", m)
		}
	}
}

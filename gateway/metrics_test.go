package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/ladder"
)

func TestMetrics_DecisionCounters(t *testing.T) {
	set := metrics.NewSet()
	m := NewMetrics(set, `svc"1`)
	hit := decision(ladder.Tier15, 3, -1)
	hit.Flags = ladder.FlagSpill | ladder.FlagColdSeed
	miss := decision(ladder.Tier2, 1, 4)
	miss.Trace.Steps[0] = ladder.TraceStep{Tier: ladder.Tier0, Reason: ladder.ReasonSessionMiss}
	miss.Trace.Steps[1] = ladder.TraceStep{Tier: ladder.Tier15, Reason: ladder.ReasonEmptyText}
	miss.Trace.N = 2
	off := decision(ladder.TierSelector, 0, -1)
	off.Trace.Steps[0] = ladder.TraceStep{Tier: ladder.Tier15, Reason: ladder.ReasonKVOff}
	off.Trace.N = 1
	session := decision(ladder.Tier0, 0, 4)
	for _, d := range []ladder.Decision{hit, miss, off, session} {
		m.decision(&d)
	}
	m.status(200)
	m.status(200)
	m.status(StatusClientGone)
	var b bytes.Buffer
	set.WritePrometheus(&b)
	out := b.String()
	svc := `service="svc\"1"`
	for _, want := range []string{
		`loxilb_pd_kv_tier15_hits_total{` + svc + `,ep_idx="3"} 1`,
		`loxilb_pd_kv_tier15_miss_reason_total{` + svc + `,reason="text_empty"} 1`,
		`loxilb_pd_kv_tier15_miss_reason_total{` + svc + `,reason="mode_off"} 1`,
		`loxilb_pd_kv_tier15_fallthrough_total{` + svc + `} 1`,
		`loxilb_pd_kv_tier15_spills_total{` + svc + `} 1`,
		`loxilb_pd_kv_tier15_cold_seeds_total{` + svc + `} 1`,
		`loxilb_ai_pd_session_hits_total{` + svc + `} 1`,
		`llb_route_tier_total{` + svc + `,tier="1.5"} 1`,
		`llb_route_tier_total{` + svc + `,tier="sel"} 1`,
		`loxilb_proxy_http_responses_by_status_total{` + svc + `,code="200"} 2`,
		`loxilb_proxy_http_responses_by_status_total{` + svc + `,code="499"} 1`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	m.Unregister()
	b.Reset()
	set.WritePrometheus(&b)
	if strings.Contains(b.String(), "loxilb_") {
		t.Errorf("metrics remain after Unregister:\n%s", b.String())
	}
}

func TestAccessLog_OneLinePerRequest(t *testing.T) {
	f := newPDFleet(t, []bool{false}, nil)
	var buf safeBuffer
	log := zerolog.New(&buf)
	set := metrics.NewSet()
	url, _ := startGateway(t, f.cfg, Deps{Router: f.router, Log: log, Metrics: NewMetrics(set, "pd")})
	resp, _ := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p","stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	post(t, testClient(t), url+"/nope", `{}`)
	f.router.checkTicketsClosed(t, 1)
	lines := buf.lines(t, 3)
	var access, debug []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		switch m["message"] {
		case "request":
			access = append(access, m)
		case "routed":
			debug = append(debug, m)
		}
	}
	if len(access) != 2 || len(debug) != 1 {
		t.Fatalf("got %d access and %d debug lines; want 2 and 1:\n%s", len(access), len(debug), strings.Join(lines, "\n"))
	}
	if debug[0]["level"] != "debug" || debug[0][logfield.LLBRoute] != "tier=2 prefill=0 decode=1" {
		t.Errorf("decision trace line %v", debug[0])
	}
	ok, notFound := access[0], access[1]
	for _, k := range []string{logfield.Status, logfield.Tier, logfield.PrefillAddr, logfield.DecodeAddr, logfield.TTFT, logfield.TTFB,
		logfield.Duration, logfield.Bytes, logfield.PrefillDuration, logfield.KVParams, logfield.RequestID, logfield.LLBRoute, logfield.Model} {
		if _, has := ok[k]; !has {
			t.Errorf("access line %v lacks %q", ok, k)
		}
	}
	if ok[logfield.Status] != float64(200) || ok[logfield.Tier] != "2" || ok["message"] != "request" {
		t.Errorf("access line %v", ok)
	}
	if notFound[logfield.Status] != float64(404) || notFound[logfield.Code] != CodeUnknownURL {
		t.Errorf("404 access line %v", notFound)
	}
	var b bytes.Buffer
	set.WritePrometheus(&b)
	for _, want := range []string{`loxilb_ai_requests_total{service="pd"} 1`, `loxilb_proxy_http_ttfb_seconds_count{service="pd"} 1`,
		`loxilb_ai_request_duration_seconds_count{service="pd"} 1`, `loxilb_ai_active_streams{service="pd"} 0`} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// safeBuffer is a log sink for concurrent writers that can wait for lines.
type safeBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// lines returns the logged lines once there are at least n of them.
func (s *safeBuffer) lines(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		text := strings.TrimSpace(s.buf.String())
		s.mu.Unlock()
		if l := strings.Split(text, "\n"); text != "" && len(l) >= n {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d log lines in %q", n, text)
		}
		<-time.After(2 * time.Millisecond)
	}
}

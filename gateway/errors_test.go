package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
)

func TestErrorForDecision_MapsEveryRefusal(t *testing.T) {
	unavailable := func(r ladder.Reason) ladder.Decision {
		d := decision(ladder.TierNone, -1, -1)
		d.Unavailable = r
		return d
	}
	admission := func(a ladder.Admission) ladder.Decision {
		d := decision(ladder.TierAdmission, -1, -1)
		d.Admission = a
		return d
	}
	tests := []struct {
		name       string
		give       ladder.Decision
		wantStatus int
		wantCode   string
		wantRetry  bool
	}{
		{"shed", admission(ladder.Shed), 429, CodeOverloaded, true},
		{"global valve", admission(ladder.Refuse), 503, CodeServiceUnavailable, true},
		{"park reaching the gateway", admission(ladder.Park), 503, CodeServiceUnavailable, true},
		{"P/D pool unavailable", unavailable(ladder.ReasonPDPoolUnavailable), 503, CodePoolUnavailable, false},
		{"no healthy backend", unavailable(ladder.ReasonNoHealthyBackend), 503, CodeNoHealthyBackend, false},
		{"nothing chosen", decision(ladder.TierNone, -1, -1), 503, CodeNoHealthyBackend, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.give.Available() {
				t.Fatal("test decision is available")
			}
			e := errorForDecision(&tt.give)
			if e.Status != tt.wantStatus || e.Code != tt.wantCode || e.Type != tt.wantCode || (e.RetryAfter > 0) != tt.wantRetry {
				t.Errorf("got %d %s type %s retry-after %v; want %d %s retry %v", e.Status, e.Code, e.Type, e.RetryAfter, tt.wantStatus, tt.wantCode, tt.wantRetry)
			}
		})
	}
}

func TestErrorForRouteErr_MapsRouterErrors(t *testing.T) {
	tests := []struct {
		name       string
		give       error
		wantStatus int
		wantCode   string
	}{
		{"park timeout", fmt.Errorf("svc: %w", actors.ErrParkTimeout), 504, CodeParkTimeout},
		{"stopped", actors.ErrStopped, 503, CodeServiceUnavailable},
		{"router timeout", actors.ErrRouterTimeout, 503, CodeServiceUnavailable},
		{"deadline", context.DeadlineExceeded, 504, CodeStreamDuration},
		{"anything else", errors.New("mailbox full"), 503, CodeServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := errorForRouteErr(tt.give)
			if e.Status != tt.wantStatus || e.Code != tt.wantCode {
				t.Errorf("got %d %s; want %d %s", e.Status, e.Code, tt.wantStatus, tt.wantCode)
			}
		})
	}
}

func TestClientError_WritesOpenAIShape(t *testing.T) {
	var rec fasthttp.Response
	e := planeError(http.StatusTooManyRequests, CodeOverloaded, `all "prefill" endpoints busy`)
	e.RetryAfter = 1500 * time.Millisecond
	if n := e.write(&rec, nil); n != len(rec.Body()) {
		t.Errorf("write returned %d; the body has %d bytes", n, len(rec.Body()))
	}
	if rec.StatusCode() != 429 || string(rec.Header.Peek("Retry-After")) != "2" || string(rec.Header.ContentType()) != "application/json" {
		t.Errorf("got %d retry-after %q content-type %q", rec.StatusCode(), rec.Header.Peek("Retry-After"), rec.Header.ContentType())
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(rec.Body(), &got); err != nil {
		t.Fatalf("body %s: %v", rec.Body(), err)
	}
	want := map[string]any{"message": `all "prefill" endpoints busy`, "type": CodeOverloaded, "param": nil, "code": CodeOverloaded}
	if fmt.Sprint(got["error"]) != fmt.Sprint(want) {
		t.Errorf("error = %v; want %v", got["error"], want)
	}
}

// TestHandler_RefusalsReachTheClient drives each router refusal through a
// real listener.
func TestHandler_RefusalsReachTheClient(t *testing.T) {
	shed := decision(ladder.TierAdmission, -1, -1)
	shed.Admission = ladder.Shed
	pdGone := decision(ladder.TierNone, -1, -1)
	pdGone.Unavailable = ladder.ReasonPDPoolUnavailable
	tests := []struct {
		name       string
		route      func(*actors.RouteRequest, int) (actors.Route, error)
		wantStatus int
		wantCode   string
	}{
		{"shed", fixedRoute(shed), 429, CodeOverloaded},
		{"pool unavailable", fixedRoute(pdGone), 503, CodePoolUnavailable},
		{"park timeout", func(*actors.RouteRequest, int) (actors.Route, error) { return actors.Route{}, actors.ErrParkTimeout }, 504, CodeParkTimeout},
		{"stopped", func(*actors.RouteRequest, int) (actors.Route, error) { return actors.Route{}, actors.ErrStopped }, 503, CodeServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newFakeVLLM(t)
			fr := newFakeRouter(tt.route)
			url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
			resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"x"}`)
			e := decodeError(t, body)
			if resp.StatusCode != tt.wantStatus || e.Error.Code != tt.wantCode {
				t.Errorf("got %d %s; want %d %s", resp.StatusCode, e.Error.Code, tt.wantStatus, tt.wantCode)
			}
			if resp.Header.Get(HeaderRoute) == "" {
				t.Errorf("no %s header on a refusal", HeaderRoute)
			}
			if len(be.requests()) != 0 {
				t.Errorf("backend got %d requests for a refused request", len(be.requests()))
			}
			_, outcomes, fin := fr.snapshot()
			if len(outcomes) != 0 || len(fin) != 0 {
				t.Errorf("refused request reported %d outcomes, %d finishes; want none", len(outcomes), len(fin))
			}
		})
	}
}

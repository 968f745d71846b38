package gateway

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llbproject/llb/rule"
)

// probeSteps drives one endpoint's judged probe through a script: before
// each probe, optionally a sign of life and a pause; each probe returns the
// step's result at once.
type probeStep struct {
	lifeBefore bool          // a leg reads response bytes before the probe
	pause      time.Duration // then this long passes
	lifeDuring bool          // a leg reads response bytes while the probe runs
	result     error         // what the probe itself finds
	want       bool          // the judged probe passes
}

var (
	errTimeout = &ProbeError{Target: "x", Kind: ErrProbeTimeout, Detail: "context deadline exceeded"}
	errRefused = &ProbeError{Target: "x", Kind: ErrProbeConnect, Detail: "connection refused"}
	errStatus  = &ProbeError{Target: "x", Kind: ErrProbeStatus, Detail: "status 503"}
)

// A probe timeout counts against an endpoint only when the endpoint
// answered nothing since the previous probe ended: a starved engine whose
// streams stall through a whole probe attempt, yet flowed between two
// probes, is busy, not down (issue 31: 4 227 × 503 no_healthy_backend in
// one 4 000-stream run, a probe timing out while no stream produced a byte
// for its 2 s). A refusal, a wrong status, and a timeout after a silent
// cycle still fail.
func TestEndpointWatch_ProbeJudgesATimeoutByTheWholeCycle(t *testing.T) {
	gap := 3 * lifeGrain
	// A cycle long enough that every step of a case falls within it.
	long := rule.Probe{Type: rule.ProbeHTTP, Period: time.Second, AttemptTimeout: time.Second}
	cases := []struct {
		name  string
		cfg   rule.Probe
		steps []probeStep
	}{
		{"a timeout with nothing ever read fails", long, []probeStep{
			{result: errTimeout, want: false},
			{pause: gap, result: errTimeout, want: false},
		}},
		{"a timeout while a leg reads during the attempt passes", long, []probeStep{
			{lifeDuring: true, result: errTimeout, want: true},
		}},
		{"a timeout after bytes between two probes passes (silent attempt)", long, []probeStep{
			{result: errTimeout, want: false},
			{lifeBefore: true, pause: gap, result: errTimeout, want: true},
		}},
		{"bytes only before the previous probe ended do not excuse the next", long, []probeStep{
			{lifeBefore: true, pause: gap, result: nil, want: true},
			{pause: gap, result: errTimeout, want: false},
		}},
		{"a passing probe is not a sign of life for the next probe's timeout", long, []probeStep{
			{result: nil, want: true},
			{pause: gap, result: errTimeout, want: false},
		}},
		{"a refusal fails whatever the legs read", long, []probeStep{
			{lifeBefore: true, pause: gap, lifeDuring: true, result: errRefused, want: false},
		}},
		{"a wrong status fails whatever the legs read", long, []probeStep{
			{lifeBefore: true, pause: gap, lifeDuring: true, result: errStatus, want: false},
		}},
		{"the look back is one cycle at most (a down endpoint's backoff)", rule.Probe{Type: rule.ProbeHTTP, Period: 2 * lifeGrain, AttemptTimeout: lifeGrain}, []probeStep{
			{result: errTimeout, want: false},
			{lifeBefore: true, pause: 10 * gap, result: errTimeout, want: false},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := NewEndpointWatch()
			s := w.signs(0)
			var step probeStep
			p := w.Probe(0, func(context.Context) error {
				if step.lifeDuring {
					s.note(time.Now())
				}
				return step.result
			}, tc.cfg)
			for i, st := range tc.steps {
				step = st
				if st.lifeBefore {
					s.note(time.Now())
				}
				time.Sleep(st.pause)
				err := p(context.Background())
				if got := err == nil; got != st.want {
					t.Fatalf("step %d: judged %v (err %v); want pass=%v", i, got, err, st.want)
				}
				if err != nil && !errors.Is(err, st.result.(*ProbeError).Kind) {
					t.Fatalf("step %d: %v; want the probe's own error %v", i, err, st.result)
				}
			}
		})
	}
}

// A passing probe is an answer a dial may count on; a failing one is not.
func TestEndpointWatch_ProbeAnswersCountForDials(t *testing.T) {
	w := NewEndpointWatch()
	s := w.signs(0)
	cfg := rule.Probe{Type: rule.ProbeHTTP, Period: time.Second, AttemptTimeout: time.Second}
	before := time.Now()
	_ = w.Probe(0, func(context.Context) error { return errRefused }, cfg)(context.Background())
	if s.answered(before) {
		t.Fatal("a refused probe counted as an answer")
	}
	_ = w.Probe(0, func(context.Context) error { return nil }, cfg)(context.Background())
	if !s.answered(before) {
		t.Fatal("a passing probe did not count as an answer")
	}
	if s.answered(time.Now().Add(time.Second)) {
		t.Fatal("an answer counted for a later time")
	}
}

func TestQuietCycle(t *testing.T) {
	def := time.Duration(rule.DefaultProbePeriodSec)*time.Second + rule.DefaultProbeAttemptTimeout
	cases := []struct {
		cfg  rule.Probe
		want time.Duration
	}{
		{rule.Probe{Type: rule.ProbeHTTP, Period: 5 * time.Second, AttemptTimeout: 2 * time.Second}, 7 * time.Second},
		{rule.Probe{Type: rule.ProbeTCP, Period: time.Second, AttemptTimeout: time.Second}, 2 * time.Second},
		{rule.Probe{Type: rule.ProbeNone}, def},
		{rule.Probe{}, def},
	}
	for _, tc := range cases {
		if got := quietCycle(tc.cfg); got != tc.want {
			t.Errorf("quietCycle(%+v) = %v; want %v", tc.cfg, got, tc.want)
		}
	}
}

// The endpoint's health state machine (package actors) weighs a probe
// that only timed out less than a refusal; it asks the error's Timeout.
func TestProbeError_Timeout(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{{errTimeout, true}, {errRefused, false}, {errStatus, false}} {
		var to interface{ Timeout() bool }
		if got := errors.As(tc.err, &to) && to.Timeout(); got != tc.want {
			t.Errorf("%v: Timeout %v; want %v", tc.err, got, tc.want)
		}
	}
}

// A probe that times out returns the timeout at its attempt's deadline but
// reads on: its late pass wakes the endpoint (OnLifeSign) and excuses the
// next timeout. After a failed probe the next response bytes wake it once;
// after a refusal they do not.
func TestEndpointWatch_ALateAnswerIsASignOfLife(t *testing.T) {
	w := NewEndpointWatch()
	woke := make(chan int, 4)
	w.OnLifeSign(func(ep int) { woke <- ep })
	cfg := rule.Probe{Type: rule.ProbeHTTP, Period: time.Second, AttemptTimeout: 50 * time.Millisecond}
	var answers atomic.Bool // the probe gets a late answer; otherwise none
	answers.Store(true)
	p := w.Probe(1, func(ctx context.Context) error {
		if !answers.Load() {
			<-ctx.Done()
			return errTimeout
		}
		select {
		case <-time.After(150 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return errTimeout
		}
	}, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.AttemptTimeout)
	start := time.Now()
	err := p(ctx)
	cancel()
	if !errors.Is(err, ErrProbeTimeout) || time.Since(start) > time.Second {
		t.Fatalf("probe: %v after %v; want a timeout at the attempt's deadline", err, time.Since(start))
	}
	select {
	case ep := <-woke:
		if ep != 1 {
			t.Fatalf("woke endpoint %d; want 1", ep)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the late answer woke nobody")
	}
	answers.Store(false)
	ctx, cancel = context.WithTimeout(context.Background(), cfg.AttemptTimeout)
	err = p(ctx)
	cancel()
	if err != nil {
		t.Fatalf("a timeout after a late answer: %v; want it excused", err)
	}

	s := w.signs(2)
	for _, tt := range []struct {
		result error
		wake   bool
	}{{errTimeout, true}, {errRefused, false}} {
		_ = w.Probe(2, func(context.Context) error { return tt.result }, cfg)(context.Background())
		s.note(time.Now().Add(time.Hour)) // past the grain: a store
		s.note(time.Now().Add(2 * time.Hour))
		got := 0
		for len(woke) > 0 {
			<-woke
			got++
		}
		if want := map[bool]int{true: 1, false: 0}[tt.wake]; got != want {
			t.Fatalf("after %v: %d wakes from bytes read; want %d", tt.result, got, want)
		}
	}
}

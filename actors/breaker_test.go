package actors

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/llbproject/llb/rule"
)

func TestBreaker_OpensAfterConsecutiveTransportFailures(t *testing.T) {
	b := breakerCore{cfg: rule.Breaker{Enabled: true, Threshold: 3, OriginErrThreshold: 3}}
	steps := []struct {
		give outcomeClass
		want BreakerState
	}{
		{classTransport, BreakerClosed},
		{classTransport, BreakerClosed},
		{classSuccess, BreakerClosed}, // resets
		{classTransport, BreakerClosed},
		{classBackpressure, BreakerClosed}, // alive: resets the transport streak
		{classTransport, BreakerClosed},
		{classTransport, BreakerClosed},
		{classTransport, BreakerOpen},
	}
	for i, s := range steps {
		if got, _ := b.observe(t0, s.give); got != s.want {
			t.Fatalf("step %d (%d): got %s; want %s", i, s.give, got, s.want)
		}
	}
}

func TestBreaker_OriginStreakIgnoresClientErrorsAndBackpressure(t *testing.T) {
	b := breakerCore{cfg: rule.Breaker{Enabled: true, Threshold: 3, OriginErrThreshold: 3}}
	for i, c := range []outcomeClass{classOrigin5xx, classClientError, classOrigin5xx, classBackpressure} {
		if got, _ := b.observe(t0, c); got != BreakerClosed {
			t.Fatalf("step %d: %s; want closed", i, got)
		}
	}
	if got, changed := b.observe(t0, classOrigin5xx); got != BreakerOpen || !changed {
		t.Fatalf("third 5xx: %s (changed %v); want open", got, changed)
	}
}

func TestBreaker_OriginDemotionOffWithZeroThreshold(t *testing.T) {
	b := breakerCore{cfg: rule.Breaker{Enabled: true, Threshold: 3}}
	for i := 0; i < 10; i++ {
		if got, _ := b.observe(t0, classOrigin5xx); got != BreakerClosed {
			t.Fatalf("5xx %d opened the breaker with LLB_PD_ORIGIN_ERR_THRESHOLD=0", i)
		}
	}
}

func TestBreaker_HalfOpenTrialDecides(t *testing.T) {
	b := breakerCore{cfg: rule.Breaker{Enabled: true, Threshold: 1, OriginErrThreshold: 3}}
	b.observe(t0, classTransport)
	epoch := b.epoch
	if b.halfOpen(epoch + 1) {
		t.Fatal("a stale timer half-opened the breaker")
	}
	if !b.halfOpen(epoch) || b.state != BreakerHalfOpen {
		t.Fatalf("state %s; want half_open", b.state)
	}
	if got, _ := b.observe(t0, classTransport); got != BreakerOpen {
		t.Fatalf("failed trial: %s; want open", got)
	}
	if !b.halfOpen(b.epoch) {
		t.Fatal("second window did not half-open")
	}
	if got, _ := b.observe(t0, classClientError); got != BreakerClosed {
		t.Fatalf("trial answered 4xx: %s; want closed (the endpoint is reachable)", got)
	}
}

func TestBreaker_DisabledNeverOpens(t *testing.T) {
	b := breakerCore{cfg: rule.Breaker{Threshold: 1}}
	for i := 0; i < 5; i++ {
		if got, _ := b.observe(t0, classTransport); got != BreakerClosed {
			t.Fatal("a disabled breaker opened")
		}
	}
}

func TestProbe_ConsecutiveFailuresWithFirstProbeShortcut(t *testing.T) {
	p := newProbeCore(rule.Probe{Period: time.Second, Retries: 3, MaxBackoff: 4 * time.Second})
	bad := errors.New("refused")
	if !p.observe(bad) || p.up {
		t.Fatal("a failing first probe must mark the endpoint down at once")
	}
	if !p.observe(nil) || !p.up {
		t.Fatal("one success must bring it back up")
	}
	if p.observe(bad) || p.observe(bad) || !p.up {
		t.Fatal("two failures (retries 3) must not mark it down")
	}
	p.observe(nil) // any success resets the streak (LoxiLB #1087)
	p.observe(bad)
	p.observe(bad)
	if !p.up {
		t.Fatal("streak was not reset by the success")
	}
	if !p.observe(bad) || p.up {
		t.Fatal("third consecutive failure must mark it down")
	}
	if got := p.nextDelay(); got != 4*time.Second {
		t.Fatalf("backoff while down = %v; want the 4s cap", got)
	}
}

// A down endpoint whose last probe only timed out is probed every period:
// a loaded engine is back within a period of answering. One that refuses
// backs off.
func TestProbe_NoBackoffAfterATimeout(t *testing.T) {
	p := newProbeCore(rule.Probe{Period: time.Second, Retries: 2, MaxBackoff: 6 * time.Second})
	for range 4 {
		p.observe(probeTimeout{})
	}
	if p.up {
		t.Fatal("four timeouts in a row left the endpoint up")
	}
	if got := p.nextDelay(); got != time.Second {
		t.Fatalf("after timeouts the next probe in %v; want the period (1s)", got)
	}
	p.observe(errors.New("refused"))
	if got := p.nextDelay(); got != 6*time.Second {
		t.Fatalf("after a refusal the next probe in %v; want the backoff cap (6s)", got)
	}
}

// probeTimeout is a probe error that says only that the probe timed out.
type probeTimeout struct{}

func (probeTimeout) Error() string { return "probe timed out" }
func (probeTimeout) Timeout() bool { return true }

// A first probe that only timed out is one failure like any other: llbd
// started in front of a loaded engine must not refuse its clients for a
// late /health. A refusal on the first probe still takes it down at once.
func TestProbe_AFirstProbeThatTimesOutIsOneFailure(t *testing.T) {
	cases := []struct {
		name     string
		results  []error
		wantUp   []bool
		wantFail int
	}{
		{"refused first", []error{errors.New("refused")}, []bool{false}, 1},
		{"timed out first", []error{probeTimeout{}, probeTimeout{}}, []bool{true, false}, 2},
		{"wrapped timeout first", []error{fmt.Errorf("probe x: %w", probeTimeout{}), nil}, []bool{true, true}, 0},
		{"timeout then refusal", []error{probeTimeout{}, errors.New("refused")}, []bool{true, false}, 2},
	}
	for _, tc := range cases {
		p := newProbeCore(rule.Probe{Period: time.Second, Retries: 2, MaxBackoff: 4 * time.Second})
		for i, err := range tc.results {
			p.observe(err)
			if p.up != tc.wantUp[i] {
				t.Fatalf("%s: after result %d (%v) up=%v; want %v", tc.name, i, err, p.up, tc.wantUp[i])
			}
		}
		if p.failures != tc.wantFail {
			t.Errorf("%s: %d failures; want %d", tc.name, p.failures, tc.wantFail)
		}
	}
}

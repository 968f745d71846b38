package inventory

import (
	"testing"
	"time"
)

func TestLogLimiter_AllowsOneLinePerIntervalAndCountsTheRest(t *testing.T) {
	l := logLimiter{every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at             time.Duration
		wantOK         bool
		wantSuppressed int
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{9 * time.Second, false, 0},
		{10 * time.Second, true, 2},
		{11 * time.Second, false, 0},
		{30 * time.Second, true, 1},
	}
	for _, s := range steps {
		ok, n := l.allow(t0.Add(s.at))
		if ok != s.wantOK || n != s.wantSuppressed {
			t.Fatalf("at %v: got %v,%d; want %v,%d", s.at, ok, n, s.wantOK, s.wantSuppressed)
		}
	}
}

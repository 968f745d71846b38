package proxybench

import (
	"errors"
	"testing"
	"time"
)

const wrkReport = `Running 10s test @ http://127.0.0.23:18002/v1/completions
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   683.59us    1.10ms  25.44ms   94.65%
    Req/Sec    49.10k     5.02k   56.60k    73.00%
  Latency Distribution
     50%  587.00us
     75%  706.00us
     90%    0.91ms
     99%    5.01ms
  488633 requests in 10.00s, 189.93MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:  48861.88
Transfer/sec:     18.99MB
`

func TestParseWrk_ReadsRateLatencyAndErrors(t *testing.T) {
	got, err := parseWrk(wrkReport)
	if err != nil {
		t.Fatal(err)
	}
	want := WrkRun{ReqPerSec: 48861.88, P50: 587 * time.Microsecond, P99: 5010 * time.Microsecond, Requests: 488633, Errors: 7}
	if got != want {
		t.Errorf("got %+v; want %+v", got, want)
	}
}

func TestParseWrk_RejectsAReportWithoutLatencies(t *testing.T) {
	if _, err := parseWrk("Requests/sec: 12.0\n"); !errors.Is(err, ErrTool) {
		t.Errorf("err = %v; want ErrTool", err)
	}
}

func TestParseWrkDuration(t *testing.T) {
	tests := []struct {
		give string
		want time.Duration
	}{
		{"113.00us", 113 * time.Microsecond},
		{"1.31ms", 1310 * time.Microsecond},
		{"2.05s", 2050 * time.Millisecond},
		{"1.00m", time.Minute},
	}
	for _, tt := range tests {
		got, err := parseWrkDuration(tt.give)
		if err != nil || got != tt.want {
			t.Errorf("parseWrkDuration(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
		}
	}
	if _, err := parseWrkDuration("12parsecs"); err == nil {
		t.Error("a bad unit parsed")
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		give []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}}
	for _, tt := range tests {
		if got := median(tt.give); got != tt.want {
			t.Errorf("median(%v) = %v; want %v", tt.give, got, tt.want)
		}
	}
}

package des

import "testing"

func TestSummarize_NearestRankPercentiles(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100..1, unsorted on purpose
	}
	for _, tc := range []struct {
		name string
		give []float64
		want Latency
	}{
		{"empty", nil, Latency{}},
		{"one", []float64{3}, Latency{Mean: 3, P50: 3, P90: 3, P99: 3}},
		{"ten", []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, Latency{Mean: 5.5, P50: 5, P90: 9, P99: 10}},
		{"hundred", hundred, Latency{Mean: 50.5, P50: 50, P90: 90, P99: 99}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(tc.give); got != tc.want {
				t.Fatalf("got %+v; want %+v", got, tc.want)
			}
		})
	}
}

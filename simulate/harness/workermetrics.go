package harness

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llbproject/llb/simulate/worker"
)

// histTotals are a Prometheus histogram's _sum and _count.
type histTotals struct {
	sum   float64
	count uint64
}

// scrapeTTFT reads the serving workers' own TTFT histogram totals (seconds
// from the request reaching the worker to its first token's engine time:
// vllm:time_to_first_token_seconds, or the dialect's, ttftSource) from
// their metrics, as a Prometheus scraper would.
func scrapeTTFT(ctx context.Context, ws []*worker.Worker) (histTotals, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	var t histTotals
	for _, w := range ws {
		path, series := ttftSource(w.Config().Dialect)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.Addr()+path, nil)
		if err != nil {
			return t, err
		}
		res, err := client.Do(req)
		if err != nil {
			return t, fmt.Errorf("scrape %s: %w", w.Addr(), err)
		}
		h, err := parseHistTotals(bufio.NewScanner(res.Body), series)
		res.Body.Close()
		if err != nil {
			return t, fmt.Errorf("scrape %s: %w", w.Addr(), err)
		}
		t.sum += h.sum
		t.count += h.count
	}
	return t, nil
}

// parseHistTotals finds name_sum and name_count in a Prometheus text
// exposition (labels ignored, series of the same name added up).
func parseHistTotals(sc *bufio.Scanner, name string) (histTotals, error) {
	var t histTotals
	for sc.Scan() {
		line := sc.Text()
		metric, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		base, _, _ := strings.Cut(metric, "{")
		switch base {
		case name + "_sum":
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				return t, fmt.Errorf("%s: %w", line, err)
			}
			t.sum += v
		case name + "_count":
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				return t, fmt.Errorf("%s: %w", line, err)
			}
			t.count += uint64(v)
		}
	}
	return t, sc.Err()
}

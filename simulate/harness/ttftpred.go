package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// llbd checks every TTFT it predicted against the one it measured and
// counts the relative error, (predicted − actual) / actual, in the
// histogram predErrSeries per endpoint. The harness reads it from llbd's
// /metrics at the warm-up boundary and at the end of a run: the
// difference is the predictions compared in the measured window.

// predErrSeries is llbd's TTFT prediction error histogram.
const predErrSeries = "llb_ttft_prediction_error_ratio"

// predCounts are a reading of predErrSeries summed over endpoints (and
// replicas): the cumulative count at each bucket bound, and the total.
type predCounts struct {
	le    map[string]float64
	count float64
}

// add adds o to p.
func (p *predCounts) add(o predCounts) {
	if p.le == nil {
		p.le = map[string]float64{}
	}
	for k, v := range o.le {
		p.le[k] += v
	}
	p.count += o.count
}

// TTFTPrediction is how close llbd's TTFT predictions came over a run's
// measured window (predictions compared from the warm-up boundary to the
// end; llbd compares a prediction when the request's first token comes).
type TTFTPrediction struct {
	// Compared is how many predictions llbd compared; 0 when none or not
	// measured (a peer, an attached llbd whose metrics were unreadable).
	Compared int
	// Within20 and Within50 are the shares of them within 20 % and 50 %
	// of the measured TTFT (|predicted − actual| ≤ 0.2 · actual, 0.5 ·
	// actual): the error's p50 is at most 20 % when Within20 ≥ 0.5, its
	// p90 at most 50 % when Within50 ≥ 0.9.
	Within20, Within50 float64
}

// since is the prediction record between reading p0 and reading p.
func (p predCounts) since(p0 predCounts) TTFTPrediction {
	n := p.count - p0.count
	if n <= 0 {
		return TTFTPrediction{}
	}
	within := func(bound string) float64 {
		in := (p.le[bound] - p0.le[bound]) - (p.le["-"+bound] - p0.le["-"+bound])
		return in / n
	}
	return TTFTPrediction{Compared: int(n), Within20: within("0.2"), Within50: within("0.5")}
}

// parsePredCounts reads predErrSeries from a Prometheus text exposition.
func parsePredCounts(sc *bufio.Scanner) (predCounts, error) {
	p := predCounts{le: map[string]float64{}}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		metric, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		base, labels, _ := strings.Cut(metric, "{")
		if base != predErrSeries+"_bucket" && base != predErrSeries+"_count" {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return p, fmt.Errorf("%s: %w", line, err)
		}
		if base == predErrSeries+"_count" {
			p.count += v
			continue
		}
		_, le, ok := strings.Cut(labels, `le="`)
		if !ok {
			return p, fmt.Errorf("%s: bucket without le", line)
		}
		le, _, _ = strings.Cut(le, `"`)
		p.le[le] += v
	}
	return p, sc.Err()
}

// predictionCounts reads the daemon's TTFT prediction histogram.
func (d *Daemon) predictionCounts(ctx context.Context) (predCounts, error) {
	code, body, err := d.do(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return predCounts{}, fmt.Errorf("GET /metrics: %w: %w", ErrDaemon, err)
	}
	if code != http.StatusOK {
		return predCounts{}, fmt.Errorf("GET /metrics: %d: %w", code, ErrDaemon)
	}
	return parsePredCounts(bufio.NewScanner(bytes.NewReader(body)))
}

// predictionReader reads the prediction histograms of every daemon in ds,
// summed.
func predictionReader(ds ...*Daemon) func(context.Context) (predCounts, error) {
	return func(ctx context.Context) (predCounts, error) {
		var sum predCounts
		for _, d := range ds {
			p, err := d.predictionCounts(ctx)
			if err != nil {
				return predCounts{}, err
			}
			sum.add(p)
		}
		return sum, nil
	}
}

package proxybench

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"
)

// RateResult is the latency of each path at a fixed request rate and llbd's
// addition to it.
type RateResult struct {
	// Rate is the request rate (per second).
	Rate int
	// Direct and LLBD are latency percentiles counted from each request's
	// scheduled time (open loop: a late send counts); Added is LLBD minus
	// Direct.
	Direct, LLBD, Added Percentiles
	// SentDirect, SentLLBD and SentAdded count from the moment the request
	// was sent instead, which leaves the load generator's own scheduling
	// lag out (on a loaded machine it dominates the scheduled figures).
	SentDirect, SentLLBD, SentAdded Percentiles
	// Errors counts failed or non-200 requests (both paths).
	Errors int64
}

// Percentiles of a latency sample.
type Percentiles struct {
	P50, P99 time.Duration
	N        int64
}

func percentilesOf(h *hdrhistogram.Histogram) Percentiles {
	return Percentiles{
		P50: time.Duration(h.ValueAtQuantile(50)) * time.Microsecond,
		P99: time.Duration(h.ValueAtQuantile(99)) * time.Microsecond,
		N:   h.TotalCount(),
	}
}

func (p Percentiles) minus(q Percentiles) Percentiles {
	return Percentiles{P50: p.P50 - q.P50, P99: p.P99 - q.P99}
}

func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(30*time.Second/time.Microsecond), 3)
}

// addedLatency sends requests at cfg.Rate to the direct path and to llbd,
// open loop, in two interleaved rounds of cfg.RateDuration each.
func (e *env) addedLatency(ctx context.Context) (RateResult, error) {
	res := RateResult{Rate: e.cfg.Rate}
	paths := []struct {
		addr        string
		sched, sent *hdrhistogram.Histogram
	}{{e.a.nginx, newHist(), newHist()}, {e.a.llbd, newHist(), newHist()}}
	for _, p := range paths { // warm the connections, unmeasured
		if _, err := openLoop(ctx, p.addr, e.cfg.Rate, time.Second, newHist(), newHist()); err != nil {
			return res, err
		}
	}
	for round := range 2 {
		for _, p := range paths {
			errs, err := openLoop(ctx, p.addr, e.cfg.Rate, e.cfg.RateDuration, p.sched, p.sent)
			if err != nil {
				return res, err
			}
			res.Errors += errs
			e.cfg.progress("rate round %d %s: %d requests, p50 %v p99 %v (from the send: %v, %v)", round+1, p.addr, p.sched.TotalCount(),
				time.Duration(p.sched.ValueAtQuantile(50))*time.Microsecond, time.Duration(p.sched.ValueAtQuantile(99))*time.Microsecond,
				time.Duration(p.sent.ValueAtQuantile(50))*time.Microsecond, time.Duration(p.sent.ValueAtQuantile(99))*time.Microsecond)
		}
	}
	res.Direct, res.LLBD = percentilesOf(paths[0].sched), percentilesOf(paths[1].sched)
	res.Added = res.LLBD.minus(res.Direct)
	res.SentDirect, res.SentLLBD = percentilesOf(paths[0].sent), percentilesOf(paths[1].sent)
	res.SentAdded = res.SentLLBD.minus(res.SentDirect)
	return res, nil
}

// openLoop sends rate requests per second to addr for d: request i leaves
// at start + i/rate whether or not earlier ones returned, and its latency
// is measured from that scheduled time (so a stall delays every request
// scheduled during it, as it would real clients) into sched, and from the
// moment it was sent into sent.
func openLoop(ctx context.Context, addr string, rate int, d time.Duration, sched, sent *hdrhistogram.Histogram) (int64, error) {
	if rate <= 0 {
		return 0, fmt.Errorf("rate %d: %w", rate, ErrConfig)
	}
	c := &fasthttp.HostClient{Addr: addr, MaxConns: 4096, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	interval := time.Second / time.Duration(rate)
	n := int(d / interval)
	var (
		mu   sync.Mutex
		errs atomic.Int64
		wg   sync.WaitGroup
	)
	start := time.Now()
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://" + addr + "/v1/completions")
			req.Header.SetMethod(http.MethodPost)
			req.Header.SetContentType("application/json")
			req.SetBodyString(requestBody)
			start := time.Now()
			err := c.Do(req, resp)
			end := time.Now()
			if err != nil || resp.StatusCode() != http.StatusOK {
				errs.Add(1)
				return
			}
			mu.Lock()
			_ = sched.RecordValue(max(end.Sub(at).Microseconds(), 1))
			_ = sent.RecordValue(max(end.Sub(start).Microseconds(), 1))
			mu.Unlock()
		}()
	}
	wg.Wait()
	return errs.Load(), ctx.Err()
}

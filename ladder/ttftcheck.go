package ladder

import (
	"math"
	"time"
)

// The TTFT check: every prediction whose request's first token the data
// plane measured is compared with it, per endpoint, as cache truth
// compares cached tokens (TruthTracker). The model learns continuously,
// so a single wrong prediction says little; predictions that stay wrong
// say the engine's timing depends on something llb does not see — other
// clients sending it work directly, preemption or swapping, a throttled
// GPU — or that llb's counts of the work it sent are off. While that
// lasts the endpoint is demoted: decisions stop relying on its
// predictions (TTFT objectives treat it as unknown) and its model starts
// again from the prior, so that it learns the engine as it now is.

// Check tuning.
const (
	// TTFTWrongPct: a prediction is wrong when it is off by more than this
	// share of the measured TTFT: |predicted − actual| > actual · 50 / 100.
	TTFTWrongPct = 50
	// TTFTWindow is how many recent samples the verdict reads.
	TTFTWindow = 16
	// TTFTDemoteWrong: an endpoint's predictions drift once this many of
	// its last TTFTWindow samples are wrong ...
	TTFTDemoteWrong = 12
	// TTFTMinBad: ... and have been for this long (a burst of requests
	// that all met one long prefill passes sooner).
	TTFTMinBad = 5 * time.Second
	// TTFTRestoreWrong: a drifting endpoint agrees again once a full
	// window holds at most this many wrong samples.
	TTFTRestoreWrong = 4
)

// TTFTRelError is the relative error of a prediction,
//
//	(predicted − actual) / actual
//
// positive when llb predicted a later first token than came, −1 at a
// prediction of 0; the actual TTFT counts as at least 0.1 ms.
func TTFTRelError(predicted, actual time.Duration) float64 {
	a := max(actual, ttftFloor).Seconds()
	return (predicted.Seconds() - a) / a
}

// TTFTVerdict is an endpoint's standing.
type TTFTVerdict struct {
	// Drifting is true while the endpoint's predictions stay wrong.
	Drifting bool
	// Wrong and Samples are the window's wrong and total counts.
	Wrong, Samples int
	// Bias is the median relative error of the window (positive: llb
	// predicts later first tokens than come).
	Bias float64
}

// TTFTStep is what one Observe did.
type TTFTStep struct {
	// RelError is the sample's TTFTRelError; Wrong says it was off by more
	// than TTFTWrongPct.
	RelError float64
	Wrong    bool
	// Changed is true when the sample flipped the verdict.
	Changed bool
	// Verdict is the standing after the sample.
	Verdict TTFTVerdict
}

// TTFTCheck keeps one endpoint's prediction record. The zero value is
// ready. Single owner; no clocks, no I/O.
//
// Invariant: n ≤ TTFTWindow; ring[(next−n+i) mod TTFTWindow], i < n, are
// the window's relative errors, oldest first.
type TTFTCheck struct {
	ring     [TTFTWindow]float64
	n, next  int
	verdict  TTFTVerdict
	badSince time.Time
	// Compared and WrongTotal count every sample.
	compared, wrongTotal uint64
}

// Observe records one prediction and its measured TTFT at now.
//
// The verdict turns drifting when TTFTDemoteWrong of the last TTFTWindow
// samples are wrong and have been for TTFTMinBad (seen at a sample), and
// agrees again when a full window holds at most TTFTRestoreWrong.
func (c *TTFTCheck) Observe(now time.Time, predicted, actual time.Duration) TTFTStep {
	e := TTFTRelError(predicted, actual)
	wrongOne := math.Abs(e)*100 > TTFTWrongPct
	c.compared++
	if wrongOne {
		c.wrongTotal++
	}
	c.ring[c.next] = e
	c.next = (c.next + 1) % TTFTWindow
	c.n = min(c.n+1, TTFTWindow)
	wrong := 0
	var w [TTFTWindow]float64
	for i := 0; i < c.n; i++ {
		w[i] = c.ring[(c.next-c.n+i+TTFTWindow)%TTFTWindow]
		if math.Abs(w[i])*100 > TTFTWrongPct {
			wrong++
		}
	}
	switch {
	case wrong < TTFTDemoteWrong:
		c.badSince = time.Time{}
	case c.badSince.IsZero():
		c.badSince = now
	}
	was := c.verdict.Drifting
	switch {
	case !was && wrong >= TTFTDemoteWrong && now.Sub(c.badSince) >= TTFTMinBad:
		c.verdict.Drifting = true
	case was && c.n == TTFTWindow && wrong <= TTFTRestoreWrong:
		c.verdict.Drifting = false
	}
	c.verdict.Wrong, c.verdict.Samples, c.verdict.Bias = wrong, c.n, median(w[:c.n])
	return TTFTStep{RelError: e, Wrong: wrongOne, Changed: was != c.verdict.Drifting, Verdict: c.verdict}
}

// Verdict returns the current standing.
func (c *TTFTCheck) Verdict() TTFTVerdict { return c.verdict }

// Totals returns how many predictions were compared and how many of them
// were wrong.
func (c *TTFTCheck) Totals() (compared, wrong uint64) { return c.compared, c.wrongTotal }

// median returns the median of xs (the mean of the middle two for an even
// count), 0 for none; xs is reordered.
func median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	for i := 1; i < n; i++ { // insertion sort: n ≤ TTFTWindow
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

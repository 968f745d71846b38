package ladder

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// The TTFT golden files under testdata/ttft/ drive a TTFTModel and a
// TTFTCheck through a small command language (`go test ./ladder -run
// TestTTFTGolden -rewrite` regenerates them):
//
//	model                                fresh model (the prior)
//	learn u=N q=N n=N actual=D [repeat=N] learn a sample (repeatedly)
//	predict u=N q=N n=N                  the prediction and whether trained
//	coef                                 the fitted coefficients
//	check                                fresh check at the test epoch
//	observe pred=D actual=D [every=D] [repeat=N]
//	                                     one sample every D (1 s); prints the
//	                                     sample that flipped the verdict and
//	                                     the standing after the last
func TestTTFTGolden(t *testing.T) {
	datadriven.Walk(t, "testdata/ttft", func(t *testing.T, path string) {
		var m TTFTModel
		var c TTFTCheck
		now := goldenEpoch
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := map[string]string{}
			for _, a := range d.CmdArgs {
				args[a.Key] = strings.Join(a.Vals, ",")
			}
			u32 := func(k string) uint32 {
				v, _ := strconv.ParseUint(args[k], 10, 32)
				return uint32(v)
			}
			dur := func(k string, def time.Duration) time.Duration {
				if args[k] == "" {
					return def
				}
				v, err := time.ParseDuration(args[k])
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				return v
			}
			n := max(int(u32("repeat")), 1)
			in := TTFTInput{Uncached: u32("u"), Queued: u32("q"), Running: u32("n")}
			switch d.Cmd {
			case "model":
				m = TTFTModel{}
				return "ok"
			case "learn":
				for range n {
					m.Learn(in, dur("actual", 0))
				}
				return fmt.Sprintf("samples=%d trained=%t", m.Samples(), m.Trained())
			case "predict":
				return fmt.Sprintf("%v trained=%t", m.Predict(in).Round(10*time.Microsecond), m.Trained())
			case "coef":
				th := m.Coefficients()
				var b strings.Builder
				for j, name := range []string{"overhead", "uncached", "queued", "running", "running*uncached", "running*queued"} {
					fmt.Fprintf(&b, "%s %.4f\n", name, th[j])
				}
				return b.String()
			case "check":
				c, now = TTFTCheck{}, goldenEpoch
				return "ok"
			case "observe":
				every := dur("every", time.Second)
				var last TTFTStep
				var b strings.Builder
				for i := range n {
					now = now.Add(every)
					last = c.Observe(now, dur("pred", 0), dur("actual", 0))
					if last.Changed {
						fmt.Fprintf(&b, "sample %d: drifting=%t\n", i+1, last.Verdict.Drifting)
					}
				}
				v := last.Verdict
				fmt.Fprintf(&b, "err=%+.2f wrong=%t verdict: drifting=%t wrong=%d/%d bias=%+.2f", last.RelError, last.Wrong, v.Drifting, v.Wrong, v.Samples, v.Bias)
				return b.String()
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

// linearEngine is a TTFT that the model's form describes exactly.
func linearEngine(th [ttftFeatures]float64, in TTFTInput) time.Duration {
	x := in.features()
	var s float64
	for j := range x {
		s += th[j] * x[j]
	}
	return time.Duration(s * float64(time.Second))
}

func randomInput(rng *rand.Rand) TTFTInput {
	return TTFTInput{Uncached: uint32(rng.IntN(2048)), Queued: uint32(rng.IntN(4096)), Running: uint32(rng.IntN(128))}
}

func TestTTFTModel_LearnsALinearEngine(t *testing.T) {
	engines := []struct {
		name string
		th   [ttftFeatures]float64
	}{
		{"step scheduler: queued work counts", [ttftFeatures]float64{0.008, 0.07, 0.07, 0.002, 0.001, 0.001}},
		{"own clock: only its own tokens and the batch", [ttftFeatures]float64{0.030, 0.82, 0, 0.004, 0.1, 0}},
	}
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var m TTFTModel
			for range 400 {
				in := randomInput(rng)
				m.Learn(in, linearEngine(e.th, in))
			}
			for range 100 {
				in := randomInput(rng)
				want := linearEngine(e.th, in)
				if got := m.Predict(in); math.Abs(TTFTRelError(got, want)) > 0.02 {
					t.Fatalf("Predict(%+v) = %v; want %v within 2 %% (coefficients %v)", in, got, want, m.Coefficients())
				}
			}
		})
	}
}

func TestTTFTModel_FollowsAnEngineThatSlowsDown(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	th := [ttftFeatures]float64{0.008, 0.07, 0.07, 0, 0, 0}
	var m TTFTModel
	for range 300 {
		in := randomInput(rng)
		m.Learn(in, linearEngine(th, in))
	}
	for j := range th {
		th[j] *= 2
	}
	for range 4 * TTFTMemory {
		in := randomInput(rng)
		m.Learn(in, linearEngine(th, in))
	}
	in := TTFTInput{Uncached: 512, Queued: 1024}
	if got, want := m.Predict(in), linearEngine(th, in); math.Abs(TTFTRelError(got, want)) > 0.1 {
		t.Fatalf("after the engine slowed down: Predict = %v; want %v within 10 %%", got, want)
	}
}

func TestTTFTModel_CoefficientsStayNonNegative(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var m TTFTModel
	for range 1000 {
		in := randomInput(rng)
		// Noise that a free fit would explain with negative slopes.
		m.Learn(in, time.Duration(rng.Float64()*float64(50*time.Millisecond))+time.Millisecond)
		for j, c := range m.Coefficients() {
			if c < 0 || math.IsNaN(c) {
				t.Fatalf("coefficient %d = %v; want a non-negative number", j, c)
			}
		}
	}
}

func TestRouter_ObserveTTFTForgetsWhenPredictionsDrift(t *testing.T) {
	r, err := NewRouter(ServiceSpec{Name: "t", Selector: SelRR}, []EndpointSpec{{}, {}}, DefaultEnv(), RouterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	in := TTFTInput{Uncached: 100}
	now := goldenEpoch
	for range 2 * TTFTTrained {
		now = now.Add(time.Second)
		d, _ := r.PredictTTFT(0, in)
		r.ObserveTTFT(now, 0, TTFTPrediction{OK: true, Input: in, Predicted: d}, 50*time.Millisecond)
	}
	if _, ok := r.PredictTTFT(0, in); !ok {
		t.Fatal("a trained, agreeing endpoint is not trusted")
	}
	drifted := false
	for range 3 * TTFTWindow {
		now = now.Add(time.Second)
		st := r.ObserveTTFT(now, 0, TTFTPrediction{OK: true, Input: in, Predicted: 50 * time.Millisecond}, 500*time.Millisecond)
		if st.Changed && st.Verdict.Drifting {
			drifted = true
			break
		}
	}
	if !drifted {
		t.Fatal("predictions ten times too short never drifted")
	}
	if _, ok := r.PredictTTFT(0, in); ok {
		t.Fatal("a drifting endpoint's predictions are trusted")
	}
	if s := r.TTFTStatus(0).Samples; s != 1 {
		t.Fatalf("samples after the drift = %d; want 1 (the model started again)", s)
	}
	if _, ok := r.PredictTTFT(1, in); ok {
		t.Fatal("an untrained endpoint's predictions are trusted")
	}
}

func TestRouter_AnUntrainedEndpointPredictsWithTheFleetsModel(t *testing.T) {
	r, err := NewRouter(ServiceSpec{Name: "t", Selector: SelRR}, []EndpointSpec{{}, {}}, DefaultEnv(), RouterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// Endpoint 0 learns an engine far from the prior (5 ms plus 1 ms a
	// block; the prior says 20 ms plus 0.3 ms).
	engine := func(in TTFTInput) time.Duration {
		return 5*time.Millisecond + time.Duration(in.Uncached)*time.Millisecond
	}
	now := goldenEpoch
	learn := func(ep int, in TTFTInput) {
		now = now.Add(time.Second)
		d, _ := r.PredictTTFT(ep, in)
		r.ObserveTTFT(now, ep, TTFTPrediction{OK: true, Input: in, Predicted: d}, engine(in))
	}
	in := TTFTInput{Uncached: 300}
	before, _ := r.PredictTTFT(1, in)
	for i := range 2 * TTFTTrained {
		learn(0, TTFTInput{Uncached: uint32(10 + 40*(i%8))})
	}
	// Endpoint 1 has learned nothing: it predicts with what the fleet
	// learned, and decisions do not rely on it yet.
	got, ok := r.PredictTTFT(1, in)
	if ok || math.Abs(TTFTRelError(got, engine(in))) > 0.05 || math.Abs(TTFTRelError(before, engine(in))) < 0.5 {
		t.Fatalf("untrained endpoint: %v (trusted %t), %v before any sample; want the fleet's %v within 5 %%, not trusted", got, ok, before, engine(in))
	}
	// Once trained, an endpoint predicts with its own model: this one's
	// engine is twice as slow.
	slow := func(in TTFTInput) time.Duration { return 2 * engine(in) }
	for i := range TTFTTrained {
		now = now.Add(time.Second)
		x := TTFTInput{Uncached: uint32(10 + 40*(i%8))}
		d, _ := r.PredictTTFT(1, x)
		r.ObserveTTFT(now, 1, TTFTPrediction{OK: true, Input: x, Predicted: d}, slow(x))
	}
	if got, ok := r.PredictTTFT(1, in); !ok || math.Abs(TTFTRelError(got, slow(in))) > 0.1 {
		t.Fatalf("trained endpoint: %v (trusted %t); want its own %v within 10 %%", got, ok, slow(in))
	}
}

func TestTTFTModel_LearnsTheWaitForRoomApartFromTheBase(t *testing.T) {
	// An engine of 1000 blocks: 10 ms plus 0.5 ms a block of its own, and a
	// request whose blocks do not fit in the free ones waits 200 ms more
	// (running requests finishing); one sent while the engine reports
	// waiting requests waits 30 ms a waiting request.
	const capacity = 1000
	engine := func(in TTFTInput) time.Duration {
		d := 10*time.Millisecond + time.Duration(in.Uncached)*500*time.Microsecond
		if in.Lacking() > 0 {
			d += 200 * time.Millisecond
		}
		return d + time.Duration(in.Waiting)*30*time.Millisecond
	}
	rng := rand.New(rand.NewPCG(3, 4))
	input := func() TTFTInput {
		in := TTFTInput{Uncached: uint32(rng.IntN(200)), KVUsed: uint32(rng.IntN(900)), KVCapacity: capacity}
		if rng.IntN(4) == 0 {
			in.KVUsed = capacity - uint32(rng.IntN(20))
		}
		if rng.IntN(5) == 0 {
			in.Waiting = uint32(1 + rng.IntN(4))
		}
		return in
	}
	// blind learns the same samples without seeing the cache or the queue.
	var m, blind TTFTModel
	for range 600 {
		in := input()
		m.Learn(in, engine(in))
		b := in
		b.KVCapacity, b.Waiting = 0, 0
		blind.Learn(b, engine(in))
	}
	cases := []struct {
		name string
		in   TTFTInput
		wait bool
	}{
		{"room for it", TTFTInput{Uncached: 100, KVUsed: 500, KVCapacity: capacity}, false},
		{"the cache full", TTFTInput{Uncached: 100, KVUsed: 990, KVCapacity: capacity}, true},
		{"requests waiting", TTFTInput{Uncached: 100, KVUsed: 500, KVCapacity: capacity, Waiting: 3}, true},
		{"usage unknown", TTFTInput{Uncached: 100, KVUsed: 990}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base, wait := m.Predict(c.in), m.PredictWait(c.in)
			want := engine(c.in)
			if c.wait != (wait > 0) {
				t.Fatalf("wait %v; want one: %t", wait, c.wait)
			}
			// The checked prediction is close; the wait brings it closer
			// than the base alone.
			if got := base + wait; math.Abs(TTFTRelError(got, want)) > 0.15 ||
				c.wait && math.Abs(TTFTRelError(got, want)) >= math.Abs(TTFTRelError(base, want)) {
				t.Fatalf("base %v + wait %v = %v; want %v within 15 %%, closer than the base", base, wait, got, want)
			}
			// Decisions read the base, which the wait model leaves as a
			// model blind to the cache and the queue has it.
			if b := blind.Predict(c.in); b != base {
				t.Fatalf("base %v; want the blind model's %v", base, b)
			}
		})
	}
}

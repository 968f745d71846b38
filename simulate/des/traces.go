package des

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/workload"
)

// Names of the recorded-trace scenarios (TraceScenarios).
const (
	ScenarioMooncakeConversation = "mooncake-conversation"
	ScenarioMooncakeSynthetic    = "mooncake-synthetic"
)

// MooncakeTrace is one of the Mooncake FAST'25 traces a replay reads.
type MooncakeTrace struct {
	// Scenario is the scenario's name on the load-factor model.
	Scenario string
	// File is the trace's file name in kvcache-ai/Mooncake's
	// FAST25-release/traces (and in the directory `make traces` fills).
	File string
	// Description is the report's sentence about it.
	Description string
}

// MooncakeTraces are the two traces replayed: the conversation trace (an
// hour of Kimi's online chat requests, 12 031 of them) and the synthetic
// one (3 993 requests built from public datasets, Poisson arrivals that
// keep the order of each multi-turn conversation).
func MooncakeTraces() []MooncakeTrace {
	return []MooncakeTrace{
		{ScenarioMooncakeConversation, "conversation_trace.jsonl",
			"Mooncake's FAST'25 conversation trace (an hour of Kimi's chat requests, recorded arrivals) replayed with time compressed to the load."},
		{ScenarioMooncakeSynthetic, "synthetic_trace.jsonl",
			"Mooncake's FAST'25 synthetic trace (public datasets, Poisson arrivals keeping each conversation's order) replayed with time compressed to the load."},
	}
}

// The fleet the traces are replayed on: 8 workers with the engine's
// default cache (31 250 blocks of 16 tokens, about 500k tokens: an 8B
// model on an H100) and a max-model-len that admits the longest prompt
// (the synthetic trace has one of 191 378 tokens).
const (
	traceWorkers = 8
	// TraceMaxModelLen is the replays' --max-model-len.
	TraceMaxModelLen = 196608
	// traceTTFTSLO is the load-factor model's goodput objective: its
	// prefill costs 200 µs a token, so a 12k-token miss (the traces' mean
	// prompt) takes 2.4 s.
	traceTTFTSLO = 10 * time.Second
)

// TraceScenarios loads the Mooncake traces from dir (as `make traces`
// leaves them) and returns their scenarios, each on the load-factor and
// the step model: every request of the trace (or its first requests when
// requests > 0) on 8 workers of the engine's default cache. A trace file
// that is missing is skipped and named in missing; a file that cannot be
// read is an error.
func TraceScenarios(dir string, requests int) (scenarios []Scenario, missing []string, err error) {
	var load []Scenario
	for _, mt := range MooncakeTraces() {
		path := filepath.Join(dir, mt.File)
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, path)
			continue
		}
		if err != nil {
			return nil, missing, fmt.Errorf("trace %s: %w", mt.Scenario, err)
		}
		bt, err := workload.ReadMooncake(f, mt.File, requests)
		f.Close()
		if err != nil {
			return nil, missing, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		load = append(load, MooncakeScenario(mt, bt))
	}
	for _, sc := range load {
		scenarios = append(scenarios, sc, StepVariant(sc))
	}
	return scenarios, missing, nil
}

// MooncakeScenario is the replay of bt as scenario mt on the load-factor
// model (StepVariant gives the step model's).
func MooncakeScenario(mt MooncakeTrace, bt *workload.BlockTrace) Scenario {
	return Scenario{
		Name: mt.Scenario, Description: mt.Description,
		Trace:   TraceConfig{Spec: workload.Mooncake{Trace: bt}, Requests: len(bt.Requests)},
		Workers: traceWorkers,
		Engine:  &EngineOverrides{NumBlocks: engine.DefaultConfig().NumBlocks, MaxModelLen: TraceMaxModelLen},
		TTFTSLO: traceTTFTSLO,
	}
}

// describeMooncake renders a recorded trace in one line for the report.
func describeMooncake(bt *workload.BlockTrace) string {
	if bt == nil || len(bt.Requests) == 0 {
		return "Mooncake trace: empty"
	}
	var in, out int64
	longest := 0
	for _, r := range bt.Requests {
		in += int64(r.InputTokens)
		out += int64(r.OutputTokens)
		longest = max(longest, r.InputTokens)
	}
	n := int64(len(bt.Requests))
	return fmt.Sprintf("Mooncake trace %s: %d requests over %.0f s (%.2f req/s recorded), prompts of %d tokens on average (longest %d), %d output tokens on average; each hash id is %d prompt tokens = %d blocks of 16",
		bt.Name, n, bt.Requests[n-1].At.Seconds(), bt.NativeRate(), in/n, longest, out/n, workload.MooncakeBlockTokens, workload.MooncakeBlockTokens/16)
}

// NativeRate is the recorded arrival rate of a scenario's trace (requests
// per second), 0 for a generated workload: a run at rate r replays a
// recorded trace r / NativeRate times faster than it was recorded.
func (sc *Scenario) NativeRate() float64 {
	if m, ok := sc.Trace.Spec.(workload.Mooncake); ok && m.Trace != nil {
		return m.Trace.NativeRate()
	}
	return 0
}

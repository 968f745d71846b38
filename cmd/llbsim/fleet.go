package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// logKVZmqPort is the log field of the fleet's shared ZMQ port.
const logKVZmqPort = "kv_zmq_port"

// fleetFlags are the flags of "llbsim fleet".
type fleetFlags struct {
	prefill, decode, single int
	baseIP                  string
	httpPort, kvPort        int
	replay                  bool
	replayPort, nixlPort    int
	decodeKVEvents          bool
	sameIP                  bool
	dialect                 string
	dpRanks                 int
	bootstrapPort           int
	eventBuffer             int

	model          string
	loras          []string
	blockSize      int
	numBlocks      int
	maxNumSeqs     int
	maxWaiting     int
	maxModelLen    int
	defaultMaxToks int

	hashAlgo      string
	hashSeed      string
	hashSeedUnset bool
	eventLayout   string
	digestHashes  bool
	eventInterval time.Duration
	topic         string
	noKVEvents    bool

	prefillOverhead, prefillPerToken, itl time.Duration
	timeFactor, timeScale                 float64
	engineModel                           string
	maxBatchedTokens                      int
	xferOverhead, xferPerBlock, kvLease   time.Duration

	faultLatency   time.Duration
	faultErrorRate float64
	faultDropRate  float64
	faultDead      bool

	logLevel     string
	stopTimeout  time.Duration
	outputFormat string
	exitOnCrash  bool
}

func newFleetCmd(stdout, stderr io.Writer) *cobra.Command {
	f := &fleetFlags{}
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Start simulated vLLM, SGLang or TensorRT-LLM workers on loopback addresses and serve until interrupted",
		Long: `Start simulated workers speaking one engine's dialect (--engine vllm, sglang
or trtllm: its KV events and block hashes, its P/D protocol, its strictness),
each on its own loopback address (--base-ip, then the next addresses), print
the llb rule fragment (endpoints array, kvZmqPort, kvBlockSize, kvHashAlgo,
kvNoneHashSeed, kvEngineType, kvDpRankCount, pdBootstrapPort) as JSON on
stdout, and serve until SIGINT or SIGTERM.`,
		Example: `  llbsim fleet --prefill 2 --decode 2 --base-ip 127.0.0.2 --http-port 8100 --kv-port 5557
  llbsim fleet --engine sglang --single 2 --dp-ranks 3 --kv-port 5561
  llbsim fleet --engine trtllm --prefill 2 --decode 1 --block-size 32`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runFleet(cmd.Context(), f, stdout, stderr)
		},
	}
	fl := cmd.Flags()
	def := worker.DefaultConfig()
	lat := def.Engine.Latency
	fl.IntVar(&f.prefill, "prefill", 0, "prefill workers (ep_role 1)")
	fl.IntVar(&f.decode, "decode", 0, "decode workers (ep_role 2)")
	fl.IntVar(&f.single, "single", 0, "single-pool workers (no role)")
	fl.StringVar(&f.baseIP, "base-ip", "127.0.0.2", "first worker's address; the next workers take the next addresses")
	fl.IntVar(&f.httpPort, "http-port", 8100, "OpenAI API port of every worker (0: a free port each)")
	fl.IntVar(&f.kvPort, "kv-port", 5557, "ZMQ KV-event port shared by every publishing worker (0: pick one)")
	fl.BoolVar(&f.replay, "replay", false, "serve the KV replay ROUTER socket")
	fl.IntVar(&f.replayPort, "replay-port", 5558, "replay ROUTER port shared by every publishing worker (0: pick one)")
	fl.IntVar(&f.nixlPort, "nixl-port", 5600, "NIXL side-channel port of every P/D worker (0: a free port each)")
	fl.BoolVar(&f.decodeKVEvents, "decode-kv-events", false, "decode workers publish KV events too")
	fl.BoolVar(&f.sameIP, "same-ip", false, "every worker on --base-ip itself, worker i on --http-port+100·i (the seed page's layout: prefill :8100, decode :8200)")
	fl.BoolVar(&f.noKVEvents, "no-kv-events", false, "no worker publishes KV events")
	fl.StringVar(&f.dialect, "engine", "vllm", "engine the workers speak as: vllm, sglang (page hash, per-page events, one publisher per DP rank, bootstrap P/D) or trtllm (POST /kv_cache_events, context_only/generation_only P/D, unknown request fields refused); lf and step are still read as --scheduler")
	fl.IntVar(&f.dpRanks, "dp-ranks", 1, "data-parallel ranks per publishing worker (1-8): rank r publishes on --kv-port + r, rank 0 spreads requests over them in turn")
	fl.IntVar(&f.bootstrapPort, "bootstrap-port", 8998, "SGLang prefill workers' bootstrap port (pdBootstrapPort; 0: pick one)")
	fl.IntVar(&f.eventBuffer, "event-buffer", def.EventBuffer, "TensorRT-LLM's event_buffer_max_size: events kept for POST /kv_cache_events")

	fl.StringVar(&f.model, "model", def.Model, "served model name")
	fl.StringSliceVar(&f.loras, "lora", nil, "LoRA adapter names also served (repeatable)")
	fl.IntVar(&f.blockSize, "block-size", def.Engine.BlockSize, "tokens per KV block")
	fl.IntVar(&f.numBlocks, "num-blocks", def.Engine.NumBlocks, "KV cache capacity in blocks")
	fl.IntVar(&f.maxNumSeqs, "max-num-seqs", def.Engine.MaxNumSeqs, "running-batch limit")
	fl.IntVar(&f.maxWaiting, "max-waiting", 0, "waiting-queue bound (0: unbounded); a full queue answers 503")
	fl.IntVar(&f.maxModelLen, "max-model-len", def.Engine.MaxModelLen, "prompt + output token limit")
	fl.IntVar(&f.defaultMaxToks, "default-max-tokens", def.DefaultMaxTokens, "max_tokens when a request gives none")

	fl.StringVar(&f.hashAlgo, "hash-algo", string(def.Engine.Hash.Algo), "prefix-cache hash: sha256_cbor, xxhash_cbor, or fnv (llm-d's keys, deliberately not vLLM's)")
	fl.StringVar(&f.hashSeed, "hash-seed", def.Engine.Hash.Seed, "PYTHONHASHSEED")
	fl.BoolVar(&f.hashSeedUnset, "hash-seed-unset", false, "simulate PYTHONHASHSEED unset: a random NONE_HASH per worker")
	fl.StringVar(&f.eventLayout, "event-layout", "map", "KV event layout: map (current vLLM) or array (legacy)")
	fl.BoolVar(&f.digestHashes, "digest-hashes", false, "publish raw digests instead of uint64 keys (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)")
	fl.DurationVar(&f.eventInterval, "event-interval", def.EventInterval, "coalesce KV events into one batch per interval (0: one per engine step)")
	fl.StringVar(&f.topic, "topic", "", `KV topic (default "kv@<ip>:<port>@<model>"; "-" for vLLM's empty topic)`)

	fl.StringVar(&f.engineModel, "scheduler", "lf", "engine model: lf (llm-d-inference-sim's per-request clocks, the --prefill-*/--itl/--time-factor-under-load flags) or step (vLLM V1's step loop with chunked prefill, Llama-3.1-8B on an H100)")
	fl.IntVar(&f.maxBatchedTokens, "max-num-batched-tokens", def.Engine.MaxNumBatchedTokens, "step model: token budget per step")
	fl.DurationVar(&f.prefillOverhead, "prefill-overhead", lat.PrefillOverhead, "fixed prefill cost")
	fl.DurationVar(&f.prefillPerToken, "prefill-per-token", lat.PrefillPerToken, "prefill cost per uncached prompt token")
	fl.DurationVar(&f.itl, "itl", lat.InterTokenLatency, "inter-token latency")
	fl.Float64Var(&f.timeFactor, "time-factor-under-load", lat.TimeFactorUnderLoad, "slowdown at max-num-seqs running requests (>= 1)")
	fl.Float64Var(&f.timeScale, "time-scale", lat.TimeScale, "multiplier on every simulated duration (0.01 runs 100x faster)")
	fl.DurationVar(&f.xferOverhead, "kv-transfer-overhead", lat.KVTransferOverhead, "fixed cost of a decode leg's KV pull")
	fl.DurationVar(&f.xferPerBlock, "kv-transfer-per-block", lat.KVTransferPerBlock, "KV pull cost per block")
	fl.DurationVar(&f.kvLease, "kv-lease", def.Engine.KVLease, "how long a prefill holds blocks for the decode side")

	fl.DurationVar(&f.faultLatency, "fault-latency", 0, "latency added to every generation request")
	fl.Float64Var(&f.faultErrorRate, "fault-error-rate", 0, "share of generation requests answered 500")
	fl.Float64Var(&f.faultDropRate, "fault-drop-rate", 0, "share of generation requests whose connection is dropped")
	fl.BoolVar(&f.faultDead, "fault-dead", false, "start with a dead engine (/health 503)")

	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fl.DurationVar(&f.stopTimeout, "stop-timeout", 10*time.Second, "how long shutdown lets in-flight requests finish")
	fl.StringVar(&f.outputFormat, "output", "json", "what to print once serving: json (the rule fragment) or none")
	fl.BoolVar(&f.exitOnCrash, "exit-on-crash", false, "stop the whole fleet and exit 1 when a worker crashes (POST /_sim/faults {\"crash\":true})")
	return cmd
}

// template builds the workers' configuration from the flags.
func (f *fleetFlags) template(log *zerolog.Logger) (worker.Config, error) {
	c := worker.DefaultConfig()
	c.Model = f.model
	c.LoRAs = f.loras
	c.Engine.BlockSize = f.blockSize
	c.Engine.NumBlocks = f.numBlocks
	c.Engine.MaxNumSeqs = f.maxNumSeqs
	c.Engine.MaxWaiting = f.maxWaiting
	c.Engine.MaxModelLen = f.maxModelLen
	c.Engine.KVLease = f.kvLease
	c.Engine.Hash = engine.HashConfig{Algo: engine.HashAlgo(f.hashAlgo), Seed: f.hashSeed}
	c.SeedUnset = f.hashSeedUnset
	c.DefaultMaxTokens = f.defaultMaxToks
	switch f.eventLayout {
	case "map":
		c.Layout = inventory.LayoutMap
	case "array":
		c.Layout = inventory.LayoutArray
	default:
		return c, &usageError{fmt.Errorf("--event-layout %q (want map or array)", f.eventLayout)}
	}
	c.DigestHashes = f.digestHashes
	c.EventInterval = f.eventInterval
	c.Topic = f.topic
	c.KVEvents = !f.noKVEvents
	c.Replay = f.replay
	c.Engine.Latency = engine.Latency{
		PrefillOverhead:     f.prefillOverhead,
		PrefillPerToken:     f.prefillPerToken,
		InterTokenLatency:   f.itl,
		TimeFactorUnderLoad: f.timeFactor,
		KVTransferOverhead:  f.xferOverhead,
		KVTransferPerBlock:  f.xferPerBlock,
		TimeScale:           f.timeScale,
	}
	if f.dialect == "lf" || f.dialect == "step" { // --engine's meaning before the dialects
		f.engineModel, f.dialect = f.dialect, "vllm"
	}
	sched, err := engine.ParseScheduler(f.engineModel)
	if err != nil {
		return c, &usageError{fmt.Errorf("--scheduler: %w", err)}
	}
	c.Engine.Scheduler, c.Engine.MaxNumBatchedTokens = sched, f.maxBatchedTokens
	c.Faults = worker.Faults{Latency: f.faultLatency, ErrorRate: f.faultErrorRate, DropRate: f.faultDropRate, Dead: f.faultDead}
	d, err := worker.ParseDialect(f.dialect)
	if err != nil {
		return c, &usageError{fmt.Errorf("--engine: %w", err)}
	}
	c.Dialect, c.EventBuffer = d, f.eventBuffer
	c.Logger = log
	if err := c.Validate(); err != nil {
		return c, &usageError{err}
	}
	return c, nil
}

// runFleet starts the fleet, prints its rule fragment and serves until ctx
// is cancelled.
func runFleet(ctx context.Context, f *fleetFlags, stdout, stderr io.Writer) error {
	lvl, err := zerolog.ParseLevel(strings.ToLower(f.logLevel))
	if err != nil {
		return &usageError{fmt.Errorf("--log-level %q: %w", f.logLevel, err)}
	}
	if f.outputFormat != "json" && f.outputFormat != "none" {
		return &usageError{fmt.Errorf("--output %q (want json or none)", f.outputFormat)}
	}
	log := zerolog.New(stderr).Level(lvl).With().Timestamp().Str(logfield.Component, "llbsim").Logger()
	tmpl, err := f.template(&log)
	if err != nil {
		return err
	}
	cfg := fleet.Config{
		Prefill: f.prefill, Decode: f.decode, Single: f.single,
		BaseIP: f.baseIP, HTTPPort: f.httpPort, KVPort: f.kvPort, NIXLPort: f.nixlPort,
		DecodeKVEvents: f.decodeKVEvents, Template: &tmpl, SameIP: f.sameIP,
		DPRanks: f.dpRanks, BootstrapPort: f.bootstrapPort,
	}
	if f.replay {
		cfg.ReplayPort = f.replayPort
	}
	if err := cfg.Validate(); err != nil {
		return &usageError{err}
	}
	fl, err := fleet.Start(cfg)
	if err != nil {
		return err
	}
	if f.outputFormat == "json" {
		out, err := json.MarshalIndent(fl.Rule(), "", "  ")
		if err != nil {
			return fmt.Errorf("encode rule fragment: %w", err)
		}
		if _, err := fmt.Fprintf(stdout, "%s\n", out); err != nil {
			log.Warn().Err(err).Msg("cannot print the rule fragment")
		}
	}
	log.Info().Int(logfield.Endpoints, len(fl.Members())).Int(logKVZmqPort, fl.KVZmqPort()).Msg("fleet serving; interrupt to stop")
	var runErr error
	select {
	case <-ctx.Done():
	case name := <-crashed(fl, f.exitOnCrash):
		runErr = fmt.Errorf("worker %s crashed", name)
		log.Info().Str(logfield.Reason, "worker_crashed").Msg("fleet stopping after a crash")
	}
	log.Info().Msg("fleet stopping")
	sctx, cancel := context.WithTimeout(context.Background(), f.stopTimeout)
	defer cancel()
	if err := fl.Stop(sctx); err != nil {
		log.Warn().Err(err).Msg("in-flight requests were cut at the stop timeout")
	}
	return runErr
}

// crashed reports the name of the first worker that crashed; it never
// fires when watch is false. Its goroutines end when the fleet stops.
func crashed(fl *fleet.Fleet, watch bool) <-chan string {
	out := make(chan string, len(fl.Members()))
	if !watch {
		return out
	}
	for _, w := range fl.Workers() {
		go func() {
			<-w.Done()
			if w.Crashed() {
				out <- w.Config().Name
			}
		}()
	}
	return out
}

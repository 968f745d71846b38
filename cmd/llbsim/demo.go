package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/harness"
	"github.com/llbproject/llb/simulate/worker"
)

// llbsim demo: a simulated fleet (2 prefill workers whose KV events llb
// mirrors, 2 decode workers) speaking vLLM's, SGLang's or TensorRT-LLM's
// dialect (--engine), a real llbd in front of it, a P/D rule with Tier 1.5
// created through llbd's REST API, and commands to try. `make run` uses
// it. (llbd itself links no simulator.)

// Demo layout: by default the rule listens where the seed page's P/D example
// does (demoFlags can move it).
const (
	demoWarmupSec  = 2
	demoTimeScale  = 0.2 // the latency model runs 5× faster than an 8B model on an H100
	demoCacheBlock = 4096
)

// demoSystemPrompt is the shared prefix of the printed examples: long
// enough to fill several 16-token KV blocks.
const demoSystemPrompt = "You are the friendly assistant of the llb load balancer demo. Answer in one short paragraph, plainly, without mentioning these instructions. Question:"

// demo is the simulated fleet, the llbd in front of it and its rule.
type demo struct {
	flags demoFlags
	fleet *fleet.Fleet
	llbd  *harness.Daemon
	log   zerolog.Logger
}

// demoFlags are the flags of "llbsim demo".
type demoFlags struct {
	bin, listen, logLevel string
	vip, baseIP           string
	port                  int
	engine                string
}

func newDemoCmd(stdout, stderr io.Writer) *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run llbd in front of a simulated P/D fleet with a Tier-1.5 rule, and print commands to try",
		Long: `Start 2 prefill workers (their KV events mirrored by llb) and 2 decode
workers on 127.0.0.2 and up, speaking --engine's dialect (vLLM: events over
ZMQ, NIXL P/D; TensorRT-LLM: events drained from POST /kv_cache_events,
context_only/generation_only P/D; SGLang: page events over ZMQ, bootstrap
rooms), start llbd (--llbd) with its REST API on --listen and a
temporary state directory, create a rule with Tier 1.5 on 127.0.0.1:2020
through the REST API, print curl commands, and serve until SIGINT or SIGTERM.`,
		Example: `  llbsim demo --llbd bin/llbd
  llbsim demo --llbd bin/llbd --engine trtllm`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), f, stdout, stderr)
		},
	}
	cmd.Flags().StringVar(&f.bin, "llbd", defaultLLBD(), "the llbd binary to run")
	cmd.Flags().StringVar(&f.listen, "listen", "127.0.0.1:11111", "llbd's REST API address")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "info", "llbd's log level")
	cmd.Flags().StringVar(&f.vip, "vip", "127.0.0.1", "the rule's externalIP")
	cmd.Flags().IntVar(&f.port, "port", 2020, "the rule's port")
	cmd.Flags().StringVar(&f.baseIP, "base-ip", "127.0.0.2", "the first worker's address (the others follow)")
	cmd.Flags().StringVar(&f.engine, "engine", "vllm", "the engine the workers speak as and the rule names: vllm, sglang or trtllm")
	return cmd
}

// defaultLLBD is llbd beside this executable (make build puts both in
// bin/), else "llbd" on the PATH.
func defaultLLBD() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "llbd")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "llbd"
}

// runDemo runs the demo until ctx ends.
func runDemo(ctx context.Context, f demoFlags, stdout, stderr io.Writer) error {
	log := zerolog.New(zerolog.ConsoleWriter{Out: stderr}).With().Timestamp().Str(logfield.Component, "llbsim demo").Logger()
	state, err := os.MkdirTemp("", "llb-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state) // the demo rule must not outlive the demo's fleet
	if _, err := worker.ParseDialect(f.engine); err != nil {
		return &usageError{err}
	}
	d, err := startDemo(f, log)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		d.stop(sctx)
	}()
	d.llbd, err = harness.StartDaemon(ctx, harness.DaemonConfig{
		Bin: f.bin, StateDir: state, Listen: f.listen, LogLevel: f.logLevel, LogFormat: "auto", Stderr: stderr,
	})
	if err != nil {
		return fmt.Errorf("start llbd (%s): %w", f.bin, err)
	}
	body, err := d.rule()
	if err != nil {
		return err
	}
	if err := d.llbd.PostRule(ctx, body); err != nil {
		return fmt.Errorf("demo rule: %w", err)
	}
	d.printTryIt(stdout, "http://"+d.llbd.Addr)
	<-ctx.Done()
	return nil
}

// startDemo starts the simulated fleet.
func startDemo(flags demoFlags, log zerolog.Logger) (*demo, error) {
	dialect, _ := worker.ParseDialect(flags.engine) // runDemo checked it
	tmpl := worker.DefaultConfig()
	tmpl.Engine.Latency.TimeScale = demoTimeScale
	tmpl.Engine.NumBlocks = demoCacheBlock
	tmpl.KVEvents = true
	tmpl.Dialect = dialect
	if dialect == worker.DialectTRTLLM {
		tmpl.Engine.BlockSize = 32 // TensorRT-LLM's default tokens_per_block
	}
	f, err := fleet.Start(fleet.Config{Prefill: 2, Decode: 2, BaseIP: flags.baseIP, Template: &tmpl})
	if err != nil {
		return nil, fmt.Errorf("demo fleet: %w", err)
	}
	for _, m := range f.Members() {
		w := m.Worker()
		log.Info().Str("worker", w.Addr()).Str("role", m.Role.String()).Str("kv", w.KVEndpoint()).Msg("demo worker running")
	}
	return &demo{flags: flags, fleet: f, log: log}, nil
}

// rule is the demo's P/D rule: Tier 0 sessions and Tier 1.5 KV-exact over
// the prefill workers' events, with a short warm-up, in the engine's
// dialect. Tier 1 (the trie, pd_cache_aware_mode) is left off so that the
// KV-exact tier, the one that mirrors the workers' real caches, is the one
// the demo shows.
func (d *demo) rule() ([]byte, error) {
	frag := d.fleet.Rule()
	sa := map[string]any{
		"externalIP": d.flags.vip, "port": d.flags.port, "protocol": "tcp", "sel": 0, "mode": 4,
		"name": "llb-demo", "pd_disagg_mode": true, "kvExactMode": 1, "kvHashAlgo": frag.KVHashAlgo,
		"kvBlockSize": frag.KVBlockSize, "kvWarmupSec": demoWarmupSec,
	}
	if frag.KVZmqPort != 0 {
		sa["kvZmqPort"] = frag.KVZmqPort
	}
	if frag.KVEngineType != "" {
		sa["kvEngineType"] = frag.KVEngineType
	}
	if frag.PDBootstrapPort != 0 {
		sa["pdBootstrapPort"] = frag.PDBootstrapPort
	}
	if frag.KVNoneHashSeed != nil {
		sa["kvNoneHashSeed"] = *frag.KVNoneHashSeed
	}
	return json.Marshal(map[string]any{"serviceArguments": sa, "endpoints": frag.Endpoints})
}

// demoPrompt is the "prompt" member of a printed completion: the shared
// system prompt followed by a question, or on TensorRT-LLM, which has no
// /tokenize (llb could not key a text prompt's blocks), the same as token
// ids: 96 shared ids, then the question's.
func demoPrompt(d worker.Dialect, question int) string {
	if d != worker.DialectTRTLLM {
		q := [...]string{"What is a KV cache?", "What is prefix caching?"}[question%2]
		return fmt.Sprintf("%q", demoSystemPrompt+" "+q)
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := range 96 {
		fmt.Fprintf(&b, "%d,", 1000+i)
	}
	fmt.Fprintf(&b, "%d,%d]", 5000+question, 6000+question)
	return b.String()
}

// demoFleetText describes the fleet in the printed banner.
func demoFleetText(d worker.Dialect) string {
	switch d {
	case worker.DialectTRTLLM:
		return "TensorRT-LLM workers (events drained from POST /kv_cache_events, context_only/generation_only P/D)"
	case worker.DialectSGLang:
		return "SGLang workers (page events over ZMQ, bootstrap-room P/D)"
	}
	return "vLLM workers (KV events over ZMQ, NIXL P/D)"
}

// demoExample is one request printTryIt shows (and the demo test sends).
type demoExample struct {
	comment, flags, path, header, body string
}

// demoExamples are the requests a newcomer can paste: the routing tiers on
// completions and chat (the completions' prompts in engine d's form,
// demoPrompt), and on vLLM its other APIs through the same rule (the
// simulated SGLang and TensorRT-LLM workers serve completions and chat).
func demoExamples(d worker.Dialect) []demoExample {
	ex := []demoExample{
		{"a completion; the X-Llb-Route header says which tier routed it and why", "-si", "/v1/completions", "",
			`{"model":"sim-model","prompt":` + demoPrompt(d, 0) + `,"max_tokens":16}`},
		{"the same system prompt again: Tier 1.5 sends it to the worker whose cache holds it", "-si", "/v1/completions", "",
			`{"model":"sim-model","prompt":` + demoPrompt(d, 1) + `,"max_tokens":16}`},
		{"a streamed chat pinned to a conversation (Tier 0)", "-sN", "/v1/chat/completions", "X-Conversation-Id: demo-1",
			`{"model":"sim-model","messages":[{"role":"user","content":"Hello!"}],"max_tokens":8,"stream":true}`},
	}
	if d != worker.DialectVLLM {
		return ex
	}
	return append(ex, []demoExample{
		{"the Responses API; a follow-up naming the answer's id (previous_response_id) goes to the worker that stored it", "-si", "/v1/responses", "",
			`{"model":"sim-model","instructions":"` + demoSystemPrompt + `","input":"What is a KV cache?","max_output_tokens":16}`},
		{"Anthropic's Messages API, streamed", "-sN", "/v1/messages", "",
			`{"model":"sim-model","system":"` + demoSystemPrompt + `","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"Hello!"}]}`},
		{"embeddings, and the models the rule's workers serve", "-s", "/v1/embeddings", "",
			`{"model":"sim-model","input":["a KV cache","prefix caching"]}`},
	}...)
}

// printTryIt prints the commands a newcomer can paste.
func (d *demo) printTryIt(w io.Writer, restURL string) {
	vip := fmt.Sprintf("http://%s:%d", d.flags.vip, d.flags.port)
	dialect := d.fleet.Dialect()
	fmt.Fprintf(w, `
llb demo is running: a P/D rule on %[1]s in front of 2 prefill + 2 decode simulated
%[3]s, Tier 1.5 on after a %[2]ds warm-up. Try:
`, vip, demoWarmupSec, demoFleetText(dialect))
	for _, e := range demoExamples(dialect) {
		header := ""
		if e.header != "" {
			header = fmt.Sprintf(" -H '%s'", e.header)
		}
		fmt.Fprintf(w, "\n  # %s\n  curl %s %s%s -H 'Content-Type: application/json'%s \\\n    -d '%s'\n", e.comment, e.flags, vip, e.path, header, e.body)
	}
	fmt.Fprintf(w, `  curl -s %[1]s/v1/models

  # the rule, its endpoints' health and its status (LoxiLB's REST API)
  curl -s %[2]s/netlox/v1/config/loadbalancer/all
  curl -s %[2]s/netlox/v1/config/loadbalancer/externalipaddress/%[3]s/port/%[4]d/protocol/tcp/status
  curl -s %[2]s/metrics | grep -E 'loxilb_pd_kv_tier15|llb_route_tier'

Stop with Ctrl-C.
`, vip, restURL, d.flags.vip, d.flags.port)
}

// stop stops llbd (SIGTERM, drain) and then the fleet.
func (d *demo) stop(ctx context.Context) {
	if d.llbd != nil {
		if err := d.llbd.Stop(10 * time.Second); err != nil {
			d.log.Warn().Err(err).Msg("llbd stopped with errors")
		}
	}
	if err := d.fleet.Stop(ctx); err != nil {
		d.log.Warn().Err(err).Msg("demo fleet stopped with errors")
	}
}

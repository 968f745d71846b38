package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// The --demo mode: llbd starts an embedded simulated vLLM fleet (2 prefill
// workers publishing KV events over ZMQ, 2 decode workers), creates a P/D
// rule with Tier 1 and Tier 1.5 on through its own REST API, and prints
// commands to try. `make run` uses it.

// Demo layout: the rule listens where the seed page's P/D example does.
const (
	demoVIP        = "127.0.0.1"
	demoPort       = 2020
	demoBaseIP     = "127.0.0.2"
	demoWarmupSec  = 2
	demoTimeScale  = 0.2 // the latency model runs 5× faster than an 8B model on an H100
	demoCacheBlock = 4096
)

// demoSystemPrompt is the shared prefix of the printed examples: long
// enough to fill several 16-token KV blocks.
const demoSystemPrompt = "You are the friendly assistant of the llb load balancer demo. Answer in one short paragraph, plainly, without mentioning these instructions. Question:"

// demo is the embedded fleet and its rule.
type demo struct {
	fleet *fleet.Fleet
	log   zerolog.Logger
}

// startDemo starts the simulated fleet.
func startDemo(log zerolog.Logger) (*demo, error) {
	tmpl := worker.DefaultConfig()
	tmpl.Engine.Latency.TimeScale = demoTimeScale
	tmpl.Engine.NumBlocks = demoCacheBlock
	tmpl.KVEvents = true
	f, err := fleet.Start(fleet.Config{Prefill: 2, Decode: 2, BaseIP: demoBaseIP, Template: &tmpl})
	if err != nil {
		return nil, fmt.Errorf("demo fleet: %w", err)
	}
	for _, m := range f.Members() {
		w := m.Worker()
		log.Info().Str("worker", w.Addr()).Str("role", m.Role.String()).Str("kv", w.KVEndpoint()).Msg("demo worker running")
	}
	return &demo{fleet: f, log: log}, nil
}

// rule is the demo's P/D rule: Tier 0 sessions and Tier 1.5 KV-exact over
// the prefill workers' events, with a short warm-up. Tier 1 (the trie,
// pd_cache_aware_mode) is left off so that the KV-exact tier, the one that
// mirrors the workers' real caches, is the one the demo shows.
func (d *demo) rule() ([]byte, error) {
	frag := d.fleet.Rule()
	sa := map[string]any{
		"externalIP": demoVIP, "port": demoPort, "protocol": "tcp", "sel": 0, "mode": 4,
		"name": "llb-demo", "pd_disagg_mode": true,
		"kvExactMode": 1, "kvZmqPort": frag.KVZmqPort, "kvHashAlgo": frag.KVHashAlgo,
		"kvBlockSize": frag.KVBlockSize, "kvWarmupSec": demoWarmupSec,
	}
	if frag.KVNoneHashSeed != nil {
		sa["kvNoneHashSeed"] = *frag.KVNoneHashSeed
	}
	return json.Marshal(map[string]any{"serviceArguments": sa, "endpoints": frag.Endpoints})
}

// apply posts the demo rule to llbd's own REST API at restURL.
func (d *demo) apply(ctx context.Context, restURL, token string) error {
	body, err := d.rule()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, restURL+"/netlox/v1/config/loadbalancer", strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("demo rule: %w", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	// 409 is an identical rule restored from a previous demo run.
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusConflict {
		return fmt.Errorf("demo rule: %d %s", res.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// printTryIt prints the commands a newcomer can paste.
func (d *demo) printTryIt(w io.Writer, restURL string) {
	vip := fmt.Sprintf("http://%s:%d", demoVIP, demoPort)
	fmt.Fprintf(w, `
llb demo is running: a P/D rule on %[1]s in front of 2 prefill + 2 decode simulated
vLLM workers (KV events over ZMQ, Tier 1.5 on after a %[3]ds warm-up). Try:

  # a completion; the X-Llb-Route header says which tier routed it and why
  curl -si %[1]s/v1/completions -H 'Content-Type: application/json' \
    -d '{"model":"sim-model","prompt":"%[6]s What is a KV cache?","max_tokens":16}'

  # the same system prompt again: Tier 1.5 sends it to the worker whose cache holds it
  curl -si %[1]s/v1/completions -H 'Content-Type: application/json' \
    -d '{"model":"sim-model","prompt":"%[6]s What is prefix caching?","max_tokens":16}'

  # a streamed chat pinned to a conversation (Tier 0)
  curl -sN %[1]s/v1/chat/completions -H 'Content-Type: application/json' -H 'X-Conversation-Id: demo-1' \
    -d '{"model":"sim-model","messages":[{"role":"user","content":"Hello!"}],"max_tokens":8,"stream":true}'

  # the rule, its endpoints' health and its status (LoxiLB's REST API)
  curl -s %[2]s/netlox/v1/config/loadbalancer/all
  curl -s %[2]s/netlox/v1/config/loadbalancer/externalipaddress/%[4]s/port/%[5]d/protocol/tcp/status
  curl -s %[2]s/metrics | grep -E 'loxilb_pd_kv_tier15|llb_route_tier'

Stop with Ctrl-C.
`, vip, restURL, demoWarmupSec, demoVIP, demoPort, demoSystemPrompt)
}

// stop stops the fleet.
func (d *demo) stop(ctx context.Context) {
	if err := d.fleet.Stop(ctx); err != nil {
		d.log.Warn().Err(err).Msg("demo fleet stopped with errors")
	}
}

package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/tokenizer"
)

// metricValue reads one series from llbd's /metrics (0 when absent).
func (d *daemon) metricValue(name, labels string) float64 {
	d.t.Helper()
	code, body := d.do(http.MethodGet, "/metrics", "")
	if code != 200 {
		d.t.Fatalf("GET /metrics: %d", code)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{[^}]*` + regexp.QuoteMeta(labels) + `[^}]*\} (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// startSinglePool starts two simulated single-pool workers publishing KV
// events from baseIP on; tok, when set, is their tokenizer.
func startSinglePool(t *testing.T, baseIP string, tok *tokenizer.Encoder) *fleet.Fleet {
	t.Helper()
	tmpl := workerCfg("", 0, engine.KVNone, 0, 0.02)
	tmpl.KVEvents = true
	if tok != nil {
		tmpl.Tokenizer = tok
	}
	f, err := fleet.Start(fleet.Config{Single: 2, BaseIP: baseIP, Template: &tmpl})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.Stop(ctx)
	})
	return f
}

// The simulated workers tokenize with their toy tokenizer, so a local Qwen3
// tokenizer disagrees with them: the first request is tokenized in
// process, its truth check catches the mismatch, and the rule falls back
// to the engines' /tokenize — after which Tier 1.5 routes as before.
func TestE2E_LocalTokenizerThatDisagreesFallsBackToTheEngine(t *testing.T) {
	f := startSinglePool(t, "127.0.0.42", nil)
	dir, err := filepath.Abs("../../tokenizer/testdata/golden/qwen3-mini")
	if err != nil {
		t.Fatal(err)
	}
	d := startDataPlane(t, "LOXILB_KV_COLDSTART_SEED_N=0", "LLB_TOKENIZER_DIR="+dir)
	d.post(ruleJSON(t, f, "127.0.0.1", 2037, map[string]any{"kvExactMode": 3, "kvWarmupSec": 1}))
	d.waitActive(2037)
	time.Sleep(1100 * time.Millisecond) // kvWarmupSec: 1

	const vip = "http://127.0.0.1:2037"
	long := strings.Repeat("a long shared prefix for the in-process tokenizer test ", 30)
	body := func(i int) string {
		return fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":2}`, long+strconv.Itoa(i))
	}
	// Until the directory is loaded (in the background) requests use the
	// engine; send until one was tokenized locally and checked.
	deadline := time.Now().Add(10 * time.Second)
	for d.metricValue("llb_tokenizer_mismatch_total", "") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no mismatch counted; local=%v checks=%v\nlog:\n%s", d.metricValue("llb_tokenizer_requests_total", `path="local"`),
				d.metricValue("llb_tokenizer_checks_total", ""), d.log.text())
		}
		if res, b := complete(t, vip, body(1000)); res.StatusCode != 200 {
			t.Fatalf("request: %d %s", res.StatusCode, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(d.log.text(), "local tokenizer disagrees with the engine") {
		t.Errorf("no mismatch warning in the log")
	}
	local := d.metricValue("llb_tokenizer_requests_total", `path="local"`)
	if local < 1 {
		t.Errorf("local tokenizations = %v; want ≥ 1", local)
	}
	routesToOwnerByTierOneFive(t, d, vip, body)
	if got := d.metricValue("llb_tokenizer_requests_total", `path="local"`); got != local {
		t.Errorf("local tokenizations went on after the mismatch: %v → %v", local, got)
	}
	if got := d.metricValue("llb_tokenizer_requests_total", `path="engine"`); got < 2 {
		t.Errorf("engine tokenizations = %v; want ≥ 2 after the fallback", got)
	}
}

// The simulated workers tokenize with the same Qwen3-derived tokenizer
// llbd loads: completion prompts and chat requests are tokenized in
// process, the truth checks agree, and Tier 1.5 routes the shared prefix
// to the endpoint that holds it without llbd asking /tokenize.
func TestE2E_LocalTokenizerAgreesAndTierOneFiveRoutesWithoutTokenize(t *testing.T) {
	dir, err := filepath.Abs("../../tokenizer/testdata/golden/qwen3-mini")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := startSinglePool(t, "127.0.0.46", tok)
	d := startDataPlane(t, "LOXILB_KV_COLDSTART_SEED_N=0")
	d.post(ruleJSON(t, f, "127.0.0.1", 2039, map[string]any{"kvExactMode": 3, "kvWarmupSec": 1, "kvTokenizerDir": dir}))
	d.waitActive(2039)
	time.Sleep(1100 * time.Millisecond) // kvWarmupSec: 1

	const vip = "http://127.0.0.1:2039"
	long := strings.Repeat("Ünïcode-heavy shared prefix: 日本語のテキスト, emoji 👍🏽, code `x := 42` and more. ", 12)
	prompt := func(i int) string {
		return fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":2}`, long+strconv.Itoa(i))
	}
	// The directory loads in the background on the rule's first request:
	// warm up until a request was tokenized locally.
	deadline := time.Now().Add(10 * time.Second)
	for d.metricValue("llb_tokenizer_requests_total", `path="local"`) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("never tokenized locally\nlog:\n%s", d.log.text())
		}
		if res, b := complete(t, vip, `{"model":"sim-model","prompt":"warm up","max_tokens":1}`); res.StatusCode != 200 {
			t.Fatalf("warm-up: %d %s", res.StatusCode, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	local0 := d.metricValue("llb_tokenizer_requests_total", `path="local"`)
	engine0 := d.metricValue("llb_tokenizer_requests_total", `path="engine"`)
	routesToOwnerByTierOneFive(t, d, vip, prompt)

	chat := func(i int) string {
		return fmt.Sprintf(`{"model":"sim-model","messages":[{"role":"system","content":%q},{"role":"user","content":"question %d"}],"max_tokens":2}`, long, i)
	}
	routesToOwnerByTierOneFiveAt(t, d, vip, "/v1/chat/completions", chat)
	local := d.metricValue("llb_tokenizer_requests_total", `path="local"`) - local0
	engineN := d.metricValue("llb_tokenizer_requests_total", `path="engine"`) - engine0
	checks := d.metricValue("llb_tokenizer_checks_total", "")
	if mm := d.metricValue("llb_tokenizer_mismatch_total", ""); mm != 0 {
		t.Errorf("mismatches = %v; want 0\nlog:\n%s", mm, d.log.text())
	}
	if local < 4 || checks < 1 {
		t.Errorf("local tokenizations since warm-up = %v, checks = %v; want ≥ 4 (2 prompts, 2 chats) and ≥ 1", local, checks)
	}
	if engineN != 0 {
		t.Errorf("engine tokenizations since warm-up = %v; want 0", engineN)
	}
	if !strings.Contains(d.log.text(), "local:qwen3") {
		t.Errorf("log does not say the chat path is local:qwen3")
	}
}

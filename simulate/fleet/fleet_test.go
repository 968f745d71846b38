package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func fastTemplate() *worker.Config {
	c := worker.DefaultConfig()
	c.Engine.NumBlocks = 256
	c.Engine.Latency.TimeScale = 0.01
	c.EventInterval = 0
	return &c
}

func startFleet(t *testing.T, cfg Config) *Fleet {
	t.Helper()
	if cfg.Template == nil {
		cfg.Template = fastTemplate()
	}
	f, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return f
}

func httpClient(t *testing.T) *http.Client {
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestFleet_StartsPDWorkersOnConsecutiveLoopbackAddresses(t *testing.T) {
	f := startFleet(t, Config{Prefill: 2, Decode: 2, BaseIP: "127.0.0.2"})
	eps := f.Endpoints()
	wantIPs := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	wantRoles := []int{int(ladder.RolePrefill), int(ladder.RolePrefill), int(ladder.RoleDecode), int(ladder.RoleDecode)}
	if len(eps) != 4 {
		t.Fatalf("%d endpoints; want 4", len(eps))
	}
	c := httpClient(t)
	for i, ep := range eps {
		if ep.EndpointIP != wantIPs[i] || ep.EpRole != wantRoles[i] || ep.Weight != 1 || ep.TargetPort == 0 || ep.NIXLPort == 0 {
			t.Fatalf("endpoint %d %+v; want ip %s role %d", i, ep, wantIPs[i], wantRoles[i])
		}
		resp, err := c.Get(f.Workers()[i].URL() + "/health")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("worker %d health: %v", i, err)
		}
		resp.Body.Close()
	}
	port := f.KVZmqPort()
	if port == 0 {
		t.Fatal("no kv port")
	}
	for i, w := range f.Workers() {
		want := ""
		if i < 2 {
			want = "tcp://" + wantIPs[i] + ":" + itoa(port)
		}
		if w.KVEndpoint() != want {
			t.Fatalf("worker %d kv endpoint %q; want %q (decode workers publish nothing)", i, w.KVEndpoint(), want)
		}
	}
	raw, err := json.Marshal(f.Rule())
	if err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{`"kvZmqPort":` + itoa(port), `"kvBlockSize":16`, `"kvHashAlgo":"sha256_cbor"`, `"kvNoneHashSeed":"0"`,
		`"pd_disagg_mode":true`, `"endpointIP":"127.0.0.4"`, `"ep_role":2`, `"nixl_port":`} {
		if !strings.Contains(string(raw), frag) {
			t.Fatalf("rule %s lacks %s", raw, frag)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestFleet_SinglePoolRuleHasNoRoles(t *testing.T) {
	f := startFleet(t, Config{Single: 2, BaseIP: "127.0.1.2"})
	raw, _ := json.Marshal(f.Rule())
	if strings.Contains(string(raw), "ep_role") || strings.Contains(string(raw), "nixl_port") || strings.Contains(string(raw), "pd_disagg_mode") {
		t.Fatalf("single-pool rule %s carries P/D fields", raw)
	}
	if f.Workers()[1].KVEndpoint() == "" {
		t.Fatal("single-pool workers must publish KV events")
	}
}

// TestFleet_PDLegsAcrossMembers runs the two-leg protocol between fleet
// members, as llb's gateway will.
func TestFleet_PDLegsAcrossMembers(t *testing.T) {
	f := startFleet(t, Config{Prefill: 1, Decode: 1, BaseIP: "127.0.2.2"})
	p, d := f.Workers()[0], f.Workers()[1]
	c := httpClient(t)
	prompt := strings.Repeat(" word", 64)
	pre := postJSON(t, c, p.URL()+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`)
	var pr struct {
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(pre, &pr); err != nil || pr.KVTransferParams == nil {
		t.Fatalf("prefill leg %s", pre)
	}
	postJSON(t, c, d.URL()+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":3,"kv_transfer_params":`+string(pr.KVTransferParams)+`}`)
	recs := d.Debug().KVParamsReceived
	if len(recs) != 1 || !recs[0].Pulled || recs[0].RemoteEngineID != p.EngineID() || recs[0].RemoteHost != "127.0.2.2" {
		t.Fatalf("decode receipts %+v", recs)
	}
}

func postJSON(t *testing.T, c *http.Client, url, body string) []byte {
	t.Helper()
	resp, err := c.Post(url, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	return raw
}

func TestFleet_RestartBringsACrashedMemberBackOnItsAddresses(t *testing.T) {
	f := startFleet(t, Config{Prefill: 1, Decode: 1, BaseIP: "127.0.3.2", Template: func() *worker.Config {
		c := fastTemplate()
		c.Replay = true
		return c
	}()})
	old := f.Workers()[0]
	if _, err := f.Restart(0); !errors.Is(err, ErrRunning) {
		t.Fatalf("restart of a running member: %v; want ErrRunning", err)
	}
	old.Crash()
	w, err := f.Restart(0)
	if err != nil {
		t.Fatal(err)
	}
	if w.Addr() != old.Addr() || w.KVEndpoint() != old.KVEndpoint() || w.ReplayEndpoint() != old.ReplayEndpoint() ||
		w.NIXLAddr() != old.NIXLAddr() || w.EngineID() == old.EngineID() {
		t.Fatalf("restarted on %s %s %s %s (engine %s); was %s %s %s %s (engine %s)",
			w.Addr(), w.KVEndpoint(), w.ReplayEndpoint(), w.NIXLAddr(), w.EngineID(),
			old.Addr(), old.KVEndpoint(), old.ReplayEndpoint(), old.NIXLAddr(), old.EngineID())
	}
	if f.Workers()[0] != w || f.Endpoints()[0].TargetPort != w.HTTPPort() {
		t.Fatal("fleet does not report the restarted worker")
	}
	if _, err := f.Restart(7); !errors.Is(err, ErrConfig) {
		t.Fatalf("restart of a missing member: %v; want ErrConfig", err)
	}
}

func TestStart_RejectsBadFleetsAndLeavesNothingRunning(t *testing.T) {
	tests := []struct {
		name string
		give Config
		want error
	}{
		{"no workers", Config{}, ErrConfig},
		{"prefill without decode", Config{Prefill: 1}, ErrConfig},
		{"negative count", Config{Single: -1, Decode: 1, Prefill: 1}, ErrConfig},
		{"base ip not ipv4", Config{Single: 1, BaseIP: "::1"}, ErrConfig},
		{"base ip without room", Config{Single: 2, BaseIP: "255.255.255.255"}, ErrConfig},
		{"port out of range", Config{Single: 1, KVPort: 70000}, ErrConfig},
		{"second worker cannot start", Config{Single: 2, BaseIP: "127.0.4.2", Template: fastTemplate(),
			Customize: func(i int, _ ladder.Role, c *worker.Config) {
				if i == 1 {
					c.Engine.NumBlocks = -1
				}
			}}, ErrStart},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Start(tt.give)
			if !errors.Is(err, tt.want) {
				if f != nil {
					_ = f.Stop(context.Background())
				}
				t.Fatalf("error %v; want %v", err, tt.want)
			}
		})
	}
}

// TestFleet_SGLangDPRanksPublishOnConsecutivePorts: an SGLang member with
// three DP ranks publishes on kvZmqPort, +1 and +2 of its own address, each
// rank serving requests in turn, and the rule fragment names the engine.
func TestFleet_SGLangDPRanksPublishOnConsecutivePorts(t *testing.T) {
	tmpl := fastTemplate()
	tmpl.Dialect = worker.DialectSGLang
	f := startFleet(t, Config{Single: 2, BaseIP: "127.0.0.41", DPRanks: 3, Template: tmpl})
	r := f.Rule()
	if r.KVEngineType != "sglang" || r.KVHashAlgo != "sha256_sglang" || r.KVDpRankCount != 3 || r.KVNoneHashSeed != nil || r.KVZmqPort == 0 {
		t.Fatalf("rule fragment %+v", r)
	}
	for _, m := range f.Members() {
		ranks := append([]*worker.Worker{m.Worker()}, m.Ranks()...)
		if len(ranks) != 3 {
			t.Fatalf("member %d: %d ranks", m.Index, len(ranks))
		}
		for rank, w := range ranks {
			if got := endpointPort(w.KVEndpoint()); got != r.KVZmqPort+rank {
				t.Errorf("member %d rank %d publishes on %d; want %d", m.Index, rank, got, r.KVZmqPort+rank)
			}
			if w.Config().DPRank != rank {
				t.Errorf("member %d rank %d: DPRank %d", m.Index, rank, w.Config().DPRank)
			}
		}
		c := httpClient(t)
		for i := 0; i < 3; i++ {
			body, _ := json.Marshal(map[string]any{"prompt": []int{1, 2, 3, 4, i}, "max_tokens": 1})
			resp, err := c.Post(m.Worker().URL()+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		for rank, w := range ranks {
			if n := w.Stats().Finished; n != 1 {
				t.Errorf("member %d rank %d served %d requests; want 1 (round robin)", m.Index, rank, n)
			}
		}
	}
}

// TestFleet_SGLangPDShareOneBootstrapPort: every prefill serves the rule's
// one pdBootstrapPort on its own address.
func TestFleet_SGLangPDShareOneBootstrapPort(t *testing.T) {
	tmpl := fastTemplate()
	tmpl.Dialect = worker.DialectSGLang
	f := startFleet(t, Config{Prefill: 2, Decode: 1, BaseIP: "127.0.0.45", Template: tmpl})
	r := f.Rule()
	if !r.PDDisaggMode || r.PDBootstrapPort == 0 || r.KVEngineType != "sglang" {
		t.Fatalf("rule fragment %+v", r)
	}
	for _, m := range f.Members() {
		got := endpointPort(m.Worker().BootstrapAddr())
		if m.Role == ladder.RolePrefill && got != r.PDBootstrapPort || m.Role == ladder.RoleDecode && got != 0 {
			t.Errorf("member %d (%v) bootstrap port %d; rule %d", m.Index, m.Role, got, r.PDBootstrapPort)
		}
	}
}

// TestFleet_TRTLLMRuleHasNoZMQPort: TensorRT-LLM is drained over HTTP.
func TestFleet_TRTLLMRuleHasNoZMQPort(t *testing.T) {
	tmpl := fastTemplate()
	tmpl.Dialect = worker.DialectTRTLLM
	tmpl.Engine.BlockSize = 32
	f := startFleet(t, Config{Single: 1, BaseIP: "127.0.0.48", Template: tmpl})
	if r := f.Rule(); r.KVZmqPort != 0 || r.KVEngineType != "trtllm" || r.KVHashAlgo != "blockhash_trtllm" || r.KVBlockSize != 32 {
		t.Fatalf("rule fragment %+v", r)
	}
}

func TestAddrInUse_RecognisesZMQAndNetBindFailures(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, netErr := net.Listen("tcp", l.Addr().String())
	for _, tc := range []struct {
		give error
		want bool
	}{
		{netErr, true},
		{fmt.Errorf("worker worker-1: kv events: worker: cannot listen: bind tcp://127.0.1.3:46137: kvpub: bind failed: address already in use"), true},
		{fmt.Errorf("worker worker-1: %w", ErrConfig), false},
	} {
		if got := addrInUse(tc.give); got != tc.want {
			t.Errorf("addrInUse(%v) = %v; want %v", tc.give, got, tc.want)
		}
	}
}

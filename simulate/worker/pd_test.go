package worker

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/llbproject/llb/simulate/engine"
)

// pdPair starts a prefill and a decode worker.
func pdPair(t *testing.T) (p, d *Worker) {
	t.Helper()
	p = startWorker(t, func(c *Config) { c.Name = "prefill"; c.Engine.KVRole = engine.KVProducer })
	d = startWorker(t, func(c *Config) { c.Name = "decode"; c.Engine.KVRole = engine.KVConsumer; c.KVEvents = false })
	return p, d
}

// prefillLeg builds the toy proxy's prefill body from a client body.
func prefillLeg(client map[string]any) map[string]any {
	leg := map[string]any{}
	for k, v := range client {
		leg[k] = v
	}
	leg["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
		"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	leg["stream"] = false
	leg["max_tokens"] = 1
	delete(leg, "stream_options")
	return leg
}

// decodeLeg is the client body with P's params.
func decodeLeg(client map[string]any, params json.RawMessage) map[string]any {
	leg := map[string]any{}
	for k, v := range client {
		leg[k] = v
	}
	leg["kv_transfer_params"] = params
	return leg
}

// TestPD_DecodeLegGetsThePrefillParamsAndPullsTheBlocks walks the NIXL
// proxy protocol (vllm-contract.md §4) over real HTTP.
func TestPD_DecodeLegGetsThePrefillParamsAndPullsTheBlocks(t *testing.T) {
	p, d := pdPair(t)
	c := client(t)
	prompt := words("Disaggregated serving splits prefill from decode.", 100)
	n := tokenize(t, c, p, map[string]any{"prompt": prompt}).Count
	body := map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 6, "stream": true, "stream_options": map[string]any{"include_usage": true}}
	hdr := map[string]string{"X-Request-Id": "pd-1"}

	st, _, raw := post(t, c, p.URL()+"/v1/completions", prefillLeg(body), hdr)
	if st != http.StatusOK {
		t.Fatalf("prefill leg %d %s", st, raw)
	}
	pr := decode[response](t, raw)
	var params struct {
		DoRemotePrefill bool    `json:"do_remote_prefill"`
		DoRemoteDecode  bool    `json:"do_remote_decode"`
		RemoteBlockIDs  [][]int `json:"remote_block_ids"`
		RemoteEngineID  string  `json:"remote_engine_id"`
		RemoteRequestID string  `json:"remote_request_id"`
		RemoteHost      string  `json:"remote_host"`
		RemotePort      int     `json:"remote_port"`
		TPSize          int     `json:"tp_size"`
		RemoteNumTokens int     `json:"remote_num_tokens"`
	}
	if err := json.Unmarshal(pr.KVTransferParams, &params); err != nil {
		t.Fatalf("kv_transfer_params %s: %v", pr.KVTransferParams, err)
	}
	_, nixlPort, _ := net.SplitHostPort(p.NIXLAddr())
	if !params.DoRemotePrefill || params.DoRemoteDecode || params.RemoteEngineID != p.EngineID() ||
		params.RemoteRequestID != "cmpl-pd-1-0" || params.RemoteHost != "127.0.0.1" || strconv.Itoa(params.RemotePort) != nixlPort ||
		params.TPSize != 1 || params.RemoteNumTokens != n || len(params.RemoteBlockIDs) != 1 || len(params.RemoteBlockIDs[0]) != n/16 {
		t.Fatalf("kv_transfer_params %s; prompt of %d tokens, nixl port %s", pr.KVTransferParams, n, nixlPort)
	}
	if pr.Usage.CompletionTokens != 1 || *pr.Choices[0].FinishReason != "length" {
		t.Fatalf("prefill leg response %s", raw)
	}
	if s := p.Stats(); s.Leases != 1 || s.RemoteDecodeLegs != 1 {
		t.Fatalf("prefill stats %+v; want one lease", s)
	}

	st, _, raw = post(t, c, d.URL()+"/v1/completions", decodeLeg(body, pr.KVTransferParams), hdr)
	if st != http.StatusOK {
		t.Fatalf("decode leg %d %s", st, raw)
	}
	evs := sseEvents(t, raw)
	if len(evs) != 6+2 {
		t.Fatalf("decode leg %d events; want 6 tokens, usage, [DONE]", len(evs))
	}
	if u := decode[response](t, []byte(evs[6])).Usage; u.PromptTokens != n || u.CompletionTokens != 6 {
		t.Fatalf("decode usage %+v", u)
	}
	recs := d.Debug().KVParamsReceived
	if len(recs) != 1 {
		t.Fatalf("decode receipts %+v; want one", recs)
	}
	r := recs[0]
	if r.RequestID != "pd-1" || !r.DoRemotePrefill || r.RemoteEngineID != p.EngineID() || r.RemoteRequestID != "cmpl-pd-1-0" ||
		!r.Pulled || r.PulledBlocks != n/16 || r.PullError != "" {
		t.Fatalf("decode receipt %+v", r)
	}
	ds := d.Stats()
	if ds.RemotePrefillLegs != 1 || ds.PrefixQueries != 0 || ds.BlocksInUse != 0 {
		t.Fatalf("decode stats %+v; want one remote leg, no local prefill", ds)
	}
	eventually(t, "the prefill lease to be released", func() bool { s := p.Stats(); return s.Leases == 0 && s.LeasesReleased == 1 })
	if got := metric(t, scrape(t, c, d), "llbsim_remote_prefill_legs_total"); got != 1 {
		t.Fatalf("decode llbsim_remote_prefill_legs_total %v; want 1", got)
	}
	if got := metric(t, scrape(t, c, p), "llbsim_nixl_reads_served_total"); got != 1 {
		t.Fatalf("prefill llbsim_nixl_reads_served_total %v; want 1", got)
	}
}

func TestPD_DecodePrefillsLocallyWhenThePullFails(t *testing.T) {
	p, d := pdPair(t)
	c := client(t)
	prompt := words("pull failures", 80)
	body := map[string]any{"prompt": prompt, "max_tokens": 2}
	_, _, raw := post(t, c, p.URL()+"/v1/completions", prefillLeg(body), nil)
	var good map[string]any
	if err := json.Unmarshal(decode[response](t, raw).KVTransferParams, &good); err != nil {
		t.Fatal(err)
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := dead.Addr().(*net.TCPAddr).Port
	_ = dead.Close() // nothing listens there now
	tests := []struct {
		name   string
		change map[string]any
	}{
		{"wrong engine id", map[string]any{"remote_engine_id": "someone-else"}},
		{"unknown request id", map[string]any{"remote_request_id": "cmpl-never-0"}},
		{"wrong block ids", map[string]any{"remote_block_ids": [][]int{{999999}}}},
		{"nobody at the side channel", map[string]any{"remote_port": deadPort}},
		{"no remote host", map[string]any{"remote_host": nil}},
		{"block ids of the wrong shape", map[string]any{"remote_block_ids": "lots"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := map[string]any{}
			for k, v := range good {
				params[k] = v
			}
			for k, v := range tt.change {
				params[k] = v
			}
			raw, _ := json.Marshal(params)
			before := d.Stats().PrefixQueries
			st, _, out := post(t, c, d.URL()+"/v1/completions", decodeLeg(body, raw), nil)
			if st != http.StatusOK || decode[response](t, out).Usage.CompletionTokens != 2 {
				t.Fatalf("decode leg %d %s; want a normal answer", st, out)
			}
			recs := d.Debug().KVParamsReceived
			if len(recs) != i+1 || recs[i].Pulled || recs[i].PullError == "" {
				t.Fatalf("receipt %+v; want a recorded pull failure", recs[len(recs)-1])
			}
			if d.Stats().PrefixQueries == before {
				t.Fatal("failed pull did not fall back to a local prefill")
			}
		})
	}
	if got := metric(t, scrape(t, c, d), "llbsim_kv_pull_failures_total"); got != float64(len(tests)) {
		t.Fatalf("pull failures %v; want %d", got, len(tests))
	}
	if p.Stats().Leases != 1 {
		t.Fatal("a failed pull released the lease")
	}
}

func TestPD_RolesIgnoreParamsTheyDoNotServe(t *testing.T) {
	p, d := pdPair(t)
	c := client(t)
	body := map[string]any{"prompt": words("roles", 40), "max_tokens": 1}
	// Asking the decode worker to prefill for someone else: no params back.
	_, _, raw := post(t, c, d.URL()+"/v1/completions", prefillLeg(body), nil)
	if r := decode[response](t, raw); r.KVTransferParams != nil {
		t.Fatalf("decode worker returned kv_transfer_params %s", r.KVTransferParams)
	}
	// Sending pulled-KV params to the prefill worker: it prefills itself.
	params := json.RawMessage(`{"do_remote_prefill":true,"remote_engine_id":"x","remote_request_id":"y","remote_host":"127.0.0.1","remote_port":1,"remote_block_ids":[[1]]}`)
	if st, _, out := post(t, c, p.URL()+"/v1/completions", decodeLeg(body, params), nil); st != 200 {
		t.Fatalf("prefill worker %d %s", st, out)
	}
	if d.Stats().RemoteParamsIgnored != 1 || p.Stats().RemoteParamsIgnored != 1 || p.Stats().RemotePrefillLegs != 0 {
		t.Fatalf("ignored: decode %d, prefill %d", d.Stats().RemoteParamsIgnored, p.Stats().RemoteParamsIgnored)
	}
}

func TestPD_PromptShorterThanABlockMovesNoBlocks(t *testing.T) {
	p, d := pdPair(t)
	c := client(t)
	body := map[string]any{"prompt": "tiny", "max_tokens": 2}
	_, _, raw := post(t, c, p.URL()+"/v1/completions", prefillLeg(body), nil)
	params := decode[response](t, raw).KVTransferParams
	var got struct {
		RemoteBlockIDs [][]int `json:"remote_block_ids"`
	}
	if err := json.Unmarshal(params, &got); err != nil || len(got.RemoteBlockIDs) != 1 || len(got.RemoteBlockIDs[0]) != 0 {
		t.Fatalf("params %s; want one empty block list", params)
	}
	if st, _, out := post(t, c, d.URL()+"/v1/completions", decodeLeg(body, params), nil); st != 200 {
		t.Fatalf("decode %d %s", st, out)
	}
	if r := d.Debug().KVParamsReceived[0]; !r.Pulled || r.PulledBlocks != 0 {
		t.Fatalf("receipt %+v; want a zero-block pull", r)
	}
	if p.Stats().Leases != 0 {
		t.Fatal("a zero-block prefill holds a lease")
	}
}

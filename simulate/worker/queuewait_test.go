package worker

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
)

func TestQueueWait_OnlyWhenAskedSoTheBytesStayVLLMs(t *testing.T) {
	tests := []struct {
		name string
		give bool
		want bool
	}{
		{"default: vLLM's usage object", false, false},
		{"ReportQueueWait: the simulator's field", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWorker(t, func(c *Config) { c.ReportQueueWait = tt.give })
			c := client(t)
			for _, body := range []map[string]any{
				{"prompt": words("queue wait", 20), "max_tokens": 2},
				{"prompt": words("queue wait", 20), "max_tokens": 2, "stream": true, "stream_options": map[string]any{"include_usage": true}},
			} {
				st, _, raw := post(t, c, w.URL()+"/v1/completions", body, nil)
				if st != http.StatusOK {
					t.Fatalf("status %d %s", st, raw)
				}
				if got := bytes.Contains(raw, []byte(`"llbsim_queue_wait_s":`)); got != tt.want {
					t.Fatalf("stream %v: llbsim_queue_wait_s present %v; want %v\n%s", body["stream"], got, tt.want, raw)
				}
			}
		})
	}
}

func TestQueueWait_CountsTheWaitForABatchSlot(t *testing.T) {
	const itl = 20 * time.Millisecond
	const tokens = 20
	w := startWorker(t, func(c *Config) {
		c.ReportQueueWait = true
		c.Engine.MaxNumSeqs = 1
		c.Engine.Latency.TimeScale = 1
		c.Engine.Latency.InterTokenLatency = itl
	})
	c := client(t)
	body := map[string]any{"prompt": words("one batch slot", 20), "max_tokens": tokens}
	b, _ := json.Marshal(body)
	first := make(chan []byte, 1)
	go func() { // not post: t.Fatal belongs to the test's goroutine
		res, err := c.Post(w.URL()+"/v1/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			first <- []byte(err.Error())
			return
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		first <- raw
	}()
	eventually(t, "the first request to run", func() bool { return w.Stats().Running == 1 })
	_, _, raw := post(t, c, w.URL()+"/v1/completions", body, nil)
	waits := make([]float64, 2)
	for i, r := range [][]byte{<-first, raw} {
		var resp struct {
			Usage struct {
				QueueWait *float64 `json:"llbsim_queue_wait_s"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(r, &resp); err != nil || resp.Usage.QueueWait == nil {
			t.Fatalf("response %d: %v\n%s", i, err, r)
		}
		waits[i] = *resp.Usage.QueueWait
	}
	// The second waited at least for the first's remaining tokens (it was
	// running when the second arrived): a lower bound no slow machine can
	// break.
	if minWait := (itl * (tokens - 2)).Seconds(); waits[1] < minWait || waits[0] >= waits[1] {
		t.Fatalf("queue waits %v s; want the second >= %v s and above the first", waits, minWait)
	}
}

func TestQueueWait_DecodeLegAddsThePrefillLegs(t *testing.T) {
	p := startWorker(t, func(c *Config) { c.Name = "prefill"; c.Engine.KVRole = engine.KVProducer; c.ReportQueueWait = true })
	d := startWorker(t, func(c *Config) {
		c.Name = "decode"
		c.Engine.KVRole = engine.KVConsumer
		c.KVEvents = false
		c.ReportQueueWait = true
	})
	c := client(t)
	body := map[string]any{"prompt": words("carried wait", 60), "max_tokens": 3}
	_, _, raw := post(t, c, p.URL()+"/v1/completions", prefillLeg(body), nil)
	var params map[string]any
	if err := json.Unmarshal(decode[response](t, raw).KVTransferParams, &params); err != nil {
		t.Fatal(err)
	}
	if _, ok := params["llbsim_queue_wait_s"].(float64); !ok {
		t.Fatalf("prefill kv_transfer_params %v carry no llbsim_queue_wait_s", params)
	}
	const carried = 5.0
	params["llbsim_queue_wait_s"] = carried // as if the prefill leg had queued 5 s
	b, _ := json.Marshal(params)
	st, _, raw := post(t, c, d.URL()+"/v1/completions", decodeLeg(body, b), nil)
	if st != http.StatusOK {
		t.Fatalf("decode leg %d %s", st, raw)
	}
	u := decode[response](t, raw).Usage
	if u.QueueWait == nil || *u.QueueWait < carried || *u.QueueWait > carried+5 {
		t.Fatalf("decode usage %s; want llbsim_queue_wait_s = %v s carried plus the decode leg's own", raw, carried)
	}
}

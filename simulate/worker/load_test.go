package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/llbproject/llb/inventory"
)

// TestWorker_ConcurrentLoadQueuesEvictsAndStaysConsistent fires many
// concurrent requests at a worker with a small batch and a small cache: all
// must complete, nothing may stay held, and llb's mirror must end equal to
// the worker's cache (no event lost or duplicated under concurrency).
func TestWorker_ConcurrentLoadQueuesEvictsAndStaysConsistent(t *testing.T) {
	w := startWorker(t, func(c *Config) {
		c.Engine.MaxNumSeqs = 4
		c.Engine.NumBlocks = 64
		c.EventInterval = 0
	})
	hasher, _ := inventory.NewHasher(inventory.AlgoSHA256CBOR, 16, "0")
	c := client(t)
	v := watch(t, w, hasher)
	joinFeed(t, c, w, v)

	const n = 48
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prompt := words(fmt.Sprintf("group %d", i%6), 70) + words(fmt.Sprintf(" q%d", i), 10)
			body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 4, "stream": i%2 == 0})
			resp, err := c.Post(w.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 {
				errs <- fmt.Errorf("request %d: %d %v %s", i, resp.StatusCode, err, raw)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Finished < n || st.Running != 0 || st.Waiting != 0 || st.BlocksInUse != 0 {
		t.Fatalf("after the load: %+v", st)
	}
	if st.BlocksRemoved == 0 || st.PrefixHits == 0 {
		t.Fatalf("the load neither evicted nor hit: %+v", st)
	}
	eventually(t, "llb's mirror to equal the cache", func() bool { return v.stats().Blocks == w.Stats().CachedBlocks })
	if ms := v.stats(); ms.UnknownRemovals != 0 || ms.Contract.Tripped {
		t.Fatalf("mirror %+v; want every removal known and the contract intact", ms)
	}
}

func TestWorker_ClientHangupAbortsTheRequest(t *testing.T) {
	w := startWorker(t, func(c *Config) { c.Engine.Latency.TimeScale = 0.5 })
	c := client(t)
	ctx, cancel := context.WithCancel(context.Background())
	body, _ := json.Marshal(map[string]any{"prompt": words("hang up", 50), "max_tokens": 500, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, w.URL()+"/v1/completions", bytes.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	eventually(t, "the engine to abort the request", func() bool {
		st := w.Stats()
		return st.Aborted == 1 && st.Running == 0 && st.BlocksInUse == 0
	})
}

func TestWorker_FullWaitingQueueAnswers503(t *testing.T) {
	w := startWorker(t, func(c *Config) {
		c.Engine.MaxNumSeqs = 1
		c.Engine.MaxWaiting = 1
		c.Engine.Latency.TimeScale = 0.5
	})
	c := client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long, _ := json.Marshal(map[string]any{"prompt": "long", "max_tokens": 500})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, w.URL()+"/v1/completions", bytes.NewReader(long))
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	eventually(t, "one running and one waiting", func() bool { st := w.Stats(); return st.Running == 1 && st.Waiting == 1 })
	st, _, raw := post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 1}, nil)
	if st != http.StatusServiceUnavailable || !strings.Contains(decode[apiErr](t, raw).Error.Message, "queue is full") {
		t.Fatalf("status %d %s; want 503 queue full", st, raw)
	}
	cancel()
	wg.Wait()
	eventually(t, "the queued requests to be aborted", func() bool { st := w.Stats(); return st.Running == 0 && st.Waiting == 0 })
}

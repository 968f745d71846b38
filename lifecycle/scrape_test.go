package lifecycle

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
)

func TestScraper_ReadsCapacityAndQueueDepth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("vllm:num_requests_waiting{engine=\"0\"} 5.0\n" +
			"vllm:num_requests_running{engine=\"0\"} 2.0\n" +
			"vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"4096\"} 1.0\n"))
	}))
	defer srv.Close()
	sys := actors.NewSystem(zerolog.Nop(), nil)
	defer sys.Shutdown()
	rs, err := newRuleSet(ruleSetConfig{System: sys})
	if err != nil {
		t.Fatal(err)
	}
	scrape := rs.scraper(srv.Listener.Addr().String(), 16)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got, err := scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (actors.EngineStats{KVCapacityBlocks: 4096, Waiting: 5}); got != want {
		t.Fatalf("got %+v; want %+v", got, want)
	}
	srv.Close()
	if _, err := scrape(ctx); err == nil {
		t.Fatal("a dead engine scraped without error")
	}
}

package replica

// A member process for the multi-process tests: the test binary re-runs
// itself with LLB_REPLICA_HELPER=1, and TestMain runs helperMain instead of
// the tests. The process joins the cluster and serves a small control API
// on LLB_REPLICA_CTL so the test can look sessions up through it, read its
// status and its local activations — and SIGKILL/SIGSTOP it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/etcdconn"
	"github.com/llbproject/llb/ladder"
)

func TestMain(m *testing.M) {
	if os.Getenv("LLB_REPLICA_HELPER") == "1" {
		os.Exit(helperMain())
	}
	os.Exit(m.Run())
}

// helperSpec is the session table the helpers serve.
func helperSpec(shards int) SessionSpec {
	return SessionSpec{Service: "10.0.0.1:2020/tcp", Shards: shards, TTL: 10 * time.Minute, MaxEntries: 100 * shards}
}

func helperMain() int {
	log := zerolog.New(os.Stderr).With().Timestamp().Str("helper", os.Getenv("LLB_REPLICA_ADVERTISE")).Logger().Level(zerolog.InfoLevel)
	cfg := Config{
		ClusterName: os.Getenv("LLB_REPLICA_CLUSTER"),
		Advertise:   os.Getenv("LLB_REPLICA_ADVERTISE"),
		Etcd:        etcdconn.Config{Endpoints: etcdconn.ParseEndpoints(os.Getenv("LLB_REPLICA_ETCD"))},
		Log:         log,
		// The tests measure availability, not latency: the caller's
		// deadline (timeout_ms) rules, not the 5 ms default.
		LookupTimeout: time.Second,
	}
	m, err := Start(cfg)
	if err != nil {
		log.Error().Err(err).Msg("start")
		return 2
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, m.Status()) })
	mux.HandleFunc("/local", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, m.LocalShards("")) })
	mux.HandleFunc("/pin", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		shards, _ := strconv.Atoi(q.Get("shards"))
		pf, _ := strconv.Atoi(q.Get("prefill"))
		m.Sessions.Pin(helperSpec(shards), q.Get("key"), ladder.Pin{Prefill: pf, Decode: -1})
	})
	mux.HandleFunc("/lookup", func(w http.ResponseWriter, r *http.Request) {
		// Every key gets its own deadline and goroutine, so one dead
		// owner does not starve the keys after it.
		q := r.URL.Query()
		shards, _ := strconv.Atoi(q.Get("shards"))
		ms, _ := strconv.Atoi(q.Get("timeout_ms"))
		keys := strings.Split(q.Get("keys"), ",")
		out := lookupResult{Results: make([]lookupOne, len(keys))}
		var wg sync.WaitGroup
		for i, key := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(r.Context(), time.Duration(ms)*time.Millisecond)
				defer cancel()
				ans, err := m.Sessions.Lookup(ctx, helperSpec(shards), key)
				res := lookupOne{Found: ans.Found, Prefill: ans.Pin.Prefill, Member: ans.Member, Activation: ans.Activation}
				if err != nil {
					res.Err = err.Error()
				}
				out.Results[i] = res
			}()
		}
		wg.Wait()
		writeJSON(w, out)
	})
	srv := &http.Server{Addr: os.Getenv("LLB_REPLICA_CTL"), Handler: mux}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("control server")
			os.Exit(3)
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	_ = srv.Close()
	m.Stop()
	return 0
}

type lookupOne struct {
	Found      bool   `json:"found"`
	Prefill    int    `json:"prefill"`
	Member     string `json:"member"`
	Activation string `json:"activation"`
	Err        string `json:"err,omitempty"`
}

type lookupResult struct {
	Results []lookupOne `json:"results"`
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		http.Error(w, fmt.Sprint(err), http.StatusInternalServerError)
	}
}

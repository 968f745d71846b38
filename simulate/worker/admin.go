package worker

import (
	"errors"
	"net/http"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/kvpub"
)

// handleHealth serves GET /health and /ping: 200 with an empty body, 503
// when the engine is "dead".
func (w *Worker) handleHealth(rw http.ResponseWriter, r *http.Request) {
	if w.faults.dead() {
		rw.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	rw.WriteHeader(http.StatusOK)
}

// modelCard is one /v1/models entry.
type modelCard struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen int     `json:"max_model_len"`
	Permission  []any   `json:"permission"`
}

// handleModels serves GET /v1/models: the model under each served name
// and its LoRA adapters.
func (w *Worker) handleModels(rw http.ResponseWriter, r *http.Request) {
	writeJSON(rw, http.StatusOK, map[string]any{"object": "list", "data": w.modelCards()})
}

// handleReset serves POST /reset_prefix_cache: AllBlocksCleared on success,
// 409 while blocks are in use (vLLM refuses then too).
func (w *Worker) handleReset(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeError(rw, http.StatusMethodNotAllowed, "use POST")
		return
	}
	err := w.drv.reset(r.Context())
	switch {
	case err == nil:
		w.log.Info().Msg("prefix cache reset")
		rw.WriteHeader(http.StatusOK)
	case errors.Is(err, engine.ErrBlocksInUse):
		writeError(rw, http.StatusConflict, "Failed to reset prefix cache: "+err.Error())
	default:
		writeError(rw, http.StatusServiceUnavailable, err.Error())
	}
}

// Debug is a worker's full state as /_sim/debug shows it.
type Debug struct {
	// Name is Config.Name.
	Name string `json:"name"`
	// Role is the engine's kv_role: "none", "prefill" (kv_producer),
	// "decode" (kv_consumer) or "both" (kv_both).
	Role string `json:"role"`
	// EngineID is the remote_engine_id this worker hands out.
	EngineID string `json:"engine_id"`
	// Model is the served model name.
	Model string `json:"model"`
	// HTTPAddr is the OpenAI API address.
	HTTPAddr string `json:"http_addr"`
	// KVEndpoint is the ZMQ PUB address ("" without KV events).
	KVEndpoint string `json:"kv_endpoint"`
	// ReplayEndpoint is the ZMQ ROUTER address ("" without replay).
	ReplayEndpoint string `json:"replay_endpoint"`
	// NIXLAddr is the side-channel address ("" for role none).
	NIXLAddr string `json:"nixl_addr"`
	// Engine is the engine's gauges and counters.
	Engine engine.Stats `json:"engine"`
	// Publisher is the KV publisher's counters.
	Publisher kvpub.Stats `json:"publisher"`
	// KVParamsReceived are the last kv_transfer_params received, oldest
	// first.
	KVParamsReceived []KVReceipt `json:"kv_params_received"`
	// Counters are the worker's own counters.
	Counters map[string]uint64 `json:"counters"`
	// Faults are the live faults and how many were injected by kind.
	Faults FaultsView `json:"faults"`
	// Uptime is how long the worker has run.
	Uptime string `json:"uptime"`
}

// Debug returns the worker's state (the body of GET /_sim/debug).
func (w *Worker) Debug() Debug {
	f, inj := w.faults.snapshot()
	return Debug{
		Name:             w.cfg.Name,
		Role:             w.cfg.Engine.KVRole.String(),
		EngineID:         w.engineID,
		Model:            w.cfg.Model,
		HTTPAddr:         w.Addr(),
		KVEndpoint:       w.KVEndpoint(),
		ReplayEndpoint:   w.ReplayEndpoint(),
		NIXLAddr:         w.NIXLAddr(),
		Engine:           w.drv.snapshot(),
		Publisher:        w.pubStats(),
		KVParamsReceived: w.receipts.list(),
		Counters: map[string]uint64{
			"requests_rejected":  w.met.rejected.Get(),
			"strict_refused":     w.met.strictRefused.Get(),
			"kv_params_received": w.met.kvParamsReceived.Get(),
			"kv_pulls":           w.met.pulls.Get(),
			"kv_pull_failures":   w.met.pullFailures.Get(),
			"nixl_reads_served":  w.met.nixlReadsServed.Get(),
			"kv_publish_errors":  w.drv.publishErrors.Load(),
		},
		Faults: FaultsView{Faults: f, LatencyMS: float64(f.Latency) / float64(time.Millisecond), Injected: inj},
		Uptime: time.Since(w.started).Round(time.Millisecond).String(),
	}
}

// handleDebug serves GET /_sim/debug.
func (w *Worker) handleDebug(rw http.ResponseWriter, r *http.Request) {
	writeJSON(rw, http.StatusOK, w.Debug())
}

package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/llbproject/llb/simulate/engine"
)

// The NIXL side channel stand-in. A real decode worker reads the prompt's
// KV blocks from the prefill worker over NIXL at remote_host:remote_port; the
// simulated one makes one HTTP call there, which checks the engine id and the
// block ids, releases the prefill's lease and reports how many blocks moved.
// The transfer time itself is charged by the decode engine's latency model.

// nixlReadPath is the side channel's only route.
const nixlReadPath = "/nixl/read"

// nixlRead is a decode side's read of a prefill's leased blocks.
type nixlRead struct {
	RemoteEngineID  string `json:"remote_engine_id"`
	RemoteRequestID string `json:"remote_request_id"`
	RemoteBlockIDs  []int  `json:"remote_block_ids"`
}

// nixlReadReply is the answer.
type nixlReadReply struct {
	Blocks int `json:"blocks"`
}

// handleNIXLRead serves POST /nixl/read on the side channel.
func (w *Worker) handleNIXLRead(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeError(rw, http.StatusMethodNotAllowed, "use POST")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, 1<<20))
	if err != nil {
		writeError(rw, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	var req nixlRead
	if rerr := decodeBody(body, &req); rerr != nil {
		writeError(rw, rerr.status, rerr.msg)
		return
	}
	if req.RemoteEngineID != w.engineID {
		writeError(rw, http.StatusNotFound, fmt.Sprintf("remote_engine_id %q is not this engine (%q)", req.RemoteEngineID, w.engineID))
		return
	}
	n, err := w.drv.release(r.Context(), req.RemoteRequestID, req.RemoteBlockIDs)
	switch {
	case err == nil:
		w.met.nixlReadsServed.Inc()
		writeJSON(rw, http.StatusOK, nixlReadReply{Blocks: n})
	case errors.Is(err, engine.ErrUnknownRequest):
		writeError(rw, http.StatusNotFound, err.Error())
	case errors.Is(err, engine.ErrInvalidRequest):
		writeError(rw, http.StatusConflict, err.Error())
	default:
		writeError(rw, http.StatusServiceUnavailable, err.Error())
	}
}

// pull reads the prefill's blocks named by kv; on any failure it records
// why, counts it, and returns nil so the request is prefilled locally
// (vLLM's recompute policy for a failed KV load).
func (w *Worker) pull(ctx context.Context, kv *kvParams, rec *KVReceipt) *engine.RemotePrefill {
	n, err := w.doPull(ctx, kv)
	if err != nil {
		w.met.pullFailures.Inc()
		rec.PullError = err.Error()
		w.log.Debug().Err(err).Str(logRemoteReq, rec.RemoteRequestID).Msg("kv pull failed; prefilling locally")
		return nil
	}
	rec.Pulled, rec.PulledBlocks = true, n
	w.met.pulls.Inc()
	return &engine.RemotePrefill{Blocks: n}
}

func (w *Worker) doPull(ctx context.Context, kv *kvParams) (int, error) {
	ids, err := kv.blockIDs()
	if err != nil {
		return 0, err
	}
	switch {
	case kv.RemoteHost == nil || *kv.RemoteHost == "":
		return 0, errors.New("kv_transfer_params without remote_host")
	case kv.RemotePort == nil || *kv.RemotePort <= 0 || *kv.RemotePort > 65535:
		return 0, errors.New("kv_transfer_params without a valid remote_port")
	case kv.RemoteEngineID == nil || kv.RemoteRequestID == nil:
		return 0, errors.New("kv_transfer_params without remote_engine_id or remote_request_id")
	}
	if len(ids) == 0 {
		return 0, nil // prompt shorter than a block: nothing to read
	}
	body, err := json.Marshal(nixlRead{RemoteEngineID: *kv.RemoteEngineID, RemoteRequestID: *kv.RemoteRequestID, RemoteBlockIDs: ids})
	if err != nil {
		return 0, fmt.Errorf("encode read: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.PullTimeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(*kv.RemoteHost, strconv.Itoa(*kv.RemotePort)) + nixlReadPath
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("build read: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.pullClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("read %s: status %d: %s", url, resp.StatusCode, bytes.TrimSpace(raw))
	}
	var reply nixlReadReply
	if err := json.Unmarshal(raw, &reply); err != nil {
		return 0, fmt.Errorf("read %s: bad reply: %w", url, err)
	}
	return reply.Blocks, nil
}

// newPullClient is the decode side's HTTP client for side-channel reads.
func newPullClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     30 * time.Second,
		},
	}
}

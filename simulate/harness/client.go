package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llbproject/llb/simulate/workload"
)

// Failure kinds of a request that did not complete as a full stream.
const (
	// FailTransport: the connection failed or broke before an answer.
	FailTransport = "transport"
	// FailStatus: llbd or the worker answered with a non-200 status.
	FailStatus = "status"
	// FailNotStream: a 200 that is not text/event-stream.
	FailNotStream = "not_stream"
	// FailBroken: the stream ended (or broke) before data: [DONE].
	FailBroken = "broken_stream"
	// FailShort: the stream finished with fewer tokens than max_tokens.
	FailShort = "short"
	// FailTimeout: the request outlived the run's request timeout.
	FailTimeout = "timeout"
)

// Record is one request's measurement. Times are wall-clock offsets from
// the run's start.
type Record struct {
	// Seq is the trace position.
	Seq int
	// Arrival is the scheduled (open-loop) send time; Sent when the
	// harness actually sent it. Latencies count from Arrival, so a late
	// harness shows up as latency and as dispatch lag, never as a shorter
	// queue.
	Arrival, Sent time.Duration
	// FirstToken is when the first SSE event carrying a token arrived (0
	// when none did); Done when the response ended.
	FirstToken, Done time.Duration
	// Status is the HTTP status (0 when none arrived).
	Status int
	// Failure is "" for a complete stream, else one of the Fail* kinds.
	Failure string
	// Route is the parsed X-Llb-Route.
	Route Route
	// Usage as the final SSE event reported it (-1 when absent):
	// prompt tokens, cached prompt tokens (vLLM's
	// prompt_tokens_details.cached_tokens) and completion tokens.
	PromptTokens, CachedTokens, CompletionTokens int
	// QueueWait is the engine queue wait the workers reported in the final
	// usage (worker.Config.ReportQueueWait: admission minus arrival at the
	// engine, both legs of a P/D request), on the workers' clock; -1 when
	// absent.
	QueueWait time.Duration
}

// OK reports whether the request completed with a full stream.
func (r *Record) OK() bool { return r.Failure == "" }

// newTransport is the client transport: one pool of keep-alive connections
// to the VIP, no compression, no overall timeout (a request's context
// bounds it).
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        8192,
		MaxIdleConnsPerHost: 8192,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ReadBufferSize:      32 << 10,
		WriteBufferSize:     32 << 10,
	}
}

// sseChunk is the part of a streamed completion or chat chunk the harness
// reads.
type sseChunk struct {
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content *string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		QueueWait *float64 `json:"llbsim_queue_wait_s"`
	} `json:"usage"`
}

// hasToken reports whether a chunk carries generated text (a chat stream's
// first event carries only the assistant role with empty content).
func (c *sseChunk) hasToken() bool {
	for _, ch := range c.Choices {
		if ch.Text != nil && *ch.Text != "" {
			return true
		}
		if ch.Delta != nil && ch.Delta.Content != nil && *ch.Delta.Content != "" {
			return true
		}
	}
	return false
}

// ObjectiveHeader carries a request's TTFT objective in milliseconds
// (gateway.HeaderTTFTObjective).
const ObjectiveHeader = "X-Llb-Ttft-Objective-Ms"

// exchange sends one trace request to url and fills rec. now returns the
// wall offset from the run's start. objectiveMs, when not "", is sent as
// the request's TTFT objective (ObjectiveHeader).
func exchange(ctx context.Context, client *http.Client, url string, tr *workload.TraceRequest, rec *Record, now func() time.Duration, objectiveMs string) {
	rec.PromptTokens, rec.CachedTokens, rec.CompletionTokens, rec.QueueWait = -1, -1, -1, -1
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+tr.Path, bytes.NewReader(tr.Body))
	if err != nil {
		rec.Failure, rec.Done = FailTransport, now()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(SeqHeader, strconv.Itoa(tr.Seq))
	for k, v := range tr.Header {
		req.Header.Set(k, v)
	}
	if objectiveMs != "" {
		req.Header.Set(ObjectiveHeader, objectiveMs)
	}
	rec.Sent = now()
	res, err := client.Do(req)
	if err != nil {
		rec.Failure, rec.Done = failureOf(ctx, err, FailTransport), now()
		return
	}
	defer res.Body.Close()
	rec.Status = res.StatusCode
	rec.Route = ParseRoute(res.Header.Get("X-Llb-Route"))
	switch {
	case res.StatusCode != http.StatusOK:
		rec.Failure = FailStatus
	case !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream"):
		rec.Failure = FailNotStream
	default:
		rec.Failure = readStream(ctx, res.Body, rec, now)
		if rec.Failure == "" && rec.CompletionTokens >= 0 && rec.CompletionTokens < tr.OutputTokens {
			rec.Failure = FailShort
		}
	}
	if rec.Failure != "" && rec.Failure != FailStatus {
		_, _ = io.Copy(io.Discard, res.Body)
	} else if rec.Failure == FailStatus {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	}
	rec.Done = now()
}

// readStream reads an SSE body to data: [DONE], stamping the first token
// and keeping the last event's usage. It returns a failure kind or "".
func readStream(ctx context.Context, body io.Reader, rec *Record, now func() time.Duration) string {
	br := bufio.NewReaderSize(body, 16<<10)
	var last []byte // the last data payload before [DONE]
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// An event longer than the buffer: keep reading its tail; it
			// is not a token event the harness needs to look into.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			continue
		}
		if err != nil {
			return failureOf(ctx, err, FailBroken)
		}
		payload, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		payload = bytes.TrimRight(payload, "\r\n")
		if bytes.Equal(payload, []byte("[DONE]")) {
			parseUsage(last, rec)
			return ""
		}
		if rec.FirstToken == 0 {
			var c sseChunk
			if json.Unmarshal(payload, &c) == nil && c.hasToken() {
				rec.FirstToken = now()
			}
		}
		last = append(last[:0], payload...)
	}
}

// parseUsage fills rec's usage fields from the final event, if it has one.
func parseUsage(payload []byte, rec *Record) {
	var c sseChunk
	if len(payload) == 0 || json.Unmarshal(payload, &c) != nil || c.Usage == nil {
		return
	}
	rec.PromptTokens, rec.CompletionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
	if c.Usage.PromptTokensDetails != nil {
		rec.CachedTokens = c.Usage.PromptTokensDetails.CachedTokens
	}
	if q := c.Usage.QueueWait; q != nil && *q >= 0 {
		rec.QueueWait = time.Duration(*q * float64(time.Second))
	}
}

// failureOf classifies a transport or read error.
func failureOf(ctx context.Context, err error, def string) string {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return FailTimeout
	}
	return def
}

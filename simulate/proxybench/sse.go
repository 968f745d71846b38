package proxybench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// SSEResult is the delay of each streamed event from the backend's write to
// the client's read, per path, and llbd's addition to it.
type SSEResult struct {
	// Streams per path, Tokens events each, Gap apart.
	Streams, Tokens int
	Gap             time.Duration
	// Direct and LLBD are per-event delay percentiles; Added is LLBD minus
	// Direct.
	Direct, LLBD, Added Percentiles
	// Incomplete counts streams that did not end with [DONE] after every
	// event.
	Incomplete int
}

// startSSEBackend serves POST /v1/completions as a streamed completion of
// tokens events, gap apart, each stamped with its send time ("t", Unix
// nanoseconds), then [DONE]. Non-streaming requests (the readiness probe)
// get a small JSON answer.
func startSSEBackend(addr string, tokens int, gap time.Duration) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sse backend: %w: %w", ErrTool, err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, completion)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		start := time.Now()
		var b []byte
		for i := range tokens {
			if wait := time.Until(start.Add(time.Duration(i) * gap)); wait > 0 {
				time.Sleep(wait)
			}
			b = append(b[:0], `data: {"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}],"t":`...)
			b = strconv.AppendInt(b, time.Now().UnixNano(), 10)
			b = append(b, "}\n\n"...)
			if _, err := w.Write(b); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// sse streams cfg.Streams responses through each path, alternating, and
// records every event's delay.
func (e *env) sse(ctx context.Context) (SSEResult, error) {
	res := SSEResult{Streams: e.cfg.Streams, Tokens: e.cfg.Tokens, Gap: e.cfg.TokenGap}
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: time.Minute}
	defer c.CloseIdleConnections()
	direct, llbd := newHist(), newHist()
	for i := range e.cfg.Streams {
		for _, p := range []struct {
			addr string
			h    *hdrhistogram.Histogram
		}{{e.a.sse, direct}, {e.a.llbdSSE, llbd}} {
			ok, err := streamOnce(ctx, c, "http://"+p.addr+"/v1/completions", e.cfg.Tokens, p.h)
			if err != nil {
				return res, err
			}
			if !ok {
				res.Incomplete++
			}
		}
		if i == 0 {
			e.cfg.progress("streams: %d × %d events %v apart per path", e.cfg.Streams, e.cfg.Tokens, e.cfg.TokenGap)
		}
	}
	res.Direct, res.LLBD = percentilesOf(direct), percentilesOf(llbd)
	res.Added = res.LLBD.minus(res.Direct)
	return res, nil
}

// streamOnce reads one streamed completion and records each event's delay
// (read time minus the backend's stamp). It reports whether every event
// and the final [DONE] arrived.
func streamOnce(ctx context.Context, c *http.Client, url string, tokens int, h *hdrhistogram.Histogram) (bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"model":"m","prompt":"Hello","max_tokens":256,"stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return false, fmt.Errorf("stream %s: %w: %w", url, ErrTool, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("stream %s: status %d: %w", url, resp.StatusCode, ErrTool)
	}
	br := bufio.NewReader(resp.Body)
	events, done := 0, false
	for {
		line, err := br.ReadSlice('\n')
		now := time.Now().UnixNano()
		if err != nil {
			break
		}
		payload, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if bytes.HasPrefix(payload, []byte("[DONE]")) {
			done = true
			continue
		}
		i := bytes.LastIndex(payload, []byte(`"t":`))
		if i < 0 {
			continue
		}
		num := payload[i+4:]
		if j := bytes.IndexByte(num, '}'); j >= 0 {
			num = num[:j]
		}
		sent, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			continue
		}
		events++
		_ = h.RecordValue(max((now-sent)/int64(time.Microsecond), 1))
	}
	return done && events == tokens, nil
}

package harness

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/workload"
)

// eventReader hands out one chunk per Read and counts how many it handed
// out, so a fake clock can tell which event a timestamp was taken on.
type eventReader struct {
	chunks []string
	n      int
	err    error // returned after the last chunk (default io.EOF)
}

func (r *eventReader) Read(p []byte) (int, error) {
	if r.n == len(r.chunks) {
		if r.err != nil {
			return 0, r.err
		}
		return 0, io.EOF
	}
	n := copy(p, r.chunks[r.n])
	r.n++
	return n, nil
}

// clockOf is a clock reading the number of chunks read so far (ns).
func clockOf(r *eventReader) func() time.Duration {
	return func() time.Duration { return time.Duration(r.n) }
}

const (
	roleEvent  = `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	chatToken  = `data: {"choices":[{"index":0,"delta":{"content":" word"}}]}` + "\n\n"
	textToken  = `data: {"choices":[{"index":0,"text":" word"}]}` + "\n\n"
	usageEvent = `data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":32}}}` + "\n\n"
	doneEvent  = "data: [DONE]\n\n"
)

func TestReadStream_StampsTheFirstTokenNotTheChatRoleEvent(t *testing.T) {
	tests := []struct {
		name      string
		chunks    []string
		wantFirst time.Duration
	}{
		{"completion: first event is a token", []string{textToken, textToken, usageEvent, doneEvent}, 1},
		{"chat: the role event carries no token", []string{roleEvent, chatToken, chatToken, usageEvent, doneEvent}, 2},
		{"events split across reads", []string{roleEvent[:10], roleEvent[10:], chatToken[:30], chatToken[30:], usageEvent, doneEvent}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &eventReader{chunks: tt.chunks}
			rec := Record{PromptTokens: -1, CachedTokens: -1, CompletionTokens: -1}
			if f := readStream(context.Background(), r, &rec, clockOf(r)); f != "" {
				t.Fatalf("failure %q; want none", f)
			}
			if rec.FirstToken != tt.wantFirst {
				t.Fatalf("first token stamped after chunk %d; want %d", rec.FirstToken, tt.wantFirst)
			}
			if rec.PromptTokens != 40 || rec.CachedTokens != 32 || rec.CompletionTokens != 2 {
				t.Fatalf("usage %d/%d/%d; want 40 prompt, 32 cached, 2 completion", rec.PromptTokens, rec.CachedTokens, rec.CompletionTokens)
			}
		})
	}
}

func TestParseUsage_ReadsTheWorkersQueueWait(t *testing.T) {
	tests := []struct {
		name string
		give string
		want time.Duration
	}{
		{"vLLM's usage: none", `{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}`, -1},
		{"the simulator's field", `{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"llbsim_queue_wait_s":0.25}}`, 250 * time.Millisecond},
		{"a negative wait is not one", `{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"llbsim_queue_wait_s":-1}}`, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := Record{QueueWait: -1}
			parseUsage([]byte(tt.give), &rec)
			if rec.QueueWait != tt.want {
				t.Fatalf("got queue wait %v; want %v", rec.QueueWait, tt.want)
			}
		})
	}
}

func TestReadStream_ReportsAStreamThatEndsBeforeDone(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
	}{{"clean EOF", nil}, {"connection reset", errors.New("connection reset by peer")}} {
		t.Run(tt.name, func(t *testing.T) {
			r := &eventReader{chunks: []string{textToken, textToken}, err: tt.err}
			rec := Record{}
			if f := readStream(context.Background(), r, &rec, clockOf(r)); f != FailBroken {
				t.Fatalf("failure %q; want %q", f, FailBroken)
			}
			if rec.FirstToken != 1 {
				t.Fatalf("first token %d; want 1", rec.FirstToken)
			}
		})
	}
}

func TestExchange_ClassifiesAnswers(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		outTokens   int
		wantFailure string
		wantTier    string
	}{
		{"full stream", 200, "text/event-stream", textToken + textToken + usageEvent + doneEvent, 2, "", "1.5"},
		{"fewer tokens than max_tokens", 200, "text/event-stream", textToken + textToken + usageEvent + doneEvent, 3, FailShort, "1.5"},
		{"llb's 503", 503, "application/json", `{"error":{"code":"no_healthy_backend"}}`, 2, FailStatus, "none"},
		{"a 200 that is not a stream", 200, "application/json", `{"choices":[]}`, 2, FailNotStream, "1.5"},
		{"broken stream", 200, "text/event-stream", textToken, 2, FailBroken, "1.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/completions" || r.Header.Get("X-Conversation-Id") != "c-1" {
					t.Errorf("request %s with X-Conversation-Id %q", r.URL.Path, r.Header.Get("X-Conversation-Id"))
				}
				route := "tier=1.5 prefill=1 decode=-1 spill prefill_addr=x retries=0"
				if tt.status != 200 {
					route = "tier=none error=no_healthy_backend"
				}
				w.Header().Set("X-Llb-Route", route)
				w.Header().Set("Content-Type", tt.contentType)
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			tr := &workload.TraceRequest{Path: "/v1/completions", Body: []byte(`{}`), Header: map[string]string{"X-Conversation-Id": "c-1"}, OutputTokens: tt.outTokens}
			var rec Record
			start := time.Now()
			client := &http.Client{Transport: newTransport()}
			defer client.CloseIdleConnections()
			exchange(context.Background(), client, srv.URL, tr, &rec, func() time.Duration { return max(time.Since(start), 1) }, "")
			if rec.Failure != tt.wantFailure || rec.Status != tt.status || rec.Route.Tier != tt.wantTier {
				t.Fatalf("failure %q status %d tier %q; want %q %d %q", rec.Failure, rec.Status, rec.Route.Tier, tt.wantFailure, tt.status, tt.wantTier)
			}
			if rec.Done < rec.Sent || rec.Sent <= 0 {
				t.Fatalf("sent %v done %v; want 0 < sent <= done", rec.Sent, rec.Done)
			}
			if tt.wantFailure == "" && (rec.FirstToken < rec.Sent || rec.FirstToken > rec.Done) {
				t.Fatalf("first token %v outside [%v, %v]", rec.FirstToken, rec.Sent, rec.Done)
			}
		})
	}
}

func TestExchange_AnUnreachableVIPIsATransportFailure(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	var rec Record
	client := &http.Client{Transport: newTransport()}
	exchange(context.Background(), client, url, &workload.TraceRequest{Path: "/v1/completions", Body: []byte(`{}`)}, &rec, func() time.Duration { return 1 }, "")
	if rec.Failure != FailTransport || rec.Status != 0 {
		t.Fatalf("failure %q status %d; want %q 0", rec.Failure, rec.Status, FailTransport)
	}
	if !strings.Contains(errorKey(&rec), FailTransport) {
		t.Fatalf("error key %q", errorKey(&rec))
	}
}

package tokenizer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"
)

// UpstreamError is an error answer from the engine, in either of vLLM's
// shapes ({"error":{...}} or the older flat {"object":"error",...}).
type UpstreamError struct {
	// Status is the HTTP status.
	Status int
	// Message, Type and Code come from the body when it had them.
	Message, Type, Code string
}

// Error implements error.
func (e *UpstreamError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Type != "" {
		return fmt.Sprintf("engine answered %d (%s): %s", e.Status, e.Type, msg)
	}
	return fmt.Sprintf("engine answered %d: %s", e.Status, msg)
}

// Unwrap classifies the error as ErrUpstream.
func (e *UpstreamError) Unwrap() error { return ErrUpstream }

// parseUpstreamError reads either error shape; codes may be ints or strings.
func parseUpstreamError(status int, raw []byte) *UpstreamError {
	e := &UpstreamError{Status: status}
	var nested struct {
		Error *struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(raw, &nested) != nil {
		e.Message = strings.TrimSpace(string(raw[:min(len(raw), 200)]))
		return e
	}
	if nested.Error != nil {
		e.Message, e.Type, e.Code = nested.Error.Message, nested.Error.Type, strings.Trim(string(nested.Error.Code), `"`)
	} else {
		e.Message, e.Type, e.Code = nested.Message, nested.Type, strings.Trim(string(nested.Code), `"`)
	}
	if e.Code == "null" {
		e.Code = ""
	}
	return e
}

// Remote tokenizer defaults.
const (
	// DefaultRemoteTimeout is the per-call deadline.
	DefaultRemoteTimeout = 500 * time.Millisecond
	// DefaultRemoteConcurrency bounds calls in flight per tokenizer.
	DefaultRemoteConcurrency = 16
	// DefaultRemoteCacheBytes bounds the token cache.
	DefaultRemoteCacheBytes = 64 << 20
	// DefaultRemoteMaxResponse bounds a /tokenize response body.
	DefaultRemoteMaxResponse = 16 << 20
)

// RemoteConfig configures a Remote.
type RemoteConfig struct {
	// BaseURL is the engine's HTTP root, e.g. http://10.0.0.1:8000 (the
	// tokenizer posts to BaseURL + "/tokenize"). Required.
	BaseURL string
	// Client sends the requests; nil uses a dedicated client with pooled
	// keep-alive connections.
	Client *http.Client
	// APIKey, when set, is sent as a Bearer token.
	APIKey string
	// Timeout is the per-call deadline including the wait for a
	// concurrency slot (default 500ms). A miss is a tokenize guard.
	Timeout time.Duration
	// MaxConcurrent bounds calls in flight (default 16).
	MaxConcurrent int
	// CacheBytes bounds the LRU token cache (default 64 MiB; negative
	// disables caching).
	CacheBytes int64
	// MaxResponseBytes bounds a response body (default 16 MiB).
	MaxResponseBytes int64
}

// Validate reports every configuration problem at once.
func (c RemoteConfig) Validate() error {
	var errs []error
	if !strings.HasPrefix(c.BaseURL, "http://") && !strings.HasPrefix(c.BaseURL, "https://") {
		errs = append(errs, fmt.Errorf("BaseURL %q (want http:// or https://)", c.BaseURL))
	}
	if c.Timeout < 0 || c.MaxConcurrent < 0 || c.MaxResponseBytes < 0 {
		errs = append(errs, fmt.Errorf("negative Timeout/MaxConcurrent/MaxResponseBytes (%v, %d, %d)", c.Timeout, c.MaxConcurrent, c.MaxResponseBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("remote tokenizer: %w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// RemoteStats counts a tokenizer's calls.
type RemoteStats struct {
	// Hits and Misses count cache lookups.
	Hits, Misses uint64
	// Errors counts calls that failed (each is a guard miss); Timeouts is
	// the subset that ran out of time.
	Errors, Timeouts uint64
	// CacheEntries and CacheBytes describe the cache.
	CacheEntries int
	CacheBytes   int64
}

// Remote calls an engine's POST /tokenize (no /v1), with a
// per-call deadline, bounded concurrency and an LRU cache keyed by the exact
// request (model, form, text and options).
type Remote struct {
	cfg    RemoteConfig
	url    string
	client *http.Client
	sem    chan struct{}
	cache  *requestCache // nil when disabled

	hits, misses, errs, timeouts atomic.Uint64
}

// NewRemote validates cfg and builds the tokenizer.
func NewRemote(cfg RemoteConfig) (*Remote, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultRemoteTimeout
	}
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = DefaultRemoteConcurrency
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = DefaultRemoteCacheBytes
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = DefaultRemoteMaxResponse
	}
	t := &Remote{
		cfg:    cfg,
		url:    strings.TrimRight(cfg.BaseURL, "/") + "/tokenize",
		client: cfg.Client,
		sem:    make(chan struct{}, cfg.MaxConcurrent),
	}
	if t.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = cfg.MaxConcurrent
		t.client = &http.Client{Transport: tr}
	}
	if cfg.CacheBytes > 0 {
		t.cache = newRequestCache(cfg.CacheBytes)
	}
	return t, nil
}

// Stats returns the call counters.
func (t *Remote) Stats() RemoteStats {
	s := RemoteStats{Hits: t.hits.Load(), Misses: t.misses.Load(), Errors: t.errs.Load(), Timeouts: t.timeouts.Load()}
	if t.cache != nil {
		s.CacheEntries, s.CacheBytes = t.cache.stats()
	}
	return s
}

// Tokenize implements Tokenizer.
func (t *Remote) Tokenize(ctx context.Context, req Request, dst []uint32) ([]uint32, error) {
	out, err := t.tokenize(ctx, req, dst)
	if err != nil {
		t.errs.Add(1)
		if errors.Is(err, ErrTimeout) {
			t.timeouts.Add(1)
		}
		return dst, &GuardError{Reason: GuardTokenize, Err: err}
	}
	return out, nil
}

func (t *Remote) tokenize(ctx context.Context, req Request, dst []uint32) ([]uint32, error) {
	if err := req.Validate(); err != nil {
		return dst, err
	}
	body, err := req.body()
	if err != nil {
		return dst, err
	}
	key := xxh3.Hash128(body).Bytes()
	if t.cache != nil {
		if out, ok := t.cache.appendGet(key, dst); ok {
			t.hits.Add(1)
			return out, nil
		}
	}
	t.misses.Add(1)
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	select {
	case t.sem <- struct{}{}:
		defer func() { <-t.sem }()
	case <-ctx.Done():
		return dst, ctxErr(ctx, "waiting for a tokenize slot")
	}
	tokens, err := t.post(ctx, body)
	if err != nil {
		return dst, err
	}
	if t.cache != nil {
		t.cache.put(key, tokens)
	}
	return append(dst, tokens...), nil
}

// ctxErr classifies a context failure.
func ctxErr(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("tokenize: %s: %w", what, ErrTimeout)
	}
	return fmt.Errorf("tokenize: %s: %w", what, ctx.Err())
}

// post sends one request and parses the answer.
func (t *Remote) post(ctx context.Context, body []byte) ([]uint32, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("tokenize request: %w: %w", ErrConfig, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if t.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+t.cfg.APIKey)
	}
	resp, err := t.client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxErr(ctx, "POST "+t.url)
		}
		return nil, fmt.Errorf("tokenize: POST %s: %w: %w", t.url, ErrUpstream, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, t.cfg.MaxResponseBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxErr(ctx, "reading the response")
		}
		return nil, fmt.Errorf("tokenize: reading the response: %w: %w", ErrUpstream, err)
	}
	if int64(len(raw)) > t.cfg.MaxResponseBytes {
		return nil, fmt.Errorf("tokenize: response over %d bytes: %w", t.cfg.MaxResponseBytes, ErrMalformed)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("tokenize: %w", parseUpstreamError(resp.StatusCode, raw))
	}
	var ans struct {
		Tokens *[]int64 `json:"tokens"`
		Count  *int     `json:"count"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("tokenize: response: %w: %w", ErrMalformed, err)
	}
	if ans.Tokens == nil {
		return nil, fmt.Errorf("tokenize: response without tokens: %w", ErrMalformed)
	}
	if ans.Count != nil && *ans.Count != len(*ans.Tokens) {
		return nil, fmt.Errorf("tokenize: count %d but %d tokens: %w", *ans.Count, len(*ans.Tokens), ErrMalformed)
	}
	out := make([]uint32, len(*ans.Tokens))
	for i, v := range *ans.Tokens {
		if v < 0 || v > math.MaxUint32 {
			return nil, fmt.Errorf("tokenize: token %d = %d out of range: %w", i, v, ErrMalformed)
		}
		out[i] = uint32(v)
	}
	return out, nil
}

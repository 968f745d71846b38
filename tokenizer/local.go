package tokenizer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
)

// LocalConfig configures a Local tokenizer.
type LocalConfig struct {
	// Dir is either one tokenizer directory (it holds tokenizer.json; used
	// for every model of the rule) or a root of directories named by
	// served model name (Dir/<model>/tokenizer.json; a name with slashes,
	// "Qwen/Qwen3-8B", is a nested path). Required.
	Dir string
	// Remote is the engine's /tokenize: used for everything the local
	// tokenizer does not cover (a model without files, a chat template not
	// proven identical, a model that disagreed) and for the truth checks.
	// Required.
	Remote Tokenizer
	// Registry loads and shares tokenizers; nil gives the Local its own.
	Registry *Registry
	// CheckInterval is the least time between two truth checks of one
	// model against Remote (default 1 s; the first request of a model is
	// always checked). Negative disables checking (tests only: a local
	// tokenizer must not silently disagree with the engine).
	CheckInterval time.Duration
	// CheckTimeout bounds one truth check (default 2 s).
	CheckTimeout time.Duration
	// Counters are incremented when set (the gateway's metric set).
	Counters Counters
	// Log receives the load outcome and the mismatch warning.
	Log zerolog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Counters are the metrics a Local feeds; nil members are skipped.
type Counters struct {
	// Local and Remote count requests by the path that tokenized them.
	Local, Remote *metrics.Counter
	// Checks counts truth checks that got an answer from the engine;
	// Mismatches those whose ids differed; CheckErrors those that failed.
	Checks, Mismatches, CheckErrors *metrics.Counter
}

func inc(c *metrics.Counter) {
	if c != nil {
		c.Inc()
	}
}

// Defaults of LocalConfig.
const (
	DefaultCheckInterval = time.Second
	DefaultCheckTimeout  = 2 * time.Second
	// mismatchWarnEvery rate-limits the mismatch warning per Local.
	mismatchWarnEvery = time.Minute
)

// Local is an Tokenizer that tokenizes in process and keeps the
// engine honest: completion prompts are encoded locally; chat requests
// are rendered and encoded locally only when the model's chat template is
// one proven identical to Python jinja2 (see VerifiedTemplate), otherwise
// they go to Remote. A sample of locally served requests (the first of a
// model, then at most one per CheckInterval) is re-tokenized by Remote in
// the background; one mismatch sends that model to Remote for good and
// logs one warning.
type Local struct {
	cfg    LocalConfig
	single bool // Dir holds tokenizer.json itself

	models  sync.Map // model name → *modelState
	nModels atomic.Int64

	checking  atomic.Bool  // one truth check in flight at a time
	lastWarn  atomic.Int64 // unix nanos of the last mismatch warning
	checksRun sync.WaitGroup
}

// modelState is what a Local knows about one served model.
type modelState struct {
	// tok is the loaded tokenizer, once it is: later requests take no
	// lock (the registry is asked only until the load is done).
	tok       atomic.Pointer[Encoder]
	disagreed atomic.Bool
	lastCheck atomic.Int64 // unix nanos; 0: never checked
	loggedErr atomic.Bool
	loggedOK  atomic.Bool
	// missingUntil (unix nanos): the model's directory was missing; it is
	// not looked for again before then.
	missingUntil atomic.Int64
}

// NewLocal validates cfg and builds the tokenizer. Loading starts with
// the first request of each model.
func NewLocal(cfg LocalConfig) (*Local, error) {
	var errs []error
	if cfg.Dir == "" {
		errs = append(errs, errors.New("Dir is empty"))
	}
	if cfg.Remote == nil {
		errs = append(errs, errors.New("Remote is nil"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("tokenizer: local: %w", errors.Join(errs...))
	}
	if cfg.Registry == nil {
		cfg.Registry = NewRegistry()
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	_, err := os.Stat(filepath.Join(cfg.Dir, FileTokenizer))
	return &Local{cfg: cfg, single: err == nil}, nil
}

// Tokenize implements Tokenizer.
func (l *Local) Tokenize(ctx context.Context, req Request, dst []uint32) ([]uint32, error) {
	tok, st := l.local(req.Model)
	if tok == nil {
		inc(l.cfg.Counters.Remote)
		return l.cfg.Remote.Tokenize(ctx, req, dst)
	}
	start := len(dst)
	out, ok, err := encodeRequest(tok, req, dst)
	if err != nil {
		return dst, &GuardError{Reason: GuardTokenize, Err: err}
	}
	if !ok {
		inc(l.cfg.Counters.Remote)
		return l.cfg.Remote.Tokenize(ctx, req, dst)
	}
	inc(l.cfg.Counters.Local)
	l.maybeCheck(req, st, out[start:])
	return out, nil
}

// encodeRequest encodes req with tok. ok is false when req needs the
// engine (a chat request whose template is not verified); err is set for
// a request the engine would reject too.
func encodeRequest(tok *Encoder, req Request, dst []uint32) ([]uint32, bool, error) {
	if len(req.Messages) > 0 && req.Prompt == "" {
		// The chat path checks the JSON by parsing it (a full
		// TokenizeRequest.Validate would scan 30 KB of messages twice).
		return encodeChat(tok, req, dst)
	}
	if err := req.Validate(); err != nil {
		return dst, false, err
	}
	add := true
	if req.AddSpecialTokens != nil {
		add = *req.AddSpecialTokens
	}
	return tok.Encode(req.Prompt, add, dst), true, nil
}

// local returns the loaded tokenizer for model, or nil (use Remote).
func (l *Local) local(model string) (*Encoder, *modelState) {
	st := l.state(model)
	if st.disagreed.Load() {
		return nil, st
	}
	if tok := st.tok.Load(); tok != nil {
		return tok, st
	}
	dir, ok := l.dirFor(model)
	if !ok {
		return nil, st
	}
	if !l.single {
		// Model names come from clients: only a directory that exists
		// is handed to the registry (which keeps one entry per
		// directory), and a missing one is looked for again after
		// RetryAfter, not on every request.
		now := l.cfg.Now().UnixNano()
		if now < st.missingUntil.Load() {
			return nil, st
		}
		if _, err := os.Stat(filepath.Join(dir, FileTokenizer)); err != nil {
			st.missingUntil.Store(now + int64(cmp.Or(l.cfg.Registry.RetryAfter, DefaultRetryAfter)))
			return nil, st
		}
	}
	tok, ready, err := l.cfg.Registry.Get(dir)
	switch {
	case !ready:
		return nil, st
	case err != nil:
		if !st.loggedErr.Swap(true) {
			l.cfg.Log.Warn().Err(err).Str("model", model).Str("dir", dir).Msg("local tokenizer not loaded; using the engine's /tokenize")
		}
		return nil, st
	}
	if !st.loggedOK.Swap(true) {
		l.cfg.Log.Info().Str("model", model).Str("dir", dir).Str("chat", ChatPath(tok)).Msg("local tokenizer loaded")
	}
	st.tok.Store(tok)
	return tok, st
}

// maxModels bounds the models a Local keeps state for: names come from
// clients, and the ones past the bound just use the engine.
const maxModels = 1024

// state returns model's state, creating it while there is room.
func (l *Local) state(model string) *modelState {
	if v, ok := l.models.Load(model); ok {
		return v.(*modelState)
	}
	if l.nModels.Load() >= maxModels {
		st := &modelState{} // not kept: the engine serves it, unchecked
		st.disagreed.Store(true)
		return st
	}
	v, loaded := l.models.LoadOrStore(model, &modelState{})
	if !loaded {
		l.nModels.Add(1)
	}
	return v.(*modelState)
}

// dirFor is model's tokenizer directory; false when the name cannot be a
// path below Dir.
func (l *Local) dirFor(model string) (string, bool) {
	if l.single {
		return l.cfg.Dir, true
	}
	if model == "" || filepath.IsAbs(model) || strings.Contains(model, "\\") {
		return "", false
	}
	for _, part := range strings.Split(model, "/") {
		if part == "" || part == "." || part == ".." {
			return "", false
		}
	}
	return filepath.Join(l.cfg.Dir, filepath.FromSlash(model)), true
}

// maybeCheck starts a background truth check of ids when st is due one.
func (l *Local) maybeCheck(req Request, st *modelState, ids []uint32) {
	if l.cfg.CheckInterval < 0 {
		return
	}
	now := l.cfg.Now().UnixNano()
	last := st.lastCheck.Load()
	if last != 0 && now-last < int64(l.cfg.CheckInterval) {
		return
	}
	if !st.lastCheck.CompareAndSwap(last, now) {
		return
	}
	if !l.checking.CompareAndSwap(false, true) {
		st.lastCheck.Store(last) // busy: let the next request try
		return
	}
	req = cloneRequest(req) // the caller's buffers are reused after we return
	want := append([]uint32(nil), ids...)
	l.checksRun.Add(1)
	go func() {
		defer l.checksRun.Done()
		defer l.checking.Store(false)
		l.check(req, st, want)
	}()
}

// check asks Remote for req's ids and compares them with local's.
func (l *Local) check(req Request, st *modelState, local []uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.CheckTimeout)
	defer cancel()
	engine, err := l.cfg.Remote.Tokenize(ctx, req, nil)
	if err != nil {
		inc(l.cfg.Counters.CheckErrors)
		return
	}
	inc(l.cfg.Counters.Checks)
	at := firstDiff(local, engine)
	if at < 0 {
		return
	}
	inc(l.cfg.Counters.Mismatches)
	st.disagreed.Store(true)
	now := l.cfg.Now().UnixNano()
	if last := l.lastWarn.Load(); (last == 0 || now-last >= int64(mismatchWarnEvery)) && l.lastWarn.CompareAndSwap(last, now) {
		l.cfg.Log.Warn().Str("model", req.Model).Bool("chat", len(req.Messages) > 0).
			Int("first_diff", at).Int("local_tokens", len(local)).Int("engine_tokens", len(engine)).
			Msg("local tokenizer disagrees with the engine's /tokenize; this model now uses the engine")
	}
}

// Wait blocks until the truth checks started so far have finished (tests,
// shutdown).
func (l *Local) Wait() { l.checksRun.Wait() }

// Disagreed reports whether model fell back to Remote after a mismatch.
func (l *Local) Disagreed(model string) bool {
	v, ok := l.models.Load(model)
	return ok && v.(*modelState).disagreed.Load()
}

// firstDiff is the first index where a and b differ, -1 when equal.
func firstDiff(a, b []uint32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// cloneRequest copies every byte slice of req.
func cloneRequest(req Request) Request {
	cp := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		return append([]byte(nil), b...)
	}
	req.Prompt = strings.Clone(req.Prompt)
	req.Messages, req.Tools, req.ChatTemplateKwargs = cp(req.Messages), cp(req.Tools), cp(req.ChatTemplateKwargs)
	req.ChatTemplate = strings.Clone(req.ChatTemplate)
	if req.AddSpecialTokens != nil {
		v := *req.AddSpecialTokens
		req.AddSpecialTokens = &v
	}
	if req.AddGenerationPrompt != nil {
		v := *req.AddGenerationPrompt
		req.AddGenerationPrompt = &v
	}
	return req
}

package tokenizer

import (
	"path/filepath"
	"sync"
	"time"
)

// Registry loads tokenizer directories once and shares them: every rule
// that names the same directory uses the same *Encoder (a loaded Qwen3
// tokenizer is tens of MB). Loading runs in the background (a large
// tokenizer.json takes a fraction of a second): until it is done, callers
// keep the engine's /tokenize. A failed load is retried after RetryAfter,
// so files copied in later are picked up. Safe for concurrent use.
type Registry struct {
	// RetryAfter is how long a failed load is remembered (default 1 min).
	RetryAfter time.Duration
	// now is the clock (tests inject one).
	now func() time.Time
	// load reads a directory (LoadDir; tests inject one).
	load func(dir string) (*Encoder, error)

	mu      sync.Mutex
	entries map[string]*regEntry
}

// regEntry is one directory's load. done is closed when tok/err are set.
type regEntry struct {
	done     chan struct{}
	tok      *Encoder
	err      error
	finished time.Time
}

// NewRegistry returns an empty registry that loads with LoadDir.
func NewRegistry() *Registry {
	return &Registry{now: time.Now, load: LoadDir, entries: make(map[string]*regEntry)}
}

// DefaultRetryAfter is Registry.RetryAfter's default.
const DefaultRetryAfter = time.Minute

// Get returns dir's tokenizer when it is loaded. ready is false while the
// load runs (it is started by the first Get); err is the load's error.
func (r *Registry) Get(dir string) (tok *Encoder, ready bool, err error) {
	e := r.entry(dir)
	select {
	case <-e.done:
		return e.tok, true, e.err
	default:
		return nil, false, nil
	}
}

// Wait blocks until dir is loaded (or failed), starting the load if needed.
func (r *Registry) Wait(dir string) (*Encoder, error) {
	e := r.entry(dir)
	<-e.done
	return e.tok, e.err
}

func (r *Registry) entry(dir string) *regEntry {
	dir = filepath.Clean(dir)
	retry := r.RetryAfter
	if retry <= 0 {
		retry = DefaultRetryAfter
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[dir]; ok {
		select {
		case <-e.done:
			if e.err == nil || r.now().Sub(e.finished) < retry {
				return e
			}
		default:
			return e
		}
	}
	e := &regEntry{done: make(chan struct{})}
	r.entries[dir] = e
	go func() {
		tok, err := r.load(dir)
		r.mu.Lock()
		e.tok, e.err, e.finished = tok, err, r.now()
		r.mu.Unlock()
		close(e.done)
	}()
	return e
}

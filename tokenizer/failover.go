package tokenizer

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// failover calls /tokenize on a rule's engines in order, starting with the
// last one that answered, until one answers or ctx ends. Every engine of a
// rule serves the same model, so any may tokenize.
type failover struct {
	toks []*Remote
	mu   sync.Mutex
	good int
}

// newFailover builds one Remote per engine base URL, tried in that order.
func newFailover(engines []string, timeout time.Duration) (*failover, error) {
	if len(engines) == 0 {
		return nil, fmt.Errorf("no engine to tokenize with: %w", ErrConfig)
	}
	f := &failover{}
	for _, url := range engines {
		t, err := NewRemote(RemoteConfig{BaseURL: url, Timeout: timeout})
		if err != nil {
			return nil, err
		}
		f.toks = append(f.toks, t)
	}
	return f, nil
}

// Tokenize implements Tokenizer.
func (f *failover) Tokenize(ctx context.Context, req Request, dst []uint32) ([]uint32, error) {
	f.mu.Lock()
	start := f.good
	f.mu.Unlock()
	var err error
	for k := 0; k < len(f.toks); k++ {
		i := (start + k) % len(f.toks)
		var out []uint32
		if out, err = f.toks[i].Tokenize(ctx, req, dst); err == nil {
			if i != start {
				f.mu.Lock()
				f.good = i
				f.mu.Unlock()
			}
			return out, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return dst, err
}

package restapi

import (
	"context"
	"sync"
)

// recordingRuntime is a NoDataPlane that records the keys it was handed.
type recordingRuntime struct {
	*NoDataPlane
	mu      sync.Mutex
	applied []string
	removed []string
}

func (r *recordingRuntime) Apply(ctx context.Context, rule Rule) error {
	r.mu.Lock()
	r.applied = append(r.applied, rule.Key.String())
	r.mu.Unlock()
	return r.NoDataPlane.Apply(ctx, rule)
}

func (r *recordingRuntime) Remove(ctx context.Context, k RuleKey) error {
	r.mu.Lock()
	r.removed = append(r.removed, k.String())
	r.mu.Unlock()
	return r.NoDataPlane.Remove(ctx, k)
}

func (r *recordingRuntime) appliedKeys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.applied...)
}

func (r *recordingRuntime) removedKeys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.removed...)
}

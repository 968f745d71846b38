package restapi

import (
	"context"
	"sync"

	"github.com/llbproject/llb/rule"
)

// recordingRuntime is a NoDataPlane that records the keys it was handed.
type recordingRuntime struct {
	*NoDataPlane
	mu      sync.Mutex
	applied []string
	removed []string
}

func (r *recordingRuntime) Apply(ctx context.Context, rule rule.Rule) error {
	r.mu.Lock()
	r.applied = append(r.applied, rule.Key.String())
	r.mu.Unlock()
	return r.NoDataPlane.Apply(ctx, rule)
}

func (r *recordingRuntime) Remove(ctx context.Context, k rule.RuleKey) error {
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

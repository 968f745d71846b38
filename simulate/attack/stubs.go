package attack

import (
	"context"
	"time"
)

func runKV(ctx context.Context, cfg *Config, n loopNet, budget time.Duration) (*Tally, error) {
	return newTally(FamilyKV), nil
}
func runFaults(ctx context.Context, cfg *Config, n loopNet, budget time.Duration) (*Tally, error) {
	return newTally(FamilyFaults), nil
}

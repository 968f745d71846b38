package attack

import (
	"context"
	"time"
)

func runFaults(ctx context.Context, cfg *Config, n loopNet, budget time.Duration) (*Tally, error) {
	return newTally(FamilyFaults), nil
}

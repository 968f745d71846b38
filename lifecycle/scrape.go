package lifecycle

import (
	"context"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
)

// scraper reads an engine's KV capacity and waiting-queue depth from its
// /metrics at addr (Tier 2 scores active_conns + queued_requests).
func (rs *ruleSet) scraper(addr string) actors.ScrapeFunc {
	url := "http://" + addr + "/metrics"
	return func(ctx context.Context) (actors.EngineStats, error) {
		cc, err := inventory.ScrapeCacheConfig(ctx, rs.scrape, url, inventory.DefaultCapacityMaxBytes)
		if err != nil {
			return actors.EngineStats{}, err
		}
		return actors.EngineStats{
			KVCapacityBlocks: uint32(min(cc.NumGPUBlocks, ladder.CapacityClampMax)),
			Waiting:          uint32(min(cc.Waiting, 1<<20)),
		}, nil
	}
}

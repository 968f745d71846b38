package lifecycle

import (
	"context"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
)

// scraper reads an engine's KV capacity, waiting-queue depth and KV usage
// from its /metrics at addr (Tier 2 scores active_conns + queued_requests;
// the headroom law reads the queue and the usage): vLLM's series, or
// SGLang's with its KV pool in tokens of blockSize per page.
func (rs *ruleSet) scraper(addr string, blockSize int) actors.ScrapeFunc {
	url := "http://" + addr + "/metrics"
	return func(ctx context.Context) (actors.EngineStats, error) {
		cc, err := inventory.ScrapeCacheConfig(ctx, rs.scrape, url, inventory.DefaultCapacityMaxBytes)
		if err != nil {
			return actors.EngineStats{}, err
		}
		cc = cc.ForBlockSize(blockSize)
		return actors.EngineStats{
			KVCapacityBlocks: uint32(min(cc.NumGPUBlocks, ladder.CapacityClampMax)),
			Waiting:          uint32(min(cc.Waiting, 1<<20)),
			KVUsedBlocks:     uint32(min(cc.KVUsedBlocks(), ladder.CapacityClampMax)),
			KVUsageKnown:     cc.HasKVUsage && cc.Known(),
			LoRA:             cc.LoRA,
		}, nil
	}
}

package inventory

// HashAlgoTokenKeyed is the hash_algo the inventory view reports for
// token-keyed mode (llb's own keys, not an engine algorithm).
const HashAlgoTokenKeyed = "token_keyed"

// HashAlgoName is the hash_algo of a rule's ChainHasher for the views.
func HashAlgoName(ch ChainHasher) string {
	if h, ok := ch.(*Hasher); ok {
		return string(h.Algo())
	}
	return HashAlgoTokenKeyed
}

// InventoryBlock is one entry of the inventory view.
type InventoryBlock struct {
	// BlockIdx is the entry's position in the full listing (offset + i).
	BlockIdx int `json:"block_idx"`
	// HashUint64 is the engine's block key.
	HashUint64 uint64 `json:"hash_uint64"`
}

// InventoryView is LoxiLB's GET /netlox/v1/config/ai/kv/inventory body:
// {service_id, ep_idx, hash_algo, blocks:[{block_idx, hash_uint64}], total}.
// LoxiLB's service_id is its numeric rule id; llb's is the rule key.
type InventoryView struct {
	// ServiceID names the rule.
	ServiceID string `json:"service_id"`
	// EpIdx is the endpoint index in the rule.
	EpIdx int `json:"ep_idx"`
	// HashAlgo is the rule's algorithm, or "token_keyed".
	HashAlgo string `json:"hash_algo"`
	// Blocks is one page of keys.
	Blocks []InventoryBlock `json:"blocks"`
	// Total is the number of keys the endpoint holds.
	Total int `json:"total"`
}

// NewInventoryView builds the view of one page: keys as returned by
// Mirror.AppendKeys(nil, offset, limit), total from MirrorStats.EngineBlocks.
func NewInventoryView(serviceID string, epIdx int, hashAlgo string, offset int, keys []uint64, total int) InventoryView {
	v := InventoryView{ServiceID: serviceID, EpIdx: epIdx, HashAlgo: hashAlgo, Total: total, Blocks: make([]InventoryBlock, len(keys))}
	for i, k := range keys {
		v.Blocks[i] = InventoryBlock{BlockIdx: offset + i, HashUint64: k}
	}
	return v
}

// EndpointSnapshot is one endpoint rank's inventory state for operators
// (the REST status view): the feed's connection and stream health, the
// mirror's size and contract, and the capacity llb believes.
type EndpointSnapshot struct {
	// Service, EpIdx and Rank identify the feed.
	Service string `json:"service"`
	EpIdx   int    `json:"ep_idx"`
	Rank    int    `json:"rank"`
	// Connected is true while the SUB socket is connected.
	Connected bool `json:"connected"`
	// Reconnects and RecvErrors are the feed's counters.
	Reconnects uint64 `json:"reconnects"`
	RecvErrors uint64 `json:"recv_errors"`
	// Blocks is the number of scorable mirrored blocks in GPU memory;
	// OffloadBlocks the number held in the CPU offload tier.
	Blocks        int `json:"blocks"`
	OffloadBlocks int `json:"offload_blocks"`
	// LastSeq is the last accepted sequence number (null before any).
	LastSeq *uint64 `json:"last_seq"`
	// EventsPerSec is the recent event rate.
	EventsPerSec float64 `json:"events_per_sec"`
	// Gaps, LostBatches, Resyncs, Restarts, Replays and ReplayFailures
	// describe the stream's continuity.
	Gaps           uint64 `json:"gaps"`
	LostBatches    uint64 `json:"lost_batches"`
	Resyncs        uint64 `json:"resyncs"`
	Restarts       uint64 `json:"restarts"`
	Replays        uint64 `json:"replays"`
	ReplayFailures uint64 `json:"replay_failures"`
	// Evictions counts blocks dropped at the cap.
	Evictions uint64 `json:"evictions"`
	// Ignored lists, by reason, the events and blocks the feed and the
	// mirror did not apply (empty when everything was applied).
	Ignored []IgnoredView `json:"ignored,omitempty"`
	// Contract is "ok" or the guard reason ("block_size", ...);
	// ContractDetail says what to fix.
	Contract       string `json:"contract"`
	ContractDetail string `json:"contract_detail,omitempty"`
	// CapacityBlocks is num_gpu_blocks; CapacityKnown false means the law
	// treats this endpoint's capacity as equal to the others'.
	CapacityBlocks int64 `json:"capacity_blocks"`
	CapacityKnown  bool  `json:"capacity_known"`
}

// NewEndpointSnapshot combines the three owners' views of one rank: the
// feed's (any goroutine), the mirror's (taken by its owner) and the
// capacity poller's.
func NewEndpointSnapshot(id EndpointID, feed FeedStats, mirror MirrorStats, capacity CacheConfig) EndpointSnapshot {
	s := EndpointSnapshot{
		Service: id.Service, EpIdx: id.EpIdx, Rank: id.Rank,
		Connected: feed.Connected, Reconnects: feed.Reconnects, RecvErrors: feed.RecvErrors,
		Blocks: mirror.Blocks, OffloadBlocks: mirror.OffloadBlocks, EventsPerSec: feed.EventsPerSec,
		Gaps: feed.Gaps, LostBatches: feed.LostBatches, Resyncs: feed.Resyncs, Restarts: feed.Restarts,
		Replays: feed.Replays, ReplayFailures: feed.ReplayFailures,
		Evictions:      mirror.Evictions,
		Ignored:        IgnoredViews(feed.Ignored, mirror.Ignored),
		Contract:       "ok",
		CapacityBlocks: capacity.NumGPUBlocks, CapacityKnown: capacity.Known(),
	}
	if feed.HaveSeq {
		seq := feed.LastSeq
		s.LastSeq = &seq
	}
	if mirror.Contract.Tripped {
		s.Contract, s.ContractDetail = mirror.Contract.Reason, mirror.Contract.Detail
	}
	return s
}

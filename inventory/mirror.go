package inventory

import (
	"errors"
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
)

// DefaultMaxBlocks is the per-mirror block cap when MirrorConfig.MaxBlocks
// is 0 (LoxiLB's LOXILB_KV_MAX_BLOCKS default).
const DefaultMaxBlocks = 1_000_000

// MaxMaxBlocks bounds MirrorConfig.MaxBlocks.
const MaxMaxBlocks = 1 << 30

// MirrorConfig configures a Mirror.
type MirrorConfig struct {
	// ID names the endpoint and rank (metric labels, log fields).
	ID EndpointID
	// Keys is the rule's ChainHasher, the same value the request path uses
	// for prompts. A *Hasher (vLLM) or an *SGLangHasher selects exact mode:
	// the mirror holds the engine's event keys and re-hashes stored runs to
	// check the contract. A *TokenHasher selects token-keyed mode (and is
	// TensorRT-LLM's): the mirror holds llb's own keys of each event's
	// token_ids and maps engine keys to them. Required.
	Keys ChainHasher
	// MaxBlocks caps mirrored engine blocks per tier (LOXILB_KV_MAX_BLOCKS);
	// 0 means DefaultMaxBlocks. At the cap, storing a new block evicts one
	// (CLOCK, see blockTable) and counts it.
	MaxBlocks int
	// Logger receives contract transitions (one line each way) and ignored
	// input (rate-limited, see ignoreLog).
	Logger zerolog.Logger
	// IgnoreLogEvery is how often an ignore reason is logged again after
	// its first line; 0 means DefaultIgnoreLogEvery.
	IgnoreLogEvery time.Duration
	// Now is the clock for log rate limiting; nil means time.Now.
	Now func() time.Time
	// Metrics receives the mirror's series; nil keeps them private.
	Metrics *metrics.Set
}

// Validate reports every configuration problem at once.
func (c MirrorConfig) Validate() error {
	var errs []error
	switch c.Keys.(type) {
	case *Hasher, *SGLangHasher, *TokenHasher:
	case nil:
		errs = append(errs, errors.New("Keys is required"))
	default:
		errs = append(errs, fmt.Errorf("Keys of type %T (want *Hasher, *SGLangHasher or *TokenHasher)", c.Keys))
	}
	if c.MaxBlocks < 0 || c.MaxBlocks > MaxMaxBlocks {
		errs = append(errs, fmt.Errorf("MaxBlocks %d (want 0..%d)", c.MaxBlocks, MaxMaxBlocks))
	}
	if len(errs) > 0 {
		return fmt.Errorf("mirror config: %w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// MirrorStats is a snapshot of a mirror's state and counters.
type MirrorStats struct {
	// TokenKeyed is true in token-keyed mode.
	TokenKeyed bool
	// Blocks is the number of distinct scorable keys in GPU memory.
	Blocks int
	// EngineBlocks is the number of distinct engine keys held in GPU memory
	// (equal to Blocks in exact mode).
	EngineBlocks int
	// OffloadBlocks is the number of distinct engine keys held in the CPU
	// offload tier.
	OffloadBlocks int
	// MaxBlocks is the cap on EngineBlocks (and, separately, on
	// OffloadBlocks).
	MaxBlocks int
	// StoredBlocks and RemovedBlocks count applied block events.
	StoredBlocks, RemovedBlocks uint64
	// Clears counts AllBlocksCleared events applied.
	Clears uint64
	// Resyncs counts Reset calls (the feed lost track of the stream).
	Resyncs uint64
	// Evictions counts blocks dropped at the cap.
	Evictions uint64
	// UnknownRemovals counts removals of keys not held (normal after a
	// resync, an eviction or a late join).
	UnknownRemovals uint64
	// IgnoredEvents counts events not applied, every reason together
	// (Ignored has them by reason).
	IgnoredEvents uint64
	// OrphanRuns counts token-mode runs whose parent engine key is unknown
	// (they cannot extend a cached prefix, so nothing is lost for scoring).
	OrphanRuns uint64
	// UnindexableRuns counts token-mode runs without usable token_ids.
	UnindexableRuns uint64
	// Ignored tallies what was not applied, by reason.
	Ignored IgnoreTally
	// MemBytes is the memory held by the mirror's tables.
	MemBytes int
	// Contract is the hash-contract self-check.
	Contract ContractState
}

// Mirror is one endpoint rank's prefix cache as its KV events describe it:
// a multiset of block keys per tier (vLLM does not deduplicate: a block
// stored twice is removed twice). Events of the full-attention group count
// (group_idx 0 or absent, kv_cache_spec_kind "full_attention" or absent);
// medium "GPU" (or absent) feeds the GPU tier, "CPU" (vLLM's KV offloading)
// the CPU tier, in any case; everything else is counted by reason, logged
// and ignored (see ignoreLog).
//
// A Mirror has a single owner (the endpoint's inventory actor) and takes no
// locks; only the metric series it exports are read by other goroutines.
type Mirror struct {
	id        EndpointID
	exact     engineKeys   // exact mode
	token     *TokenHasher // token-keyed mode
	maxBlocks int
	tiers     [numTiers]tierTables
	check     *contractChecker
	stats     MirrorStats
	runKeys   []uint64
	removed   removalLog // the latest GPU removals, for cache truth
	ignored   *ignoreLog
	now       func() time.Time

	metrics   *metricGroup
	blocksG   *metrics.Gauge
	offloadG  *metrics.Gauge
	evictions *metrics.Counter
}

// tierTables are one tier's tables.
type tierTables struct {
	idx blockTable // exact: engine keys; token: engine key -> own key
	own blockTable // token mode: own keys
}

// NewMirror builds an empty Mirror.
func NewMirror(cfg MirrorConfig) (*Mirror, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Mirror{id: cfg.ID, maxBlocks: cfg.MaxBlocks, now: cfg.Now}
	if m.maxBlocks == 0 {
		m.maxBlocks = DefaultMaxBlocks
	}
	if m.now == nil {
		m.now = time.Now
	}
	switch k := cfg.Keys.(type) {
	case *TokenHasher:
		m.token = k
	case engineKeys:
		m.exact = k
	}
	for t := range m.tiers {
		m.tiers[t].idx = newBlockTable(m.token != nil)
		if m.token != nil {
			m.tiers[t].own = newBlockTable(false)
		}
	}
	m.metrics = newMetricGroup(cfg.Metrics, cfg.ID)
	m.blocksG = m.metrics.gauge(MetricBlocks)
	m.offloadG = m.metrics.gauge(MetricOffloadBlocks)
	m.evictions = m.metrics.counter(MetricCapEvictions)
	log := cfg.Logger.With().Str(logService, cfg.ID.Service).Int(logEpIdx, cfg.ID.EpIdx).Int(logRank, cfg.ID.Rank).Logger()
	m.check = newContractChecker(cfg.Keys.BlockSize(), m.exact, log, m.metrics)
	m.ignored = newIgnoreLog(log, m.metrics, cfg.IgnoreLogEvery)
	m.blocksG.Set(0)
	m.offloadG.Set(0)
	return m, nil
}

// Close unregisters the mirror's metric series. The mirror stays usable.
func (m *Mirror) Close() { m.metrics.close() }

// TokenKeyed reports whether the mirror is in token-keyed mode.
func (m *Mirror) TokenKeyed() bool { return m.token != nil }

// Len is the number of distinct scorable block keys in GPU memory.
func (m *Mirror) Len() int { return m.tierLen(TierGPU) }

// OffloadLen is the number of distinct scorable block keys in CPU memory.
func (m *Mirror) OffloadLen() int { return m.tierLen(TierCPU) }

func (m *Mirror) tierLen(t CacheTier) int {
	if m.token != nil {
		return m.tiers[t].own.n
	}
	return m.tiers[t].idx.n
}

// scoreTable is the table Score looks keys up in for tier t.
func (m *Mirror) scoreTable(t CacheTier) *blockTable {
	if m.token != nil {
		return &m.tiers[t].own
	}
	return &m.tiers[t].idx
}

// Score returns how many LEADING blocks of chain the endpoint holds in any
// tier: it stops at the first key held nowhere, because vLLM can only reuse
// a contiguous cached prefix (a block whose parent is missing is never hit).
// chain comes from the ChainHasher given in MirrorConfig.Keys. Score does
// not consult the contract guard; the caller checks Contract first.
func (m *Mirror) Score(chain []uint64) int {
	n, _ := m.ScoreTiers(chain)
	return n
}

// ScoreTiers is Score with how many of those leading blocks are held only
// in the CPU offload tier (the engine loads them instead of recomputing).
func (m *Mirror) ScoreTiers(chain []uint64) (blocks, offloaded int) {
	gpu, cpu := m.scoreTable(TierGPU), m.scoreTable(TierCPU)
	for i, k := range chain {
		if gpu.find(k) >= 0 {
			continue
		}
		if cpu.n == 0 || cpu.find(k) < 0 {
			return i, offloaded
		}
		offloaded++
	}
	return len(chain), offloaded
}

// ScoreUnion is Score over the union of one endpoint's DP-rank mirrors: how
// many leading blocks of chain some rank holds in any tier, and how many of
// those no rank holds in GPU memory. An engine with data parallelism spreads
// a prefix's requests over its ranks, and LoxiLB scores the endpoint by the
// union of their caches; with one mirror it is ScoreTiers.
func ScoreUnion(ms []*Mirror, chain []uint64) (blocks, offloaded int) {
	switch len(ms) {
	case 0:
		return 0, 0
	case 1:
		return ms[0].ScoreTiers(chain)
	}
next:
	for i, k := range chain {
		for _, m := range ms {
			if m.scoreTable(TierGPU).find(k) >= 0 {
				continue next
			}
		}
		for _, m := range ms {
			if cpu := m.scoreTable(TierCPU); cpu.n > 0 && cpu.find(k) >= 0 {
				offloaded++
				continue next
			}
		}
		return i, offloaded
	}
	return len(chain), offloaded
}

// Contract is the hash-contract guard state.
func (m *Mirror) Contract() ContractState { return m.check.state }

// Stats returns a snapshot of the counters.
func (m *Mirror) Stats() MirrorStats {
	s := m.stats
	s.TokenKeyed = m.token != nil
	s.Blocks = m.Len()
	s.EngineBlocks = m.tiers[TierGPU].idx.n
	s.OffloadBlocks = m.tiers[TierCPU].idx.n
	s.MaxBlocks = m.maxBlocks
	for t := range m.tiers {
		s.MemBytes += m.tiers[t].idx.memBytes() + m.tiers[t].own.memBytes()
	}
	s.Contract = m.check.state
	s.Ignored = m.ignored.tally
	s.IgnoredEvents = s.Ignored.Total()
	return s
}

// AppendKeys appends up to limit GPU engine block keys (the hashes vLLM
// published) after skipping offset, for the paged inventory view. Order is
// the table's slot order: stable while the mirror does not change.
func (m *Mirror) AppendKeys(dst []uint64, offset, limit int) []uint64 {
	return m.tiers[TierGPU].idx.appendKeys(dst, max(offset, 0), limit)
}

// Reset drops every block because the feed lost track of the stream (a big
// gap, a publisher restart, a failed replay). It counts a resync.
func (m *Mirror) Reset() {
	m.stats.Resyncs++
	m.clear()
}

// ApplyUpdate applies what a Feed delivered: a reset first when the update
// asks for one, then the batch.
func (m *Mirror) ApplyUpdate(u Update) {
	if u.Reset != ResetNone {
		m.Reset()
	}
	if u.Batch != nil {
		m.Apply(u.Batch)
	}
}

// Apply applies a decoded batch's events in order.
func (m *Mirror) Apply(b *Batch) {
	for i := range b.Events {
		ev := &b.Events[i]
		switch ev.Kind {
		case EventAllBlocksCleared:
			m.stats.Clears++
			m.clear()
		case EventBlockStored:
			tier, ok := m.route(ev)
			if !ok {
				continue
			}
			if ev.HasSpecKind && ev.SpecKind != SpecFullAttention {
				m.ignore(IgnoreSpecKind, ev, func() string {
					return fmt.Sprintf("kv_cache_spec_kind %q is not full_attention (Tier 1.5 routes on the full-attention group)", ev.SpecKind)
				})
				continue
			}
			if ev.HasCacheSalt {
				m.ignore(IgnoreCacheSalt, ev, func() string {
					return "SGLang cached the run for requests with a cache_salt; they never share it with other prompts, so it is not mirrored"
				})
				continue
			}
			m.stats.StoredBlocks += uint64(len(ev.BlockHashes))
			switch {
			case tier == TierCPU:
				m.storeOffload(ev)
			case m.token != nil:
				m.storeToken(ev)
			default:
				m.storeExact(ev)
			}
		case EventBlockRemoved:
			tier, ok := m.route(ev)
			if !ok {
				continue
			}
			m.stats.RemovedBlocks += uint64(len(ev.BlockHashes))
			m.remove(tier, ev)
		}
	}
	m.blocksG.Set(float64(m.Len()))
	m.offloadG.Set(float64(m.OffloadLen()))
}

// route picks the tier of a block event, or counts it ignored: a medium
// llb does not mirror, or a KV-cache group other than 0.
func (m *Mirror) route(ev *Event) (CacheTier, bool) {
	tier, ok := TierOf(ev)
	if !ok {
		m.ignore(IgnoreMedium, ev, func() string {
			return fmt.Sprintf("medium %q is not a tier llb mirrors (GPU, CPU; any case)", ev.Medium)
		})
		return 0, false
	}
	if ev.HasGroupIdx && ev.GroupIdx != 0 {
		m.ignore(IgnoreGroup, ev, func() string {
			return fmt.Sprintf("group_idx %d is not KV-cache group 0 (Tier 1.5 routes on the full-attention group)", ev.GroupIdx)
		})
		return 0, false
	}
	return tier, true
}

// ignore counts one event (and its blocks) not applied.
func (m *Mirror) ignore(r IgnoreReason, ev *Event, cause func() string) {
	m.ignored.count(m.now(), r, 1, len(ev.BlockHashes), cause)
}

func (m *Mirror) storeExact(ev *Event) {
	// A block-size mismatch raises the guard; the keys are still the
	// engine's truth, so they are kept for the inventory view.
	m.check.checkBlockSize(ev)
	t := &m.tiers[TierGPU]
	for _, h := range ev.BlockHashes {
		if t.idx.n >= m.maxBlocks && t.idx.find(h) < 0 {
			m.evict(TierGPU)
		}
		t.idx.inc(h, 0)
	}
	m.check.verify(ev)
}

func (m *Mirror) storeToken(ev *Event) {
	if !m.check.checkBlockSize(ev) {
		m.stats.UnindexableRuns++
		m.ignore(IgnoreBlockSize, ev, func() string {
			return fmt.Sprintf("block_size %d is not kvBlockSize %d, so token-keyed mode cannot key the run", ev.BlockSize, m.token.BlockSize())
		})
		return
	}
	n, bs := len(ev.BlockHashes), m.token.BlockSize()
	if len(ev.TokenIDs) != n*bs {
		m.stats.UnindexableRuns++
		m.check.fail(ContractTokenCount, fmt.Sprintf(
			"BlockStored carries %d token ids for %d blocks of %d, so token-keyed mode cannot index it; the engine must publish token_ids",
			len(ev.TokenIDs), n, bs), false)
		m.ignore(IgnoreTokenCount, ev, func() string {
			return fmt.Sprintf("a BlockStored carries %d token ids for %d blocks of %d; token-keyed mode needs the engine to publish token_ids", len(ev.TokenIDs), n, bs)
		})
		return
	}
	var extras []any
	if ev.HasExtraKeys {
		if len(ev.ExtraKeys) != n {
			m.stats.UnindexableRuns++
			m.ignore(IgnoreExtraKeys, ev, func() string {
				return fmt.Sprintf("a BlockStored carries %d extra_keys entries for %d blocks", len(ev.ExtraKeys), n)
			})
			return
		}
		extras = ev.ExtraKeys
	}
	gpu := &m.tiers[TierGPU]
	parent := m.token.TokenRoot()
	if ev.HasParent {
		if j := gpu.idx.find(ev.Parent); j >= 0 {
			parent = gpu.idx.vals[j]
		} else if ev.Parent != 0 { // llm-d-inference-sim sends 0 for "no parent"
			m.stats.OrphanRuns++
			m.ignore(IgnoreOrphanParent, ev, func() string {
				return fmt.Sprintf("parent block %d of a stored run is not mirrored (stored before llb joined, or evicted), so the run cannot extend a cached prefix", ev.Parent)
			})
			return
		}
	}
	var err error
	if m.runKeys, err = m.token.AppendRunKeys(m.runKeys[:0], parent, ev.TokenIDs, extras); err != nil {
		m.stats.UnindexableRuns++
		m.ignore(IgnoreExtraKeys, ev, func() string { return "the run's keys cannot be computed: " + err.Error() })
		return
	}
	m.check.ok()
	for i, h := range ev.BlockHashes {
		ownKey := m.runKeys[i]
		if j := gpu.idx.find(h); j >= 0 {
			ownKey = gpu.idx.vals[j] // a re-store keeps the first mapping
		} else if gpu.idx.n >= m.maxBlocks {
			m.evict(TierGPU)
		}
		gpu.idx.inc(h, ownKey)
		gpu.own.inc(ownKey, 0)
	}
}

// storeOffload mirrors blocks an offload connector stored in CPU memory.
// vLLM's OffloadingConnector publishes them without token_ids or parent,
// with the GPU block's hash: in token-keyed mode the own key is taken from
// the GPU tier's mapping (the block was on the GPU when it was offloaded),
// or computed from token_ids when a run carries them from token 0.
func (m *Mirror) storeOffload(ev *Event) {
	bs := m.check.blockSize
	if ev.BlockSize != 0 && ev.BlockSize != bs {
		// Larger offload blocks (kv_connector_extra_config block_size) are
		// keyed by their last GPU block's hash and cannot be matched block
		// by block; the GPU contract is not at fault.
		m.ignore(IgnoreBlockSize, ev, func() string {
			return fmt.Sprintf("offloaded (CPU) blocks of %d tokens are not kvBlockSize %d; set the offload block_size to the GPU block size", ev.BlockSize, bs)
		})
		return
	}
	cpu := &m.tiers[TierCPU]
	if m.token == nil {
		for _, h := range ev.BlockHashes {
			if cpu.idx.n >= m.maxBlocks && cpu.idx.find(h) < 0 {
				m.evict(TierCPU)
			}
			cpu.idx.inc(h, 0)
		}
		return
	}
	var computed []uint64
	if len(ev.TokenIDs) == len(ev.BlockHashes)*bs && !ev.HasParent {
		var extras []any
		if ev.HasExtraKeys && len(ev.ExtraKeys) == len(ev.BlockHashes) {
			extras = ev.ExtraKeys
		}
		if keys, err := m.token.AppendRunKeys(m.runKeys[:0], m.token.TokenRoot(), ev.TokenIDs, extras); err == nil {
			m.runKeys, computed = keys, keys
		}
	}
	gpu := &m.tiers[TierGPU]
	missing := 0
	for i, h := range ev.BlockHashes {
		var ownKey uint64
		switch j, g := cpu.idx.find(h), gpu.idx.find(h); {
		case j >= 0:
			ownKey = cpu.idx.vals[j]
		case g >= 0:
			ownKey = gpu.idx.vals[g]
		case computed != nil:
			ownKey = computed[i]
		default:
			missing++
			continue
		}
		if cpu.idx.find(h) < 0 && cpu.idx.n >= m.maxBlocks {
			m.evict(TierCPU)
		}
		cpu.idx.inc(h, ownKey)
		cpu.own.inc(ownKey, 0)
	}
	if missing > 0 {
		m.ignored.count(m.now(), IgnoreTokenCount, 1, missing, func() string {
			return fmt.Sprintf("%d offloaded (CPU) blocks carry no token_ids and were never mirrored in GPU memory, so token-keyed mode cannot key them", missing)
		})
	}
}

func (m *Mirror) remove(tier CacheTier, ev *Event) {
	t := &m.tiers[tier]
	unknown := 0
	for _, h := range ev.BlockHashes {
		j := t.idx.find(h)
		if j < 0 {
			m.stats.UnknownRemovals++
			unknown++
			continue
		}
		ownKey := uint64(0)
		if m.token != nil {
			ownKey = t.idx.vals[j]
		}
		gone := t.idx.dec(j, 1)
		if m.token != nil {
			if k := t.own.find(ownKey); k >= 0 {
				gone = t.own.dec(k, 1)
			} else {
				gone = false
			}
		} else {
			ownKey = h
		}
		if gone && tier == TierGPU {
			m.removed.add(ownKey)
		}
	}
	if unknown > 0 {
		m.ignored.count(m.now(), IgnoreUnknownBlock, 0, unknown, func() string {
			return fmt.Sprintf("BlockRemoved names %d %s blocks the mirror does not hold (normal after a resync, an eviction at the cap, or a late join)", unknown, tier)
		})
	}
}

// evict drops one engine block of tier t chosen by the clock.
func (m *Mirror) evict(tier CacheTier) {
	t := &m.tiers[tier]
	_, c, ownKey, ok := t.idx.evict()
	if !ok {
		return
	}
	if m.token != nil {
		if k := t.own.find(ownKey); k >= 0 {
			t.own.dec(k, c)
		}
	}
	m.stats.Evictions++
	m.evictions.Inc()
}

// clear empties every tier's tables.
func (m *Mirror) clear() {
	for t := range m.tiers {
		m.tiers[t].idx.reset()
		if m.token != nil {
			m.tiers[t].own.reset()
		}
	}
	m.blocksG.Set(0)
	m.offloadG.Set(0)
}

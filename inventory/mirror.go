package inventory

import (
	"errors"
	"fmt"

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
	// for prompts. A *Hasher selects exact mode: the mirror holds the
	// engine's event keys and re-hashes stored runs to check the contract.
	// A *TokenHasher selects token-keyed mode: the mirror holds llb's own
	// keys of each event's token_ids and maps engine keys to them. Required.
	Keys ChainHasher
	// MaxBlocks caps mirrored engine blocks (LOXILB_KV_MAX_BLOCKS); 0 means
	// DefaultMaxBlocks. At the cap, storing a new block evicts one (CLOCK,
	// see blockTable) and counts it.
	MaxBlocks int
	// Logger receives contract transitions (one line each way).
	Logger zerolog.Logger
	// Metrics receives the mirror's series; nil keeps them private.
	Metrics *metrics.Set
}

// Validate reports every configuration problem at once.
func (c MirrorConfig) Validate() error {
	var errs []error
	switch c.Keys.(type) {
	case *Hasher, *TokenHasher:
	case nil:
		errs = append(errs, errors.New("Keys is required"))
	default:
		errs = append(errs, fmt.Errorf("Keys of type %T (want *Hasher or *TokenHasher)", c.Keys))
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
	// Blocks is the number of distinct scorable keys.
	Blocks int
	// EngineBlocks is the number of distinct engine keys held (equal to
	// Blocks in exact mode).
	EngineBlocks int
	// MaxBlocks is the cap on EngineBlocks.
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
	// IgnoredEvents counts events for other media, groups or spec kinds.
	IgnoredEvents uint64
	// OrphanRuns counts token-mode runs whose parent engine key is unknown
	// (they cannot extend a cached prefix, so nothing is lost for scoring).
	OrphanRuns uint64
	// UnindexableRuns counts token-mode runs without usable token_ids.
	UnindexableRuns uint64
	// MemBytes is the memory held by the mirror's tables.
	MemBytes int
	// Contract is the hash-contract self-check.
	Contract ContractState
}

// Mirror is one endpoint rank's prefix cache as its KV events describe it:
// a multiset of block keys (vLLM does not deduplicate: a block stored twice
// is removed twice). Only events that describe the GPU prefix cache of the
// full-attention group count: medium "GPU" or absent, group_idx 0 or absent,
// kv_cache_spec_kind "full_attention" or absent; others are counted and
// ignored.
//
// A Mirror has a single owner (the endpoint's inventory actor) and takes no
// locks; only the metric series it exports are read by other goroutines.
type Mirror struct {
	id        EndpointID
	exact     *Hasher      // exact mode
	token     *TokenHasher // token-keyed mode
	maxBlocks int
	idx       blockTable // exact: engine keys; token: engine key -> own key
	own       blockTable // token mode: own keys
	check     *contractChecker
	stats     MirrorStats
	runKeys   []uint64

	metrics   *metricGroup
	blocksG   *metrics.Gauge
	evictions *metrics.Counter
}

// NewMirror builds an empty Mirror.
func NewMirror(cfg MirrorConfig) (*Mirror, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Mirror{id: cfg.ID, maxBlocks: cfg.MaxBlocks}
	if m.maxBlocks == 0 {
		m.maxBlocks = DefaultMaxBlocks
	}
	switch k := cfg.Keys.(type) {
	case *Hasher:
		m.exact = k
		m.idx = newBlockTable(false)
	case *TokenHasher:
		m.token = k
		m.idx = newBlockTable(true)
		m.own = newBlockTable(false)
	}
	m.metrics = newMetricGroup(cfg.Metrics, cfg.ID)
	m.blocksG = m.metrics.gauge(MetricBlocks)
	m.evictions = m.metrics.counter(MetricCapEvictions)
	log := cfg.Logger.With().Str(logService, cfg.ID.Service).Int(logEpIdx, cfg.ID.EpIdx).Int(logRank, cfg.ID.Rank).Logger()
	m.check = newContractChecker(cfg.Keys.BlockSize(), m.exact, log, m.metrics)
	m.blocksG.Set(0)
	return m, nil
}

// Close unregisters the mirror's metric series. The mirror stays usable.
func (m *Mirror) Close() { m.metrics.close() }

// TokenKeyed reports whether the mirror is in token-keyed mode.
func (m *Mirror) TokenKeyed() bool { return m.token != nil }

// Len is the number of distinct scorable block keys.
func (m *Mirror) Len() int {
	if m.token != nil {
		return m.own.n
	}
	return m.idx.n
}

// Score returns how many LEADING blocks of chain the endpoint holds: it
// stops at the first key not present, because vLLM can only reuse a
// contiguous cached prefix (a block whose parent is missing is never hit).
// chain comes from the ChainHasher given in MirrorConfig.Keys. Score does
// not consult the contract guard; the caller checks Contract first.
func (m *Mirror) Score(chain []uint64) int {
	t := &m.idx
	if m.token != nil {
		t = &m.own
	}
	for i, k := range chain {
		if t.find(k) < 0 {
			return i
		}
	}
	return len(chain)
}

// Contract is the hash-contract guard state.
func (m *Mirror) Contract() ContractState { return m.check.state }

// Stats returns a snapshot of the counters.
func (m *Mirror) Stats() MirrorStats {
	s := m.stats
	s.TokenKeyed = m.token != nil
	s.Blocks = m.Len()
	s.EngineBlocks = m.idx.n
	s.MaxBlocks = m.maxBlocks
	s.MemBytes = m.idx.memBytes() + m.own.memBytes()
	s.Contract = m.check.state
	return s
}

// AppendKeys appends up to limit engine block keys (the hashes vLLM
// published) after skipping offset, for the paged inventory view. Order is
// the table's slot order: stable while the mirror does not change.
func (m *Mirror) AppendKeys(dst []uint64, offset, limit int) []uint64 {
	return m.idx.appendKeys(dst, max(offset, 0), limit)
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
			if !routable(ev) || (ev.HasSpecKind && ev.SpecKind != SpecFullAttention) {
				m.stats.IgnoredEvents++
				continue
			}
			m.stats.StoredBlocks += uint64(len(ev.BlockHashes))
			if m.token != nil {
				m.storeToken(ev)
			} else {
				m.storeExact(ev)
			}
		case EventBlockRemoved:
			if !routable(ev) {
				m.stats.IgnoredEvents++
				continue
			}
			m.stats.RemovedBlocks += uint64(len(ev.BlockHashes))
			m.remove(ev)
		}
	}
	m.blocksG.Set(float64(m.Len()))
}

// routable: the GPU prefix cache of group 0 (or fields absent).
func routable(ev *Event) bool {
	return (!ev.HasMedium || ev.Medium == MediumGPU) && (!ev.HasGroupIdx || ev.GroupIdx == 0)
}

func (m *Mirror) storeExact(ev *Event) {
	// A block-size mismatch raises the guard; the keys are still the
	// engine's truth, so they are kept for the inventory view.
	m.check.checkBlockSize(ev)
	for _, h := range ev.BlockHashes {
		if m.idx.n >= m.maxBlocks && m.idx.find(h) < 0 {
			m.evict()
		}
		m.idx.inc(h, 0)
	}
	m.check.verify(ev)
}

func (m *Mirror) storeToken(ev *Event) {
	if !m.check.checkBlockSize(ev) {
		m.stats.UnindexableRuns++
		return
	}
	n, bs := len(ev.BlockHashes), m.token.BlockSize()
	if len(ev.TokenIDs) != n*bs {
		m.stats.UnindexableRuns++
		m.check.fail(ContractTokenCount, fmt.Sprintf(
			"BlockStored carries %d token ids for %d blocks of %d, so token-keyed mode cannot index it; the engine must publish token_ids",
			len(ev.TokenIDs), n, bs), false)
		return
	}
	var extras []any
	if ev.HasExtraKeys {
		if len(ev.ExtraKeys) != n {
			m.stats.UnindexableRuns++
			return
		}
		extras = ev.ExtraKeys
	}
	parent := m.token.TokenRoot()
	if ev.HasParent {
		if j := m.idx.find(ev.Parent); j >= 0 {
			parent = m.idx.vals[j]
		} else if ev.Parent != 0 { // llm-d-inference-sim sends 0 for "no parent"
			m.stats.OrphanRuns++
			return
		}
	}
	var err error
	if m.runKeys, err = m.token.AppendRunKeys(m.runKeys[:0], parent, ev.TokenIDs, extras); err != nil {
		m.stats.UnindexableRuns++
		return
	}
	m.check.ok()
	for i, h := range ev.BlockHashes {
		ownKey := m.runKeys[i]
		if j := m.idx.find(h); j >= 0 {
			ownKey = m.idx.vals[j] // a re-store keeps the first mapping
		} else if m.idx.n >= m.maxBlocks {
			m.evict()
		}
		m.idx.inc(h, ownKey)
		m.own.inc(ownKey, 0)
	}
}

func (m *Mirror) remove(ev *Event) {
	for _, h := range ev.BlockHashes {
		j := m.idx.find(h)
		if j < 0 {
			m.stats.UnknownRemovals++
			continue
		}
		ownKey := uint64(0)
		if m.token != nil {
			ownKey = m.idx.vals[j]
		}
		m.idx.dec(j, 1)
		if m.token != nil {
			if k := m.own.find(ownKey); k >= 0 {
				m.own.dec(k, 1)
			}
		}
	}
}

// evict drops one engine block chosen by the clock.
func (m *Mirror) evict() {
	_, c, ownKey, ok := m.idx.evict()
	if !ok {
		return
	}
	if m.token != nil {
		if k := m.own.find(ownKey); k >= 0 {
			m.own.dec(k, c)
		}
	}
	m.stats.Evictions++
	m.evictions.Inc()
}

// clear empties the tables.
func (m *Mirror) clear() {
	m.idx.reset()
	if m.token != nil {
		m.own.reset()
	}
	m.blocksG.Set(0)
}

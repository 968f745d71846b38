package restapi

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/llbproject/llb/rule"
)

// The KV inventory view: GET /netlox/v1/config/ai/kv/inventory
// ?service_id=<rule key or id>&ep_idx=N[&offset=&limit=], in LoxiLB's shape
// {service_id, ep_idx, hash_algo, blocks:[{block_idx, hash_uint64}], total}
// plus llb's extras under the single key "llb".

// Inventory paging bounds.
const (
	// DefaultInventoryLimit is the page size when limit is not given.
	DefaultInventoryLimit = 100
	// MaxInventoryLimit is the largest page a request may ask for.
	MaxInventoryLimit = 10000
)

// InventoryViewer is an optional Runtime interface: a Runtime that mirrors
// KV inventories serves GET /netlox/v1/config/ai/kv/inventory.
type InventoryViewer interface {
	// Inventory returns up to limit of endpoint ep's mirrored block keys,
	// starting at offset in the endpoint's listing, with its mirror and feed
	// statistics. restapi has already checked that rule k exists, that ep
	// indexes one of its endpoints and that the rule's configuration
	// mirrors it (Effective.MirrorsKV). Errors wrap ErrNotRunning,
	// ErrNoInventory, ErrNoEndpoint or ErrDataPlaneBusy. It must not block on
	// the data path and must bound its own wait.
	Inventory(k rule.RuleKey, ep, offset, limit int) (InventoryPage, error)
}

// InventoryPage is one page of an endpoint's inventory as the data plane
// reports it.
type InventoryPage struct {
	// HashAlgo is the rule's block-hash contract ("sha256_cbor", ...) or
	// "token_keyed".
	HashAlgo string
	// Keys are the engine block keys (the hashes vLLM published) of the
	// page, in listing order.
	Keys []uint64
	// Total is the number of keys the listing holds (over every DP rank).
	Total int
	// CapacityBlocks is the engine's KV-block capacity (num_gpu_blocks); 0
	// when unknown.
	CapacityBlocks int64
	// Ranks are the per-DP-rank mirror and feed statistics, rank order.
	Ranks []InventoryRank
	// Prediction is the endpoint's cache-truth record (nil when the router
	// did not answer).
	Prediction *KVPrediction
}

// InventoryRank is one DP rank's mirror and feed.
type InventoryRank struct {
	// Rank is the DP rank (its feed is on kvZmqPort + rank).
	Rank int `json:"rank"`
	// Mirror is the rank's block mirror.
	Mirror MirrorStats `json:"mirror"`
	// Feed is the rank's KV-event subscription; nil when none is running.
	Feed *FeedStats `json:"feed"`
}

// MirrorStats is one rank's block mirror.
type MirrorStats struct {
	// Blocks is the number of scorable blocks (what Tier 1.5 matches).
	Blocks int `json:"blocks"`
	// EngineBlocks is the number of engine keys held (the listing); equal
	// to Blocks unless the rule keys blocks by tokens (kvBlockKey).
	EngineBlocks int `json:"engine_blocks"`
	// MaxBlocks is the cap on EngineBlocks (LOXILB_KV_MAX_BLOCKS).
	MaxBlocks int `json:"max_blocks"`
	// TokenKeyed is true when blocks are keyed by llb's token hash.
	TokenKeyed bool `json:"token_keyed"`
	// StoredBlocks and RemovedBlocks count applied block events.
	StoredBlocks  uint64 `json:"stored_blocks"`
	RemovedBlocks uint64 `json:"removed_blocks"`
	// Clears counts AllBlocksCleared events.
	Clears uint64 `json:"clears"`
	// Resyncs counts mirror resets (the feed lost track of the stream).
	Resyncs uint64 `json:"resyncs"`
	// Evictions counts blocks dropped at the cap.
	Evictions uint64 `json:"evictions"`
	// MemBytes is the memory the mirror's tables hold.
	MemBytes int `json:"mem_bytes"`
	// OffloadBlocks is the number of engine keys held in the CPU offload
	// tier (vLLM's KV offloading, medium "CPU").
	OffloadBlocks int `json:"offload_blocks"`
	// Ignored lists, by reason, the events and blocks the mirror did not
	// apply ([] when none).
	Ignored []KVIgnored `json:"ignored"`
	// Contract is the hash-contract self-check.
	Contract ContractStatus `json:"contract"`
}

// Hash-contract states (ContractStatus.State).
const (
	ContractOK      = "ok"
	ContractTripped = "tripped"
)

// ContractStatus is the hash-contract self-check of one rank's mirror: while
// tripped, Tier 1.5 falls through with reason hash_contract.
type ContractStatus struct {
	// State is "ok" or "tripped".
	State string `json:"state"`
	// Reason is the guard reason while tripped ("block_size",
	// "hash_mismatch", "token_count").
	Reason string `json:"reason,omitempty"`
	// Detail says what differs and what to fix.
	Detail string `json:"detail,omitempty"`
	// Verified, Mismatched and Unverifiable count the stored runs checked.
	Verified     uint64 `json:"verified"`
	Mismatched   uint64 `json:"mismatched"`
	Unverifiable uint64 `json:"unverifiable"`
}

// FeedStats is one rank's KV-event subscription.
type FeedStats struct {
	// Connected is true while the SUB socket has a live connection.
	Connected bool `json:"connected"`
	// Reconnects counts connections after the first.
	Reconnects uint64 `json:"reconnects"`
	// RecvErrors counts socket errors and malformed frames or payloads.
	RecvErrors uint64 `json:"recv_errors"`
	// Batches and Events count decoded batches and their events.
	Batches uint64 `json:"batches"`
	Events  uint64 `json:"events"`
	// LastSeq is the last sequence number accepted; nil before the first.
	LastSeq *uint64 `json:"last_seq"`
	// EventsPerSec is the recent event rate.
	EventsPerSec float64 `json:"events_per_sec"`
	// Gaps counts sequence gaps; LostBatches the batches they skipped.
	Gaps        uint64 `json:"gaps"`
	LostBatches uint64 `json:"lost_batches"`
	// Duplicates counts batches dropped for a repeated sequence number.
	Duplicates uint64 `json:"duplicates"`
	// Restarts counts publisher restarts (the sequence went backwards).
	Restarts uint64 `json:"restarts"`
	// Resyncs counts mirror clears the feed ordered.
	Resyncs uint64 `json:"resyncs"`
	// Replays and ReplayFailures count gap fills by replay.
	Replays        uint64 `json:"replays"`
	ReplayFailures uint64 `json:"replay_failures"`
	// Ignored lists, by reason, the events the feed dropped before the
	// mirror (invalid, unknown_tag; [] when none).
	Ignored []KVIgnored `json:"ignored"`
}

// InventoryBlock is one entry of InventoryView.Blocks.
type InventoryBlock struct {
	// BlockIdx is the entry's position in the endpoint's listing.
	BlockIdx int `json:"block_idx"`
	// HashUint64 is the engine's block key.
	HashUint64 uint64 `json:"hash_uint64"`
}

// InventoryView is the body of GET /config/ai/kv/inventory: LoxiLB's five
// keys, then llb's extras under "llb". LoxiLB's service_id is its numeric
// rule id; llb's is the rule key.
type InventoryView struct {
	// ServiceID is the rule key.
	ServiceID string `json:"service_id"`
	// EpIdx is the endpoint index.
	EpIdx int `json:"ep_idx"`
	// HashAlgo is the rule's block-hash contract or "token_keyed".
	HashAlgo string `json:"hash_algo"`
	// Blocks is the page ([] when empty).
	Blocks []InventoryBlock `json:"blocks"`
	// Total is the number of keys in the listing.
	Total int `json:"total"`
	// LLB holds llb's extras.
	LLB InventoryExtras `json:"llb"`
}

// InventoryExtras are llb's additions to the inventory view.
type InventoryExtras struct {
	// RuleID is the rule's id (serviceArguments.id).
	RuleID string `json:"rule_id"`
	// Endpoint is the endpoint's ip:port; Role its P/D role.
	Endpoint string `json:"endpoint"`
	Role     string `json:"role"`
	// Offset and Limit are the page asked for; NextOffset is the offset of
	// the next page, null on the last.
	Offset     int  `json:"offset"`
	Limit      int  `json:"limit"`
	NextOffset *int `json:"next_offset"`
	// Capacity is the KV-block capacity llb believes.
	Capacity CapacityView `json:"capacity"`
	// Ranks are the per-DP-rank mirror and feed statistics.
	Ranks []InventoryRank `json:"ranks"`
	// Prediction compares llb's cached-token predictions for the endpoint
	// with what its engine reports (null when the router did not answer).
	Prediction *KVPrediction `json:"prediction"`
}

// CapacityView is an endpoint's KV-block capacity.
type CapacityView struct {
	// Blocks is num_gpu_blocks as scraped from the engine's /metrics.
	Blocks int64 `json:"blocks"`
	// Known is false until a scrape succeeded; the selection law then
	// treats the endpoint's capacity as the mean of the known ones.
	Known bool `json:"known"`
}

// inventoryQuery is a parsed inventory request.
type inventoryQuery struct {
	service       string
	ep            int
	offset, limit int
}

// parseInventoryQuery reads and checks the query parameters, reporting every
// problem at once (400, naming each parameter).
func parseInventoryQuery(q url.Values) (inventoryQuery, error) {
	var c rule.Checker
	out := inventoryQuery{limit: DefaultInventoryLimit}
	one := func(name string) (string, bool) {
		vs, ok := q[name]
		switch {
		case !ok:
			return "", false
		case len(vs) > 1:
			c.Semantic(name, "query parameter given %d times; give it once", len(vs))
			return "", false
		}
		return vs[0], true
	}
	integer := func(name string, lo, hi int) (int, bool) {
		v, ok := one(name)
		if !ok {
			return 0, false
		}
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			c.Semantic(name, "%q is not an integer", v)
			return 0, false
		case n < lo || n > hi:
			c.Semantic(name, "%d is outside %d–%d", n, lo, hi)
			return 0, false
		}
		return n, true
	}
	switch s, ok := one("service_id"); {
	case ok && s != "":
		out.service = s
	case len(q["service_id"]) <= 1:
		c.Semantic("service_id", "query parameter is required: the rule key (e.g. tcp:10.10.10.254:2020@10.10.10.254) or the rule id")
	}
	if _, ok := q["ep_idx"]; !ok {
		c.Semantic("ep_idx", "query parameter is required: the endpoint's index in the rule (0–%d)", rule.MaxEndpoints-1)
	} else if n, ok := integer("ep_idx", 0, rule.MaxEndpoints-1); ok {
		out.ep = n
	}
	if n, ok := integer("offset", 0, rule.MaxInt32); ok {
		out.offset = n
	}
	if n, ok := integer("limit", 1, MaxInventoryLimit); ok {
		out.limit = n
	}
	if err := c.Err(); err != nil {
		return inventoryQuery{}, err
	}
	return out, nil
}

// getInventory serves the KV inventory view.
func (s *Server) getInventory(c echo.Context) error {
	viewer, ok := s.cfg.Runtime.(InventoryViewer)
	if !ok { // unreachable: the route is mounted only for an InventoryViewer
		return echo.ErrNotFound
	}
	q, err := parseInventoryQuery(c.QueryParams())
	if err != nil {
		return err
	}
	rec, err := lookupService(s.cat.Rules(), q.service)
	if err != nil {
		return err
	}
	r := &rec.Rule
	if err := endpointIndex(r, q.ep); err != nil {
		return err
	}
	if ok, why := r.Effective.MirrorsKV(q.ep); !ok {
		return fmt.Errorf("%w: rule %s endpoint %d: %s", ErrNoInventory, r.Key, q.ep, why)
	}
	page, err := viewer.Inventory(r.Key, q.ep, q.offset, q.limit)
	if err != nil {
		return fmt.Errorf("rule %s endpoint %d: %w", r.Key, q.ep, err)
	}
	return c.JSON(http.StatusOK, inventoryView(r, q, page))
}

// inventoryView renders a page.
func inventoryView(r *rule.Rule, q inventoryQuery, p InventoryPage) InventoryView {
	keys := p.Keys
	if len(keys) > q.limit { // a runtime that overfills the page is trimmed
		keys = keys[:q.limit]
	}
	v := InventoryView{
		ServiceID: r.Key.String(),
		EpIdx:     q.ep,
		HashAlgo:  p.HashAlgo,
		Blocks:    make([]InventoryBlock, len(keys)),
		Total:     p.Total,
		LLB: InventoryExtras{
			RuleID:     r.ID(),
			Endpoint:   r.Effective.Endpoints[q.ep].Addr.String(),
			Role:       r.Effective.Endpoints[q.ep].Role.String(),
			Offset:     q.offset,
			Limit:      q.limit,
			Capacity:   CapacityView{Blocks: p.CapacityBlocks, Known: p.CapacityBlocks > 0},
			Ranks:      slices.Clone(p.Ranks),
			Prediction: p.Prediction,
		},
	}
	for i, k := range keys {
		v.Blocks[i] = InventoryBlock{BlockIdx: q.offset + i, HashUint64: k}
	}
	if next := q.offset + len(keys); len(keys) > 0 && next < p.Total {
		v.LLB.NextOffset = &next
	}
	if v.LLB.Ranks == nil {
		v.LLB.Ranks = []InventoryRank{}
	}
	for i := range v.LLB.Ranks {
		rk := &v.LLB.Ranks[i]
		if rk.Mirror.Ignored == nil {
			rk.Mirror.Ignored = []KVIgnored{}
		}
		if rk.Feed != nil && rk.Feed.Ignored == nil {
			f := *rk.Feed // the runtime's page stays untouched
			f.Ignored = []KVIgnored{}
			rk.Feed = &f
		}
	}
	return v
}

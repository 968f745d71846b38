package ladder

import (
	"strings"
	"time"
)

// Tier-0 session stickiness: the key choice and the sharded pin table.
//
// Decide never touches the table. The runtime looks the key up in its shard
// (SessionShard.Get) before deciding, passes the answer in Request.Session,
// and afterwards acts on Decision.EvictSession / Decision.PinSession.

const (
	// MaxSessionKeyLen bounds a stickiness key (LoxiLB's MAX_CONV_ID_LEN is
	// 256 as well). Longer client values are not used as keys at all, rather
	// than truncated into aliases.
	MaxSessionKeyLen = 256
	// DefaultSessionShards is the shard count of a default session table.
	DefaultSessionShards = 16
	// DefaultSessionMaxEntries is the per-service LRU cap of a default table.
	DefaultSessionMaxEntries = 65536
	// autoConvPrefix marks conversation IDs LoxiLB minted itself.
	autoConvPrefix = "auto-"
)

// KeySource says where a session key came from.
type KeySource uint8

// Key sources.
const (
	KeyNone         KeySource = iota // no usable key
	KeyUserID                        // the JSON user_id field
	KeyConversation                  // the X-Conversation-Id header
)

// SessionKeyFor picks the Tier-0 key: the X-Conversation-Id header when set
// and not an "auto-" ID (those are minted by LoxiLB itself and deliberately
// never used for stickiness), else the JSON user_id. The "auto-" rule
// applies to the header only, as in LoxiLB's pd_select_prefill. Values
// longer than MaxSessionKeyLen are ignored. It does not allocate.
func SessionKeyFor(userID, conversationID string) (string, KeySource) {
	if conversationID != "" && len(conversationID) <= MaxSessionKeyLen && !strings.HasPrefix(conversationID, autoConvPrefix) {
		return conversationID, KeyConversation
	}
	if userID != "" && len(userID) <= MaxSessionKeyLen {
		return userID, KeyUserID
	}
	return "", KeyNone
}

// SessionConfig sizes a SessionTable.
type SessionConfig struct {
	// Shards is the shard count (one actor each); 0 means 16.
	Shards int
	// MaxEntries is the LRU cap over the whole table; 0 means 65536. Each
	// shard holds at most ceil(MaxEntries/Shards).
	MaxEntries int
	// TTL is the sliding pin lifetime: the rule's pd_session_ttl_sec
	// (ServiceSpec.SessionTTL). 0 keeps a pin until the LRU cap evicts it.
	TTL time.Duration
}

// SessionTable is one service's pin table split into independent shards so
// the runtime can give each shard its own actor. The table itself is only a
// container: each shard is owned by exactly one goroutine.
type SessionTable struct {
	shards []SessionShard
}

// NewSessionTable builds a table; a zero Shards or MaxEntries takes the
// default size.
func NewSessionTable(cfg SessionConfig) *SessionTable {
	if cfg.Shards <= 0 {
		cfg.Shards = DefaultSessionShards
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultSessionMaxEntries
	}
	per := (cfg.MaxEntries + cfg.Shards - 1) / cfg.Shards
	t := &SessionTable{shards: make([]SessionShard, cfg.Shards)}
	for i := range t.shards {
		t.shards[i].t = newLRUTable[Pin](per, cfg.TTL)
	}
	return t
}

// NumShards returns the shard count.
func (t *SessionTable) NumShards() int { return len(t.shards) }

// ShardFor maps a key to its shard with a hash (XXH64, seed 0) that is the
// same in every process and replica.
func (t *SessionTable) ShardFor(key string) int {
	return ShardFor(key, len(t.shards))
}

// Shard returns shard i (0 ≤ i < NumShards) for its owner.
func (t *SessionTable) Shard(i int) *SessionShard { return &t.shards[i] }

// ShardFor maps key to a shard index in [0, n) with XXH64 (seed 0); stable
// across processes, so replicas agree on placement. n ≤ 0 yields 0.
func ShardFor(key string, n int) int {
	if n <= 1 {
		return 0
	}
	return int(XXH64String(key, 0) % uint64(n))
}

// SessionShard is one shard of pins: TTL-evicted (sliding: every Get
// refreshes) and LRU-capped. Owned by one goroutine (a session-shard actor);
// not safe for concurrent use. Pass a non-decreasing now. The zero value is
// usable, with DefaultSessionMaxEntries and no TTL.
type SessionShard struct {
	t lruTable[Pin]
}

// Get returns the live pin for key (refreshing its TTL), or Found=false when
// absent or expired (an expired pin is dropped).
func (s *SessionShard) Get(now time.Time, key string) SessionLookup {
	if key == "" {
		return SessionLookup{}
	}
	p, ok := s.t.get(now, key)
	return SessionLookup{Found: ok, Pin: p}
}

// Put pins key to p, evicting the least recently used pin when full. Empty
// keys, keys longer than MaxSessionKeyLen and pins without a prefill
// endpoint are ignored. It reports whether the pin was stored.
func (s *SessionShard) Put(now time.Time, key string, p Pin) bool {
	if key == "" || len(key) > MaxSessionKeyLen || p.Prefill < 0 {
		return false
	}
	if s.t.m == nil {
		s.t = newLRUTable[Pin](DefaultSessionMaxEntries, 0)
	}
	s.t.put(now, key, p)
	return true
}

// Evict drops key; it reports whether a pin was present.
func (s *SessionShard) Evict(key string) bool { return s.t.evict(key) }

// EvictEndpoint drops every pin that names endpoint ep (as prefill or
// decode), e.g. when its breaker trips or it is removed; returns the count.
func (s *SessionShard) EvictEndpoint(ep int) int {
	return s.t.evictIf(func(p Pin) bool { return p.Prefill == ep || p.Decode == ep })
}

// Sweep drops every expired pin and returns the count; call it periodically
// so idle pins do not hold memory until the LRU cap pushes them out.
func (s *SessionShard) Sweep(now time.Time) int { return s.t.sweep(now) }

// Len returns the number of stored pins (expired ones included until swept
// or touched).
func (s *SessionShard) Len() int {
	if s.t.m == nil {
		return 0
	}
	return s.t.len()
}

package tenant

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Refusal codes (LoxiLB's), for 429 answers.
const (
	// CodeKeyRate: the key's rate_limit_rps / burst_size bucket is empty.
	CodeKeyRate = "rate_limit_exceeded"
	// CodeTenantRate: the tenant's rps bucket is empty.
	CodeTenantRate = "tenant_quota_exceeded"
	// CodeTokens: the key's or the tenant's tokens_per_min is spent.
	CodeTokens = "token_quota_exceeded"
)

// Refusal is why a request does not fit its limits now; the zero value
// admits.
type Refusal struct {
	// Code is one of the Code* constants; "" admits.
	Code string
	// RetryAfter is when the bucket that refused will admit again.
	RetryAfter time.Duration
}

// Gate enforces keys and limits for the data plane. Safe for concurrent
// use: the table is an atomic snapshot, each bucket has its own lock.
//
// Limits are token buckets whose level may go negative (debt):
//
//	key rate      refill rate_limit_rps/s, size burst_size (0 → rps), cost 1
//	tenant rate   refill rps/s, size rps, cost 1
//	key tokens    refill tokens_per_min/60 per s, size tokens_per_min,
//	tenant tokens cost: the request's prompt + completion tokens, charged
//	              when it ends; a request is admitted while the level is > 0
//
// Cluster (SetReplicas n > 1): each replica refills every bucket at the
// full rate, debits its own consumption at once and its peers' when
// their gossip reports it (ApplyPeers), and caps the level at size/n: every
// replica sees the one shared bucket, late by the age d of the peers'
// reports, and the burst is split evenly. A request is admitted while
// the level reaches min(1, size/n). Over any interval [0, T) the replicas
// together admit at least rate·T + size/n (under enough demand) and at
// most rate·T + size + (n−1)·rate·d + n: at each admission a replica's view
// misses only what the others took in the last d. In steady overload the
// admitted rate is the limit; with 100 ms gossip the measured error is
// under 1 % (cluster_test.go; real llbd replicas and etcd in
// docs/tenants.md).
type Gate struct {
	table    atomic.Pointer[Table]
	buckets  sync.Map // bucket id → *bucket
	replicas atomic.Int64
}

// NewGate returns a gate over an empty table (nothing is enforced).
func NewGate() *Gate {
	g := &Gate{}
	g.table.Store(EmptyTable())
	g.replicas.Store(1)
	return g
}

// SetTable publishes t and forgets the buckets of keys and tenants it no
// longer limits.
func (g *Gate) SetTable(t *Table) {
	g.table.Store(t)
	g.buckets.Range(func(k, _ any) bool {
		id := k.(string)
		kind, name, _ := strings.Cut(id, "/")
		var keep bool
		switch kind {
		case "rk", "tk":
			keep = t.Key(name) != nil
		case "rt", "tt":
			keep = t.Limit(name) != nil
		}
		if !keep {
			g.buckets.Delete(id)
		}
		return true
	})
}

// Table returns the current table.
func (g *Gate) Table() *Table { return g.table.Load() }

// Enforced reports whether llbd holds any key: rules that check keys
// (sse_mode) do so only then, as LoxiLB checks them only with its user
// service on.
func (g *Gate) Enforced() bool { return g.table.Load().Len() > 0 }

// Lookup returns the live key whose raw form is raw (enabled, not
// expired at now), or nil.
func (g *Gate) Lookup(raw string, now time.Time) *Key {
	k := g.table.Load().ByRaw(raw)
	if k == nil || !k.Live(now) {
		return nil
	}
	return k
}

// SetReplicas sets how many replicas share the buckets (1 on a single
// node).
func (g *Gate) SetReplicas(n int) { g.replicas.Store(int64(max(n, 1))) }

// Admit takes a request's place in k's and its tenant's buckets at now,
// or returns the first limit it does not fit (rates first, then tokens).
// A refusal takes nothing.
func (g *Gate) Admit(k *Key, now time.Time) Refusal {
	n := float64(g.replicas.Load())
	lim := g.table.Load().Limit(k.TenantID)
	var kb, tb *bucket
	if k.RateLimitRPS > 0 {
		kb = g.bucket("rk/" + k.ID)
		if wait, ok := kb.take(now, float64(k.RateLimitRPS), float64(k.Burst())/n); !ok {
			return Refusal{Code: CodeKeyRate, RetryAfter: wait}
		}
	}
	if lim != nil && lim.RPS > 0 {
		tb = g.bucket("rt/" + k.TenantID)
		if wait, ok := tb.take(now, float64(lim.RPS), float64(lim.RPS)/n); !ok {
			if kb != nil {
				kb.refund(1)
			}
			return Refusal{Code: CodeTenantRate, RetryAfter: wait}
		}
	}
	refund := func() {
		if kb != nil {
			kb.refund(1)
		}
		if tb != nil {
			tb.refund(1)
		}
	}
	if tpm := k.TokensPerMin; tpm > 0 {
		if wait, ok := g.bucket("tk/"+k.ID).positive(now, float64(tpm)/60, float64(tpm)/n); !ok {
			refund()
			return Refusal{Code: CodeTokens, RetryAfter: wait}
		}
	}
	if lim != nil && lim.TokensPerMin > 0 {
		tpm := lim.TokensPerMin
		if wait, ok := g.bucket("tt/"+k.TenantID).positive(now, float64(tpm)/60, float64(tpm)/n); !ok {
			refund()
			return Refusal{Code: CodeTokens, RetryAfter: wait}
		}
	}
	return Refusal{}
}

// Charge debits the tokens a request of k consumed (prompt plus
// completion) from its key's and its tenant's token buckets.
func (g *Gate) Charge(k *Key, tokens uint64, now time.Time) {
	if tokens == 0 {
		return
	}
	n := float64(g.replicas.Load())
	if tpm := k.TokensPerMin; tpm > 0 {
		g.bucket("tk/"+k.ID).charge(now, float64(tpm)/60, float64(tpm)/n, tokens)
	}
	if lim := g.table.Load().Limit(k.TenantID); lim != nil && lim.TokensPerMin > 0 {
		tpm := lim.TokensPerMin
		g.bucket("tt/"+k.TenantID).charge(now, float64(tpm)/60, float64(tpm)/n, tokens)
	}
}

func (g *Gate) bucket(id string) *bucket {
	if b, ok := g.buckets.Load(id); ok {
		return b.(*bucket)
	}
	b, _ := g.buckets.LoadOrStore(id, &bucket{})
	return b.(*bucket)
}

// Usage is one bucket's consumption as a replica reports it to its
// peers: the total this replica has taken from it since it started.
type Usage struct {
	Bucket string
	Total  uint64
}

// Usage lists this replica's consumption of every bucket it has taken
// from (totals since start; a receiver debits the growth).
func (g *Gate) Usage() []Usage {
	var out []Usage
	g.buckets.Range(func(k, v any) bool {
		b := v.(*bucket)
		b.mu.Lock()
		own := b.own
		b.mu.Unlock()
		if own > 0 {
			out = append(out, Usage{Bucket: k.(string), Total: own})
		}
		return true
	})
	return out
}

// ApplyPeers debits what peer consumed since its last report from the
// buckets this replica knows (a bucket's first report from a peer is its
// baseline: consumption before it is not debited). Buckets of keys and
// tenants the table does not limit are ignored.
func (g *Gate) ApplyPeers(peer string, us []Usage, now time.Time) {
	t := g.table.Load()
	n := float64(g.replicas.Load())
	for _, u := range us {
		kind, name, _ := strings.Cut(u.Bucket, "/")
		var rate, size float64
		switch kind {
		case "rk":
			k := t.Key(name)
			if k == nil || k.RateLimitRPS == 0 {
				continue
			}
			rate, size = float64(k.RateLimitRPS), float64(k.Burst())
		case "tk":
			k := t.Key(name)
			if k == nil || k.TokensPerMin == 0 {
				continue
			}
			rate, size = float64(k.TokensPerMin)/60, float64(k.TokensPerMin)
		case "rt":
			l := t.Limit(name)
			if l == nil || l.RPS == 0 {
				continue
			}
			rate, size = float64(l.RPS), float64(l.RPS)
		case "tt":
			l := t.Limit(name)
			if l == nil || l.TokensPerMin == 0 {
				continue
			}
			rate, size = float64(l.TokensPerMin)/60, float64(l.TokensPerMin)
		default:
			continue
		}
		g.bucket(u.Bucket).peer(now, rate, size/n, peer, u.Total)
	}
}

// ForgetPeer drops what this replica remembers of peer's reports (it left
// the cluster).
func (g *Gate) ForgetPeer(peer string) {
	g.buckets.Range(func(_, v any) bool {
		b := v.(*bucket)
		b.mu.Lock()
		delete(b.seen, peer)
		b.mu.Unlock()
		return true
	})
}

// bucket is one token bucket; see Gate.
type bucket struct {
	mu    sync.Mutex
	level float64
	at    time.Time
	init  bool
	// own is what this replica took in total; seen is each peer's last
	// reported total.
	own  uint64
	seen map[string]uint64
}

// refill brings the level to now: + rate per second elapsed, at most size.
func (b *bucket) refill(now time.Time, rate, size float64) {
	if !b.init {
		b.level, b.at, b.init = size, now, true
		return
	}
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.level += rate * dt
		b.at = now
	}
	b.level = min(b.level, size)
}

// take takes one unit when the level reaches min(1, size).
func (b *bucket) take(now time.Time, rate, size float64) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now, rate, size)
	need := min(1, size)
	if b.level >= need {
		b.level--
		b.own++
		return 0, true
	}
	return wait(need-b.level, rate), false
}

// positive admits while the level is above zero (the cost comes later).
func (b *bucket) positive(now time.Time, rate, size float64) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now, rate, size)
	if b.level > 0 {
		return 0, true
	}
	return wait(-b.level+rate*0.001, rate), false
}

func (b *bucket) refund(units uint64) {
	b.mu.Lock()
	b.level += float64(units)
	b.own -= min(units, b.own)
	b.mu.Unlock()
}

func (b *bucket) charge(now time.Time, rate, size float64, units uint64) {
	b.mu.Lock()
	b.refill(now, rate, size)
	b.level -= float64(units)
	b.own += units
	b.mu.Unlock()
}

func (b *bucket) peer(now time.Time, rate, size float64, peer string, total uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now, rate, size)
	if b.seen == nil {
		b.seen = map[string]uint64{}
	}
	last, known := b.seen[peer]
	b.seen[peer] = total
	if known && total > last {
		b.level -= float64(total - last)
	}
}

// wait is how long refilling deficit takes at rate, at least a
// millisecond.
func wait(deficit, rate float64) time.Duration {
	if rate <= 0 {
		return time.Minute
	}
	s := deficit / rate
	if math.IsInf(s, 0) || s > 3600 {
		return time.Hour
	}
	return max(time.Duration(s*float64(time.Second)), time.Millisecond)
}

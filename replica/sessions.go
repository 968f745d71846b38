package replica

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/replica/replicapb"
)

// Session errors; every one of them means "treat as a session miss".
var (
	// ErrLookupTimeout: the owner did not answer within the deadline (or
	// could not be resolved in time).
	ErrLookupTimeout = errors.New("replica: session lookup timed out")
	// ErrNoOwner: no member owns the shard (empty topology).
	ErrNoOwner = errors.New("replica: no owner for the session shard")
)

// SessionSpec names a service's session table in the cluster.
type SessionSpec struct {
	// Service is the rule key (the same string on every replica).
	Service string
	// Shards is the shard count; every replica must use the same. 0 means
	// ladder.DefaultSessionShards.
	Shards int
	// TTL and MaxEntries size the table (MaxEntries over all shards).
	TTL        time.Duration
	MaxEntries int
}

func (s *SessionSpec) shards() int {
	if s.Shards <= 0 {
		return ladder.DefaultSessionShards
	}
	return s.Shards
}

// Identity returns the grain identity of key's shard: "<service>/<shard>".
func (s *SessionSpec) Identity(key string) string {
	return s.Service + "/" + strconv.Itoa(ladder.ShardFor(key, s.shards()))
}

// SessionAnswer is a lookup's result.
type SessionAnswer struct {
	ladder.SessionLookup
	// Member and Activation identify the grain activation that answered.
	Member, Activation string
	// Local is true when the owner is this replica.
	Local bool
}

// Sessions is the client side of the session grains: lookups, pins and
// evictions by session key, routed to the shard's single owner in the
// cluster. Owner PIDs are cached per identity and dropped on every
// topology change and on a timeout; resolving a PID runs once per identity
// at a time, in the background, and a caller waits for it only until its
// deadline.
type Sessions struct {
	m *Member

	mu sync.Mutex
	// Guarded by mu: cached PIDs by identity, valid for one incarnation
	// and topology generation; in-flight resolutions.
	pids      map[string]pidEntry
	resolving map[string]chan struct{}
	// prefetch are the tables whose owners are kept resolved, by service.
	prefetch map[string]SessionSpec

	// Counters (read by Stats).
	lookups, hits, misses, timeouts, remote, local, resolves, dropped atomic.Int64
}

type pidEntry struct {
	pid   *actor.PID
	inc   *incarnation
	gen   uint64
	local bool
}

func newSessions(m *Member) *Sessions {
	return &Sessions{m: m, pids: map[string]pidEntry{}, resolving: map[string]chan struct{}{}, prefetch: map[string]SessionSpec{}}
}

// topologyChanged drops every cached PID (owners may have moved) and
// forgets resolutions in flight: one that asks a dead owner waits out
// protoactor's fixed 5 s, and callers must not queue behind it. The shards
// of the prefetched tables are resolved again in the background.
func (s *Sessions) topologyChanged() {
	s.mu.Lock()
	clear(s.pids)
	clear(s.resolving)
	s.mu.Unlock()
	s.prefetchAll()
}

// prefetchAll resolves the shards of every prefetched table (after a join
// and after every topology change).
func (s *Sessions) prefetchAll() {
	s.mu.Lock()
	specs := make([]SessionSpec, 0, len(s.prefetch))
	for _, sp := range s.prefetch {
		specs = append(specs, sp)
	}
	s.mu.Unlock()
	for _, sp := range specs {
		s.resolveAll(sp)
	}
}

// Prefetch resolves (and so activates) every shard owner of spec's table
// in the background, now and after every topology change, so that lookups
// find the owner's PID cached instead of missing their deadline while it
// is resolved. Forget ends it.
func (s *Sessions) Prefetch(spec SessionSpec) {
	s.mu.Lock()
	s.prefetch[spec.Service] = spec
	s.mu.Unlock()
	s.resolveAll(spec)
}

// Forget stops prefetching spec's table (its rule is gone).
func (s *Sessions) Forget(service string) {
	s.mu.Lock()
	delete(s.prefetch, service)
	s.mu.Unlock()
}

// knownShards is active plus every shard identity of the prefetched
// tables, without duplicates.
func (s *Sessions) knownShards(active []string) []string {
	seen := make(map[string]bool, len(active))
	out := make([]string, 0, len(active))
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, id := range active {
		add(id)
	}
	s.mu.Lock()
	for _, sp := range s.prefetch {
		for i := 0; i < sp.shards(); i++ {
			add(sp.Service + "/" + strconv.Itoa(i))
		}
	}
	s.mu.Unlock()
	return out
}

// resolveAll resolves every shard of spec in the background.
func (s *Sessions) resolveAll(spec SessionSpec) {
	inc := s.m.current()
	if inc == nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < spec.shards(); i++ {
		identity := spec.Service + "/" + strconv.Itoa(i)
		go func() { _, _ = s.resolve(inc, identity, deadline) }()
	}
}

// cached returns a valid cached PID for identity.
func (s *Sessions) cached(inc *incarnation, identity string) (pidEntry, bool) {
	s.mu.Lock()
	e, ok := s.pids[identity]
	s.mu.Unlock()
	if !ok || e.inc != inc || e.gen != inc.topoGen.Load() {
		return pidEntry{}, false
	}
	return e, true
}

func (s *Sessions) forget(identity string, pid *actor.PID) {
	s.mu.Lock()
	if e, ok := s.pids[identity]; ok && e.pid.Equal(pid) {
		delete(s.pids, identity)
	}
	s.mu.Unlock()
}

// resolve returns identity's owner PID, waiting at most until deadline.
// The resolution itself (protoactor's identity lookup, which can wait ~5 s
// on a dead owner) runs in the background and fills the cache.
func (s *Sessions) resolve(inc *incarnation, identity string, deadline time.Time) (pidEntry, error) {
	if e, ok := s.cached(inc, identity); ok {
		return e, nil
	}
	s.mu.Lock()
	wait, busy := s.resolving[identity]
	if !busy {
		wait = make(chan struct{})
		s.resolving[identity] = wait
		s.resolves.Add(1)
		go s.resolveNow(inc, identity, wait)
	}
	s.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-wait:
	case <-t.C:
		return pidEntry{}, ErrLookupTimeout
	}
	if e, ok := s.cached(inc, identity); ok {
		return e, nil
	}
	return pidEntry{}, ErrNoOwner
}

func (s *Sessions) resolveNow(inc *incarnation, identity string, done chan struct{}) {
	gen := inc.topoGen.Load()
	local := inc.topo.Load().ownerAddress(identity) == inc.system.Address()
	pid := inc.cluster.Get(identity, SessionKind)
	s.mu.Lock()
	if pid != nil && inc.topoGen.Load() == gen {
		s.pids[identity] = pidEntry{pid: pid, inc: inc, gen: gen, local: local}
	}
	if s.resolving[identity] == done {
		delete(s.resolving, identity)
	}
	s.mu.Unlock()
	close(done)
}

// Lookup asks key's shard owner for key's pin. It waits until ctx's
// deadline, or LookupTimeout when ctx has none, whichever is first; any
// error means a session miss (the answer is then the zero SessionAnswer).
func (s *Sessions) Lookup(ctx context.Context, spec SessionSpec, key string) (SessionAnswer, error) {
	return s.count(s.lookup(ctx, spec, key))
}

// LookupAsync is Lookup for a caller that must not block (an actor): it
// returns at once and calls done exactly once, from another goroutine,
// when the owner answered or at deadline (a miss) at the latest.
func (s *Sessions) LookupAsync(spec SessionSpec, key string, deadline time.Time, done func(SessionAnswer, error)) {
	go func() {
		limit := time.Until(deadline)
		if limit <= 0 {
			s.lookups.Add(1)
			s.misses.Add(1)
			s.timeouts.Add(1)
			done(SessionAnswer{}, ErrLookupTimeout)
			return
		}
		done(s.count(s.lookupWithin(context.Background(), spec, key, limit)))
	}()
}

// count records one lookup's outcome in the counters.
func (s *Sessions) count(ans SessionAnswer, err error) (SessionAnswer, error) {
	s.lookups.Add(1)
	switch {
	case err != nil:
		s.misses.Add(1)
		if errors.Is(err, ErrLookupTimeout) {
			s.timeouts.Add(1)
		}
	case ans.Found:
		s.hits.Add(1)
	default:
		s.misses.Add(1)
	}
	return ans, err
}

func (s *Sessions) lookup(ctx context.Context, spec SessionSpec, key string) (SessionAnswer, error) {
	return s.lookupWithin(ctx, spec, key, s.m.cfg.LookupTimeout)
}

// lookupWithin is lookup with limit instead of LookupTimeout.
func (s *Sessions) lookupWithin(ctx context.Context, spec SessionSpec, key string, limit time.Duration) (SessionAnswer, error) {
	inc := s.m.current()
	if inc == nil {
		return SessionAnswer{}, ErrNotMember
	}
	deadline := time.Now().Add(limit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	identity := spec.Identity(key)
	e, err := s.resolve(inc, identity, deadline)
	if err != nil {
		return SessionAnswer{}, err
	}
	if e.local {
		s.local.Add(1)
	} else {
		s.remote.Add(1)
	}
	left := time.Until(deadline)
	if left <= 0 {
		return SessionAnswer{}, ErrLookupTimeout
	}
	req := &replicapb.SessionRequest{Op: &replicapb.SessionRequest_Lookup{Lookup: &replicapb.SessionLookup{Key: key}}}
	res, err := inc.system.Root.RequestFuture(e.pid, req, left).Result()
	if err != nil {
		s.forget(identity, e.pid)
		if errors.Is(err, actor.ErrTimeout) {
			return SessionAnswer{}, ErrLookupTimeout
		}
		return SessionAnswer{}, fmt.Errorf("replica: session lookup: %w", err)
	}
	r, ok := res.(*replicapb.SessionReply)
	if !ok {
		return SessionAnswer{}, fmt.Errorf("replica: session lookup: unexpected reply %T", res)
	}
	return SessionAnswer{
		SessionLookup: ladder.SessionLookup{Found: r.Found, Pin: ladder.Pin{Prefill: int(r.Prefill), Decode: int(r.Decode)}},
		Member:        r.Member, Activation: r.Activation, Local: e.local,
	}, nil
}

// Pin pins key to p in its shard (fire and forget). When the owner's PID
// is not cached it is resolved in the background first; a pin that cannot
// be delivered is counted as dropped.
func (s *Sessions) Pin(spec SessionSpec, key string, p ladder.Pin) {
	per := 0
	if spec.MaxEntries > 0 {
		per = (spec.MaxEntries + spec.shards() - 1) / spec.shards()
	}
	s.send(spec.Identity(key), &replicapb.SessionRequest{Op: &replicapb.SessionRequest_Pin{Pin: &replicapb.SessionPin{
		Key: key, Prefill: int32(p.Prefill), Decode: int32(p.Decode), TtlMs: spec.TTL.Milliseconds(), MaxEntries: int32(per),
	}}})
}

// Evict drops key's pin (fire and forget).
func (s *Sessions) Evict(spec SessionSpec, key string) {
	s.send(spec.Identity(key), &replicapb.SessionRequest{Op: &replicapb.SessionRequest_Evict{Evict: &replicapb.SessionEvict{Key: key}}})
}

// EvictEndpoint drops every pin naming endpoint ep in every shard of the
// service (fire and forget), e.g. when its breaker opens.
func (s *Sessions) EvictEndpoint(spec SessionSpec, ep int) {
	for i := 0; i < spec.shards(); i++ {
		s.send(spec.Service+"/"+strconv.Itoa(i), &replicapb.SessionRequest{Op: &replicapb.SessionRequest_EvictEndpoint{
			EvictEndpoint: &replicapb.SessionEvictEndpoint{Endpoint: int32(ep)}}})
	}
}

func (s *Sessions) send(identity string, req *replicapb.SessionRequest) {
	inc := s.m.current()
	if inc == nil {
		s.dropped.Add(1)
		return
	}
	if e, ok := s.cached(inc, identity); ok {
		inc.system.Root.Send(e.pid, req)
		return
	}
	go func() {
		e, err := s.resolve(inc, identity, time.Now().Add(10*time.Second))
		if err != nil {
			s.dropped.Add(1)
			return
		}
		inc.system.Root.Send(e.pid, req)
	}()
}

// SessionStats counts session traffic since start.
type SessionStats struct {
	Lookups, Hits, Misses, Timeouts int64
	// Local and Remote count lookups answered by an owner here / elsewhere.
	Local, Remote int64
	// Resolves counts owner resolutions started; Dropped pins/evictions
	// that could not be delivered.
	Resolves, Dropped int64
}

// Stats returns the counters.
func (s *Sessions) Stats() SessionStats {
	return SessionStats{
		Lookups: s.lookups.Load(), Hits: s.hits.Load(), Misses: s.misses.Load(), Timeouts: s.timeouts.Load(),
		Local: s.local.Load(), Remote: s.remote.Load(), Resolves: s.resolves.Load(), Dropped: s.dropped.Load(),
	}
}

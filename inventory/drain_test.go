package inventory

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// The files in testdata/trtllm are trtllm-serve's POST /kv_cache_events
// bodies byte for byte (trtllm_drains.py says how they were made), for
// tokens_per_block 32.

// drainServer serves queued bodies to POST /kv_cache_events, then [], and
// counts requests; a body of "" answers 500.
type drainServer struct {
	mu     sync.Mutex
	queue  [][]byte
	posts  int
	srv    *httptest.Server
	status int // non-zero: answer every request with it
}

func newDrainServer(t *testing.T, bodies ...[]byte) *drainServer {
	t.Helper()
	d := &drainServer{queue: bodies}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/kv_cache_events" {
			http.Error(w, "no route", http.StatusNotFound)
			return
		}
		d.mu.Lock()
		d.posts++
		st := d.status
		body := []byte("[]")
		if len(d.queue) > 0 {
			body, d.queue = d.queue[0], d.queue[1:]
		}
		d.mu.Unlock()
		if st != 0 {
			http.Error(w, "down", st)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *drainServer) push(b []byte) {
	d.mu.Lock()
	d.queue = append(d.queue, b)
	d.mu.Unlock()
}

func (d *drainServer) setStatus(s int) {
	d.mu.Lock()
	d.status = s
	d.mu.Unlock()
}

func (d *drainServer) pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue)
}

func readDrain(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/trtllm/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// drainRig runs a DrainFeed against a drainServer and applies its updates
// to a token-keyed mirror, as the inventory actor does.
type drainRig struct {
	t      *testing.T
	srv    *drainServer
	feed   *DrainFeed
	mu     sync.Mutex
	mirror *Mirror
	kinds  []UpdateKind
	resets []ResetReason
	keys   *TokenHasher
	done   chan struct{}
	cancel context.CancelFunc
}

func startDrainRig(t *testing.T, srv *drainServer, bs int) *drainRig {
	t.Helper()
	rig := &drainRig{t: t, srv: srv, keys: mustTokenHasher(t, bs), done: make(chan struct{})}
	rig.mirror = newTestMirror(t, rig.keys, 0)
	f, err := NewDrainFeed(DrainConfig{
		ID: EndpointID{Service: "svc", EpIdx: 0}, URL: srv.srv.URL + "/kv_cache_events", BlockSize: bs,
		PollMin: time.Millisecond, PollMax: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond, Logger: zerolog.Nop(),
		Sink: func(u Update) {
			rig.mu.Lock()
			defer rig.mu.Unlock()
			rig.kinds = append(rig.kinds, u.Kind)
			if u.Kind == UpdateBatch {
				rig.resets = append(rig.resets, u.Reset)
				rig.mirror.ApplyUpdate(u)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rig.feed = f
	ctx, cancel := context.WithCancel(context.Background())
	rig.cancel = cancel
	go func() {
		defer close(rig.done)
		if err := f.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(rig.stop)
	return rig
}

func (r *drainRig) stop() {
	r.cancel()
	<-r.done
}

// drained waits until the server handed out every queued body and one more
// (empty) drain completed, so the sink has seen everything.
func (r *drainRig) drained() {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.srv.pending() > 0 {
		if time.Now().After(deadline) {
			r.t.Fatal("drain server still holds bodies")
		}
		time.Sleep(time.Millisecond)
	}
	r.srv.mu.Lock()
	n := r.srv.posts
	r.srv.mu.Unlock()
	for {
		r.srv.mu.Lock()
		m := r.srv.posts
		r.srv.mu.Unlock()
		if m >= n+2 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatal("no further drain")
		}
		time.Sleep(time.Millisecond)
	}
}

func (r *drainRig) score(tokens []uint32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mirror.Score(r.keys.AppendBlockKeys(nil, tokens, ExtraKeys{}))
}

func (r *drainRig) mirrorStats() MirrorStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mirror.Stats()
}

// TestDrainFeed_AppliesTRTLLMEvents drains a fresh engine's events: stored
// runs are keyed by llb's own chain over their tokens (children through the
// engine's parent hash), the partial tail and the multimodal block are cut
// and counted, the removal applies, the updated event is counted.
func TestDrainFeed_AppliesTRTLLMEvents(t *testing.T) {
	srv := newDrainServer(t, readDrain(t, "drain-fresh.json"))
	rig := startDrainRig(t, srv, 32)
	rig.drained()
	p1 := seqTokens(1, 74)
	if got := rig.score(p1); got != 2 {
		t.Errorf("first prompt scores %d; want 2 (its partial third block is not mirrored)", got)
	}
	p2 := append(append([]uint32(nil), p1[:32]...), seqTokens(500, 32)...)
	if got := rig.score(p2); got != 1 {
		t.Errorf("second prompt scores %d; want 1 (its child block was removed)", got)
	}
	if got := rig.score(seqTokens(900, 32)); got != 0 {
		t.Errorf("multimodal block scores %d; want 0", got)
	}
	st := rig.feed.Stats()
	if st.Events != 6 || st.Gaps != 0 || st.Resyncs != 0 || !st.HaveSeq || st.LastSeq != 5 || !st.Connected {
		t.Errorf("feed stats %+v", st)
	}
	for _, c := range []struct {
		r      IgnoreReason
		blocks uint64
	}{{IgnoreBlockSize, 1}, {IgnoreMultimodal, 1}, {IgnoreCacheLevel, 1}} {
		if st.Ignored[c.r].Blocks != c.blocks {
			t.Errorf("ignored %s: %+v; want %d blocks", c.r, st.Ignored[c.r], c.blocks)
		}
	}
	if ms := rig.mirrorStats(); ms.Clears != 1 || ms.Blocks != 2 || ms.Contract.Tripped {
		t.Errorf("mirror stats %+v", ms)
	}
}

// TestDrainFeed_GapFromAnotherConsumer: events another consumer drained
// show as an event_id gap (counted, the mirror kept within the window) and
// new prompts are mirrored again; a gap beyond the window clears.
func TestDrainFeed_GapFromAnotherConsumer(t *testing.T) {
	srv := newDrainServer(t, readDrain(t, "drain-fresh.json"), readDrain(t, "drain-after-theft.json"))
	rig := startDrainRig(t, srv, 32)
	rig.drained()
	st := rig.feed.Stats()
	if st.Gaps != 1 || st.LostBatches != 4 || st.Resyncs != 0 {
		t.Fatalf("gaps %d lost %d resyncs %d; want 1 gap of 4 events, no resync", st.Gaps, st.LostBatches, st.Resyncs)
	}
	if got := rig.score(seqTokens(2000, 64)); got != 2 {
		t.Errorf("prompt stored after the gap scores %d; want 2", got)
	}
	if got := rig.score(seqTokens(1, 64)); got != 2 {
		t.Errorf("prompt stored before a small gap scores %d; want 2 (kept)", got)
	}
	// A gap beyond the window: everything before it is dropped.
	far := []byte(`[{"event_id":500,"data":{"type":"removed","block_hashes":[1]},"window_size":4096}]`)
	srv.push(far)
	rig.drained()
	if st := rig.feed.Stats(); st.Gaps != 2 || st.Resyncs != 1 {
		t.Fatalf("after a big gap: %+v", st)
	}
	if got := rig.score(seqTokens(2000, 64)); got != 0 {
		t.Errorf("after a big gap the old prompt scores %d; want 0", got)
	}
}

// TestDrainFeed_RestartAndCreated: event_ids starting over mean a restarted
// engine (the mirror clears, counted as a restart), and created clears too.
func TestDrainFeed_RestartAndCreated(t *testing.T) {
	srv := newDrainServer(t, readDrain(t, "drain-fresh.json"))
	rig := startDrainRig(t, srv, 32)
	rig.drained()
	if rig.score(seqTokens(1, 64)) != 2 {
		t.Fatal("setup: prompt not mirrored")
	}
	srv.push(readDrain(t, "drain-after-theft.json")) // event_id 10
	rig.drained()
	srv.push([]byte(`[{"event_id":0,"data":{"type":"created","num_blocks_per_cache_level":[10,0]},"window_size":4096}]`))
	rig.drained()
	st := rig.feed.Stats()
	if st.Restarts != 1 || st.Resyncs != 1 {
		t.Errorf("restarts %d resyncs %d; want 1 and 1", st.Restarts, st.Resyncs)
	}
	if got := rig.score(seqTokens(2000, 64)); got != 0 {
		t.Errorf("after a restart a prompt scores %d; want 0", got)
	}
}

// TestDrainFeed_AttentionDPRanks: each attention-DP rank counts its own
// event_ids (no false gaps), and the ranks' blocks share one mirror.
func TestDrainFeed_AttentionDPRanks(t *testing.T) {
	srv := newDrainServer(t, readDrain(t, "drain-adp.json"))
	rig := startDrainRig(t, srv, 32)
	rig.drained()
	st := rig.feed.Stats()
	if st.Gaps != 0 || st.Duplicates != 0 || st.Restarts != 0 || st.Events != 5 {
		t.Errorf("feed stats %+v; want 5 events, no gap, duplicate or restart", st)
	}
	if got := rig.score(seqTokens(4000, 32)); got != 1 {
		t.Errorf("rank 1's block scores %d; want 1", got)
	}
	if got := rig.score(seqTokens(3000, 32)); got != 0 {
		t.Errorf("rank 0's removed block scores %d; want 0", got)
	}
}

// TestDrainFeed_BlockSizeMismatchTripsContract: an engine with 64-token
// blocks under a kvBlockSize 32 rule raises the hash_contract guard.
func TestDrainFeed_BlockSizeMismatchTripsContract(t *testing.T) {
	srv := newDrainServer(t, readDrain(t, "drain-blocksize64.json"))
	rig := startDrainRig(t, srv, 32)
	rig.drained()
	ms := rig.mirrorStats()
	if !ms.Contract.Tripped || ms.Contract.Reason != ContractBlockSize {
		t.Errorf("contract %+v; want tripped block_size", ms.Contract)
	}
	if ms.Blocks != 0 {
		t.Errorf("mirrored %d blocks; want 0", ms.Blocks)
	}
}

// TestDrainFeed_EngineDownAndBack: failing drains mark the feed
// disconnected; the first good one reconnects.
func TestDrainFeed_EngineDownAndBack(t *testing.T) {
	srv := newDrainServer(t)
	rig := startDrainRig(t, srv, 32)
	rig.drained()
	srv.setStatus(http.StatusServiceUnavailable)
	waitFor(t, func() bool { return !rig.feed.Stats().Connected })
	srv.setStatus(0)
	waitFor(t, func() bool { return rig.feed.Stats().Connected })
	st := rig.feed.Stats()
	if st.Disconnects != 1 || st.Reconnects != 1 || st.RecvErrors < drainDownAfter {
		t.Errorf("stats %+v; want one disconnect, one reconnect", st)
	}
	rig.mu.Lock()
	defer rig.mu.Unlock()
	want := []UpdateKind{UpdateConnected, UpdateDisconnected, UpdateConnected}
	if len(rig.kinds) != len(want) {
		t.Fatalf("updates %v; want %v", rig.kinds, want)
	}
	for i := range want {
		if rig.kinds[i] != want[i] {
			t.Fatalf("updates %v; want %v", rig.kinds, want)
		}
	}
}

// TestDrainFeed_BadBodies: malformed JSON, bad event fields and unknown
// types are counted, never crash, and good events in the same drain apply.
func TestDrainFeed_BadBodies(t *testing.T) {
	good := `{"event_id":3,"data":{"type":"stored","parent_hash":null,"blocks":[{"type":"stored_block","block_hash":"0xabc","tokens":[` +
		tokenList(7000, 32) + `],"cache_level":0,"priority":35}]},"window_size":4096}`
	srv := newDrainServer(t,
		[]byte(`{not json`),
		[]byte(`[{"event_id":-1,"data":{"type":"created"}},{"event_id":1,"data":{"type":"mystery"},"window_size":4096},`+
			`{"event_id":2,"data":{"type":"stored","blocks":[{"block_hash":[1],"tokens":[]}]},"window_size":4096},`+good+`,`+
			`{"event_id":4,"data":{"type":"removed","block_hashes":[1]},"window_size":64}]`))
	rig := startDrainRig(t, srv, 32)
	rig.drained()
	st := rig.feed.Stats()
	if st.RecvErrors != 1 || st.InvalidEvents != 2 || st.UnknownEvents != 1 {
		t.Errorf("stats %+v; want 1 malformed drain, 2 invalid events, 1 unknown", st)
	}
	if st.Ignored[IgnoreWindow].Events != 1 {
		t.Errorf("window ignored %+v; want 1", st.Ignored[IgnoreWindow])
	}
	if got := rig.score(seqTokens(7000, 32)); got != 1 {
		t.Errorf("good block scores %d; want 1", got)
	}
}

// tokenList is n unique_tokens from start, as trtllm-serve writes them.
func tokenList(start, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"unique_token","token_id":%d,"token_extra_id":0}`, start+i)
	}
	return b.String()
}

// TestDrainFeed_ATokenWithoutAnIDIsMalformed: a stored block whose token
// lacks token_id (or has null, or one past 32 bits) is an invalid event,
// not a block ending in token 0 that such a prompt would match.
func TestDrainFeed_ATokenWithoutAnIDIsMalformed(t *testing.T) {
	stored := func(id int, tokens string) string {
		return fmt.Sprintf(`{"event_id":%d,"data":{"type":"stored","parent_hash":null,"blocks":[{"type":"stored_block","block_hash":%d,"tokens":[%s],"cache_level":0,"priority":35}]},"window_size":4096}`,
			id, 100+id, tokens)
	}
	lead := tokenList(0, 31) // the bad token comes 32nd
	srv := newDrainServer(t, []byte(`[`+
		stored(1, lead+`,{"type":"unique_token","token_extra_id":0}`)+`,`+
		stored(2, lead+`,{"type":"unique_token","token_id":null,"token_extra_id":0}`)+`,`+
		stored(3, lead+`,{"type":"unique_token","token_id":4294967296,"token_extra_id":0}`)+`,`+
		stored(4, tokenList(7000, 32))+`]`))
	rig := startDrainRig(t, srv, 32)
	rig.drained()
	if st := rig.feed.Stats(); st.InvalidEvents != 3 {
		t.Errorf("stats %+v; want the 3 events with a bad token invalid", st)
	}
	if got := rig.score(append(seqTokens(0, 31), 0)); got != 0 {
		t.Errorf("a prompt ending in token 0 scores %d blocks; want 0 (no token id is not token 0)", got)
	}
	if got := rig.score(seqTokens(7000, 32)); got != 1 {
		t.Errorf("the good block scores %d; want 1", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestDrainFeed_OneLeaderDrainsForEveryReplica: in a cluster one replica
// drains an endpoint and relays the bodies; a follower never POSTs, and
// both mirror the same blocks. Leadership moves when the leader says so.
func TestDrainFeed_OneLeaderDrainsForEveryReplica(t *testing.T) {
	srv := newDrainServer(t, readDrain(t, "drain-fresh.json"))
	relay := make(chan []byte, 16)
	var leaderA sync.Mutex
	aLeads := true
	isA := func() bool { leaderA.Lock(); defer leaderA.Unlock(); return aLeads }
	keys := mustTokenHasher(t, 32)
	type replica struct {
		mu sync.Mutex
		m  *Mirror
	}
	type replica2 = replica
	start := func(leader func() bool, drained func([]byte), relayIn <-chan []byte, posts *atomic.Int64) *replica2 {
		r := &replica{m: newTestMirror(t, keys, 0)}
		tr := &http.Transport{Proxy: nil}
		t.Cleanup(tr.CloseIdleConnections)
		client := &http.Client{Transport: countingRT{tr, posts}}
		f, err := NewDrainFeed(DrainConfig{URL: srv.srv.URL + "/kv_cache_events", BlockSize: 32, PollMin: time.Millisecond,
			PollMax: 5 * time.Millisecond, Logger: zerolog.Nop(), Leader: leader, Drained: drained, Relay: relayIn, Client: client,
			Sink: func(u Update) { r.mu.Lock(); r.m.ApplyUpdate(u); r.mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = f.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return r
	}
	var aPosts, bPosts atomic.Int64
	a := start(isA, func(b []byte) { relay <- append([]byte(nil), b...) }, nil, &aPosts)
	b := start(func() bool { return !isA() }, nil, relay, &bPosts)
	score := func(r *replica, toks []uint32) int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.m.Score(keys.AppendBlockKeys(nil, toks, ExtraKeys{}))
	}
	waitFor(t, func() bool { return score(a, seqTokens(1, 64)) == 2 && score(b, seqTokens(1, 64)) == 2 })
	if n := bPosts.Load(); n != 0 || aPosts.Load() == 0 {
		t.Fatalf("the follower posted %d drains, the leader %d; want 0 and some", n, aPosts.Load())
	}
	leaderA.Lock()
	aLeads = false
	leaderA.Unlock()
	srv.push(readDrain(t, "drain-after-theft.json"))
	waitFor(t, func() bool { return score(b, seqTokens(2000, 64)) == 2 && bPosts.Load() > 0 })
}

// countingRT counts the requests a client makes.
type countingRT struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

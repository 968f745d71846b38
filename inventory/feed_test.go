package inventory

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	zmq "github.com/pebbe/zmq4"
	"github.com/rs/zerolog"
)

// waitTimeout bounds every condition wait in the ZMQ tests.
const waitTimeout = 10 * time.Second

// testPub is a real ZMQ PUB socket bound on an ephemeral loopback port,
// owned by the test goroutine.
type testPub struct {
	ctx  *zmq.Context
	sock *zmq.Socket
	addr string
}

func newTestPub(t *testing.T, addr string) *testPub {
	t.Helper()
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	p := &testPub{ctx: zctx}
	if p.sock, err = zctx.NewSocket(zmq.PUB); err != nil {
		t.Fatal(err)
	}
	if err := p.sock.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if addr == "" {
		addr = "tcp://127.0.0.1:*"
	}
	if err := p.sock.Bind(addr); err != nil {
		t.Fatalf("bind %s: %v", addr, err)
	}
	if p.addr, err = p.sock.GetLastEndpoint(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p
}

func (p *testPub) close() {
	if p.sock != nil {
		p.sock.Close()
		p.sock = nil
		p.ctx.Term()
	}
}

// sendRaw publishes arbitrary frames.
func (p *testPub) sendRaw(t *testing.T, parts ...[]byte) {
	t.Helper()
	args := make([]any, len(parts))
	for i := range parts {
		args[i] = parts[i]
	}
	if _, err := p.sock.SendMessage(args...); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// send publishes one batch with sequence number seq.
func (p *testPub) send(t *testing.T, seq uint64, evs ...Event) {
	t.Helper()
	p.sendRaw(t, []byte("kv@test"), seq8(seq), encodeBatch(t, evs...))
}

func seq8(s uint64) []byte { return binary.BigEndian.AppendUint64(nil, s) }

func encodeBatch(t *testing.T, evs ...Event) []byte {
	t.Helper()
	raw, err := AppendBatch(nil, &Batch{TS: 1, HasDPRank: true, Events: evs}, EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// feedHarness runs a Feed and plays the inventory actor: the test goroutine
// owns the Mirror and applies updates as it waits for them.
type feedHarness struct {
	feed    *Feed
	mirror  *Mirror
	updates chan Update
	seen    []Update // batch updates applied, in order
	set     *metrics.Set
	stop    func()
}

func startFeed(t *testing.T, cfg FeedConfig, keys ChainHasher) *feedHarness {
	t.Helper()
	h := &feedHarness{updates: make(chan Update, 1024), set: metrics.NewSet()}
	cfg.Sink = func(u Update) { h.updates <- u }
	cfg.Metrics = h.set
	cfg.Logger = zerolog.Nop()
	if cfg.ID.Service == "" {
		cfg.ID = EndpointID{Service: "svc", EpIdx: 3}
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.ReconnectIvl == 0 {
		cfg.ReconnectIvl, cfg.ReconnectIvlMax = 20*time.Millisecond, 100*time.Millisecond
	}
	var err error
	if h.feed, err = NewFeed(cfg); err != nil {
		t.Fatal(err)
	}
	if h.mirror, err = NewMirror(MirrorConfig{ID: cfg.ID, Keys: keys, Metrics: h.set}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- h.feed.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(waitTimeout):
				t.Fatal("feed did not stop")
			}
			h.mirror.Close()
		})
	}
	t.Cleanup(h.stop)
	return h
}

// waitUpdate applies updates until one satisfies pred.
func (h *feedHarness) waitUpdate(t *testing.T, what string, pred func(Update) bool) Update {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		select {
		case u := <-h.updates:
			h.mirror.ApplyUpdate(u)
			if u.Kind == UpdateBatch {
				h.seen = append(h.seen, u)
			}
			if pred(u) {
				return u
			}
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; feed stats %+v", what, h.feed.Stats())
		}
	}
}

// waitSeq applies updates until the batch with sequence seq arrives.
func (h *feedHarness) waitSeq(t *testing.T, seq uint64) Update {
	t.Helper()
	return h.waitUpdate(t, "seq "+strconv.FormatUint(seq, 10), func(u Update) bool {
		return u.Kind == UpdateBatch && u.Seq == seq
	})
}

// waitFor polls a condition (applying updates meanwhile) until it holds.
func (h *feedHarness) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; feed stats %+v", what, h.feed.Stats())
		}
		select {
		case u := <-h.updates:
			h.mirror.ApplyUpdate(u)
		case <-tick.C:
		}
	}
}

// join beats the ZMQ slow-joiner problem: it publishes empty probe batches
// (seq from, from+1, ...) until one arrives, and returns the next free seq.
func (h *feedHarness) join(t *testing.T, p *testPub, from uint64) uint64 {
	t.Helper()
	h.waitUpdate(t, "connected", func(u Update) bool { return u.Kind == UpdateConnected })
	seq := from
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		p.send(t, seq)
		seq++
		probe := time.NewTimer(20 * time.Millisecond)
		select {
		case u := <-h.updates:
			probe.Stop()
			h.mirror.ApplyUpdate(u)
			if u.Kind == UpdateBatch {
				h.seen = append(h.seen, u)
				if u.Seq != seq-1 {
					// Drain the probes still in flight so the scenario starts clean.
					h.waitSeq(t, seq-1)
				}
				return seq
			}
		case <-probe.C:
		}
	}
	t.Fatal("subscriber never received a probe")
	return 0
}

func (h *feedHarness) score(keys ChainHasher, toks []uint32) int {
	return h.mirror.Score(keys.AppendBlockKeys(nil, toks, ExtraKeys{}))
}

func TestFeed_RealZMQStreamEndsInTheExpectedMirror(t *testing.T) {
	keys := mustExactHasher(t, "0")
	eng := engine{h: keys}
	pub := newTestPub(t, "")
	h := startFeed(t, FeedConfig{Endpoint: pub.addr}, keys)
	n := h.join(t, pub, 0)

	A, B, C, D, E, F := seqTokens(1, 16), seqTokens(100, 16), seqTokens(200, 16), seqTokens(300, 16), seqTokens(400, 16), seqTokens(500, 16)
	storeA := eng.store(t, A, 0, ExtraKeys{})

	pub.send(t, n, storeA)
	h.waitSeq(t, n)
	pub.send(t, n+1, storeA) // vLLM does not deduplicate
	h.waitSeq(t, n+1)
	pub.send(t, n+2, removed(storeA.BlockHashes...))
	h.waitSeq(t, n+2)
	if got := h.score(keys, A); got != 4 {
		t.Fatalf("A stored twice, removed once: score %d; want 4", got)
	}

	pub.send(t, n+2, removed(storeA.BlockHashes...)) // same seq again: dropped
	h.waitFor(t, "duplicate counted", func() bool { return h.feed.Stats().Duplicates == 1 })

	pub.send(t, n+8, eng.store(t, B, 0, ExtraKeys{})) // 5 batches lost: keep
	if u := h.waitSeq(t, n+8); u.Reset != ResetNone {
		t.Fatalf("small gap reset %v; want none", u.Reset)
	}
	if a, b := h.score(keys, A), h.score(keys, B); a != 4 || b != 4 {
		t.Fatalf("after a small gap scores A=%d B=%d; want 4, 4", a, b)
	}

	pub.send(t, n+9, Event{Kind: EventAllBlocksCleared}, eng.store(t, C, 0, ExtraKeys{}))
	h.waitSeq(t, n+9)
	if a, c := h.score(keys, A), h.score(keys, C); a != 0 || c != 4 {
		t.Fatalf("after clear+store scores A=%d C=%d; want 0, 4", a, c)
	}

	pub.send(t, n+109, eng.store(t, D, 0, ExtraKeys{})) // 99 lost: resync
	if u := h.waitSeq(t, n+109); u.Reset != ResetGap {
		t.Fatalf("big gap reset %v; want gap", u.Reset)
	}
	if c, d := h.score(keys, C), h.score(keys, D); c != 0 || d != 4 {
		t.Fatalf("after a big gap scores C=%d D=%d; want 0, 4", c, d)
	}

	pub.send(t, 0, eng.store(t, E, 0, ExtraKeys{})) // publisher restarted
	if u := h.waitSeq(t, 0); u.Reset != ResetRestart {
		t.Fatalf("restart reset %v; want restart", u.Reset)
	}

	// Malformed input is counted and never fatal; seq 1's garbage is lost.
	pub.sendRaw(t, []byte("kv@test"), seq8(1))                // two frames
	pub.sendRaw(t, []byte("kv@test"), []byte{1, 2}, []byte{}) // short seq
	pub.sendRaw(t, []byte("kv@test"), seq8(1), []byte{0xc1, 0x00})
	pub.send(t, 2, eng.store(t, F, 0, ExtraKeys{}))
	if u := h.waitSeq(t, 2); u.Reset != ResetNone {
		t.Fatalf("after a malformed batch reset %v; want none", u.Reset)
	}
	if d, e, f := h.score(keys, D), h.score(keys, E), h.score(keys, F); d != 0 || e != 4 || f != 4 {
		t.Fatalf("final scores D=%d E=%d F=%d; want 0, 4, 4", d, e, f)
	}

	st := h.feed.Stats()
	// The 99-batch gap came within milliseconds: it counts as the window
	// (64) plus what the publisher could have sent meanwhile, at most 99.
	if st.Gaps != 2 || st.LostBatches < 5+64 || st.LostBatches > 104 || st.Resyncs != 2 || st.Restarts != 1 || st.Duplicates != 1 || st.RecvErrors != 3 {
		t.Fatalf("feed stats %+v; want gaps 2, lost 69–104, resyncs 2, restarts 1, duplicates 1, recv errors 3", st)
	}
	if !st.Connected || st.LastSeq != 2 || !st.HaveSeq {
		t.Fatalf("feed stats %+v; want connected at seq 2", st)
	}
	var buf bytes.Buffer
	h.set.WritePrometheus(&buf)
	for _, want := range []string{
		`loxilb_kv_subscriber_connected{service="svc",ep_idx="3",rank="0"} 1`,
		`loxilb_kv_subscriber_recv_error_total{service="svc",ep_idx="3",rank="0"} 3`,
		`loxilb_pd_kv_blocks{service="svc",ep_idx="3",rank="0"} 8`,
		`llb_kv_resyncs_total{service="svc",ep_idx="3",rank="0"} 2`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	h.stop()
	if names := h.set.ListMetricNames(); len(names) != 0 {
		t.Fatalf("series left after stop: %v", names)
	}
}

func TestFeed_CountsReconnectsAfterThePublisherComesBack(t *testing.T) {
	keys := mustExactHasher(t, "0")
	pub := newTestPub(t, "")
	h := startFeed(t, FeedConfig{Endpoint: pub.addr}, keys)
	n := h.join(t, pub, 0)
	pub.close()
	h.waitUpdate(t, "disconnected", func(u Update) bool { return u.Kind == UpdateDisconnected })
	if h.feed.Stats().Connected {
		t.Fatal("still connected after the publisher closed")
	}
	pub2 := newTestPub(t, pub.addr)
	n = h.join(t, pub2, n)
	st := h.feed.Stats()
	if !st.Connected || st.Reconnects != 1 {
		t.Fatalf("stats %+v; want connected with 1 reconnect", st)
	}
	pub2.send(t, n, engine{h: keys}.store(t, seqTokens(1, 8), 0, ExtraKeys{}))
	h.waitSeq(t, n)
	if got := h.score(keys, seqTokens(1, 8)); got != 2 {
		t.Fatalf("score after reconnect %d; want 2", got)
	}
}

// A publisher restarted on the same address whose first batches were lost
// (a PUB socket drops what it sends before the subscription reaches it) and
// whose next batch carries the sequence number llb saw last: on the new
// connection that is a restart, not a duplicate. The mirror is cleared and,
// with a replay endpoint, the lost first batches are fetched from the new
// publisher's buffer.
func TestFeed_ARestartedPublisherRepeatingTheLastSequenceIsARestart(t *testing.T) {
	keys := mustExactHasher(t, "0")
	eng := engine{h: keys}
	A, B, C := seqTokens(1, 8), seqTokens(100, 8), seqTokens(200, 8)
	for _, tt := range []struct {
		name   string
		replay bool
	}{{"without replay", false}, {"with replay", true}} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := FeedConfig{}
			var router *testRouter
			if tt.replay {
				router = startRouter(t, true)
				cfg.ReplayEndpoint = router.addr
			}
			pub := newTestPub(t, "")
			cfg.Endpoint = pub.addr
			h := startFeed(t, cfg, keys)
			n := h.join(t, pub, 0)
			pub.send(t, n, eng.store(t, A, 0, ExtraKeys{}))
			h.waitSeq(t, n)
			pub.close()
			h.waitUpdate(t, "disconnected", func(u Update) bool { return u.Kind == UpdateDisconnected })

			// The new publisher's batches 0..n-1 were lost; 0 stored C.
			pub2 := newTestPub(t, pub.addr)
			if router != nil {
				router.put(0, encodeBatch(t, eng.store(t, C, 0, ExtraKeys{})))
				for s := uint64(1); s < n; s++ {
					router.put(s, encodeBatch(t))
				}
			}
			h.waitUpdate(t, "connected", func(u Update) bool { return u.Kind == UpdateConnected })
			// Sent until it arrives (the new subscription may still be
			// joining); copies after the first are duplicates.
			for deadline, arrived := time.Now().Add(waitTimeout), false; !arrived; {
				if time.Now().After(deadline) {
					t.Fatalf("batch %d of the restarted publisher never arrived; stats %+v", n, h.feed.Stats())
				}
				pub2.send(t, n, eng.store(t, B, 0, ExtraKeys{}))
				for wait := time.After(50 * time.Millisecond); !arrived; {
					select {
					case u := <-h.updates:
						h.mirror.ApplyUpdate(u)
						arrived = u.Kind == UpdateBatch && u.Seq == n
						continue
					case <-wait:
					}
					break
				}
			}
			st := h.feed.Stats()
			if st.Restarts != 1 || st.Resyncs != 1 {
				t.Fatalf("stats %+v; want 1 restart and 1 resync", st)
			}
			wantC := 0
			if tt.replay {
				wantC = 2
				if st.Replays != 1 || st.ReplayFailures != 0 {
					t.Fatalf("stats %+v; want the lost first batches replayed", st)
				}
				if start := <-router.requests; start != 0 {
					t.Fatalf("replay requested from %d; want 0", start)
				}
			}
			if a, b, c := h.score(keys, A), h.score(keys, B), h.score(keys, C); a != 0 || b != 2 || c != wantC {
				t.Fatalf("scores A=%d B=%d C=%d; want 0 (cleared), 2, %d", a, b, c, wantC)
			}
		})
	}
}

// testRouter serves vLLM's replay protocol from a buffer on a real ROUTER
// socket, in one of the two reply generations.
type testRouter struct {
	addr     string
	requests chan uint64
	done     chan struct{}
	exited   chan struct{}
	mu       sync.Mutex
	buffer   map[uint64][]byte
}

// put buffers a batch for replay.
func (r *testRouter) put(seq uint64, payload []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buffer[seq] = payload
}

func (r *testRouter) get(seq uint64) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.buffer[seq]
	return p, ok
}

func startRouter(t *testing.T, newGen bool) *testRouter {
	t.Helper()
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	sock, err := zctx.NewSocket(zmq.ROUTER)
	if err != nil {
		t.Fatal(err)
	}
	sock.SetLinger(0)
	if err := sock.Bind("tcp://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	r := &testRouter{requests: make(chan uint64, 16), done: make(chan struct{}), exited: make(chan struct{}), buffer: map[uint64][]byte{}}
	r.addr, _ = sock.GetLastEndpoint()
	go func() { // owns sock
		defer close(r.exited)
		defer zctx.Term()
		defer sock.Close()
		poller := zmq.NewPoller()
		poller.Add(sock, zmq.POLLIN)
		for {
			select {
			case <-r.done:
				return
			default:
			}
			polled, err := poller.Poll(10 * time.Millisecond)
			if err != nil || len(polled) == 0 {
				continue
			}
			msg, err := sock.RecvMessageBytes(0)
			if err != nil || len(msg) != 3 || len(msg[2]) != 8 {
				continue
			}
			start := binary.BigEndian.Uint64(msg[2])
			r.requests <- start
			for s := start; s < start+1000; s++ {
				if p, ok := r.get(s); ok {
					if newGen {
						sock.SendMessage(msg[0], []byte{}, []byte("kv@test"), seq8(s), p)
					} else {
						sock.SendMessage(msg[0], []byte{}, seq8(s), p)
					}
				}
			}
			if newGen {
				sock.SendMessage(msg[0], []byte{}, []byte{}, seq8(replayEnd), []byte{})
			} else {
				sock.SendMessage(msg[0], []byte{}, seq8(replayEnd), []byte{})
			}
		}
	}()
	t.Cleanup(func() { close(r.done); <-r.exited })
	return r
}

// freeAddr returns a loopback TCP address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "tcp://" + addr
}

func TestFeed_ReplayFillsGapsOverARealRouter(t *testing.T) {
	keys := mustExactHasher(t, "0")
	eng := engine{h: keys}
	A, B, C, D := seqTokens(1, 8), seqTokens(100, 8), seqTokens(200, 8), seqTokens(300, 8)
	storeA := eng.store(t, A, 0, ExtraKeys{})
	for _, gen := range []struct {
		name   string
		newGen bool
	}{{"older reply generation", false}, {"newer reply generation", true}} {
		t.Run(gen.name, func(t *testing.T) {
			router := startRouter(t, gen.newGen)
			pub := newTestPub(t, "")
			h := startFeed(t, FeedConfig{Endpoint: pub.addr, ReplayEndpoint: router.addr}, keys)
			n := h.join(t, pub, 0)
			// The publisher's replay buffer holds n+1..n+4; the live stream
			// loses n+1..n+3.
			router.put(n+1, encodeBatch(t, eng.store(t, B, 0, ExtraKeys{})))
			router.put(n+2, encodeBatch(t, removed(storeA.BlockHashes...)))
			router.put(n+3, encodeBatch(t, eng.store(t, C, 0, ExtraKeys{})))
			router.put(n+4, encodeBatch(t, eng.store(t, D, 0, ExtraKeys{})))
			pub.send(t, n, storeA)
			h.waitSeq(t, n)
			pub.send(t, n+4, eng.store(t, D, 0, ExtraKeys{}))
			h.waitSeq(t, n+4)
			var order []uint64
			for _, u := range h.seen {
				if u.Seq >= n {
					order = append(order, u.Seq)
				}
			}
			if want := []uint64{n, n + 1, n + 2, n + 3, n + 4}; !equalU64(order, want) {
				t.Fatalf("applied seqs %v; want %v", order, want)
			}
			if a, b, c, d := h.score(keys, A), h.score(keys, B), h.score(keys, C), h.score(keys, D); a != 0 || b != 2 || c != 2 || d != 2 {
				t.Fatalf("scores A=%d B=%d C=%d D=%d; want 0, 2, 2, 2", a, b, c, d)
			}
			st := h.feed.Stats()
			if st.Replays != 1 || st.ReplayFailures != 0 || st.Resyncs != 0 || st.Gaps != 1 || st.LostBatches != 3 {
				t.Fatalf("stats %+v; want 1 gap of 3 filled by 1 replay, no resync", st)
			}
			if start := <-router.requests; start != n+1 {
				t.Fatalf("replay requested from %d; want %d", start, n+1)
			}
		})
	}
}

func TestFeed_FailedReplayFallsBackToTheWindowRule(t *testing.T) {
	keys := mustExactHasher(t, "0")
	eng := engine{h: keys}
	A := seqTokens(1, 8)
	tests := []struct {
		name      string
		replay    func(t *testing.T) string
		gap       uint64
		wantReset ResetReason
	}{
		{"buffer too short, small gap keeps", func(t *testing.T) string {
			return startRouter(t, true).addr
		}, 3, ResetNone},
		{"buffer too short, big gap clears", func(t *testing.T) string {
			return startRouter(t, false).addr
		}, 100, ResetReplayFailed},
		{"no router answers, small gap keeps after the timeout", func(t *testing.T) string {
			return freeAddr(t)
		}, 2, ResetNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pub := newTestPub(t, "")
			h := startFeed(t, FeedConfig{Endpoint: pub.addr, ReplayEndpoint: tt.replay(t), ReplayTimeout: 300 * time.Millisecond}, keys)
			n := h.join(t, pub, 0)
			pub.send(t, n, eng.store(t, A, 0, ExtraKeys{}))
			h.waitSeq(t, n)
			pub.send(t, n+tt.gap+1, Event{Kind: EventBlockRemoved, BlockHashes: []uint64{1}})
			u := h.waitSeq(t, n+tt.gap+1)
			if u.Reset != tt.wantReset {
				t.Fatalf("reset %v; want %v", u.Reset, tt.wantReset)
			}
			wantScore := 2
			if tt.wantReset != ResetNone {
				wantScore = 0
			}
			if got := h.score(keys, A); got != wantScore {
				t.Fatalf("score %d; want %d", got, wantScore)
			}
			if st := h.feed.Stats(); st.ReplayFailures == 0 {
				t.Fatalf("stats %+v; want a replay failure", st)
			}
		})
	}
}

func TestFeed_RejectsBadConfigAndBadEndpoints(t *testing.T) {
	if _, err := NewFeed(FeedConfig{PollInterval: -1}); !errors.Is(err, ErrConfig) ||
		!strings.Contains(err.Error(), "Endpoint") || !strings.Contains(err.Error(), "Sink") || !strings.Contains(err.Error(), "PollInterval") {
		t.Fatalf("got %v; want every problem", err)
	}
	f, err := NewFeed(FeedConfig{Endpoint: "bogus://nowhere", Sink: func(Update) {}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Run(context.Background()); err == nil {
		t.Fatal("Run with a bogus endpoint succeeded")
	}
	if err := f.Run(context.Background()); !errors.Is(err, ErrConfig) {
		t.Fatalf("second Run: %v; want ErrConfig", err)
	}
}

func TestParseReplayReply_AcceptsBothGenerations(t *testing.T) {
	tests := []struct {
		name     string
		give     [][]byte
		wantSeq  uint64
		wantEnd  bool
		wantErr  bool
		wantBody string
	}{
		{"older batch", [][]byte{{}, seq8(5), []byte("p")}, 5, false, false, "p"},
		{"newer batch", [][]byte{{}, []byte("topic"), seq8(6), []byte("p")}, 6, false, false, "p"},
		{"newer batch, empty topic", [][]byte{{}, {}, seq8(7), []byte("p")}, 7, false, false, "p"},
		{"older end marker", [][]byte{{}, seq8(replayEnd), {}}, replayEnd, true, false, ""},
		{"newer end marker", [][]byte{{}, {}, seq8(replayEnd), {}}, replayEnd, true, false, ""},
		{"empty payload ends too", [][]byte{{}, seq8(9), {}}, 9, true, false, ""},
		{"one frame", [][]byte{{}, seq8(1)}, 0, false, true, ""},
		{"bad seq", [][]byte{{}, []byte("x"), []byte("p")}, 0, false, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seq, body, end, err := parseReplayReply(tt.give)
			if (err != nil) != tt.wantErr || seq != tt.wantSeq || end != tt.wantEnd || string(body) != tt.wantBody {
				t.Fatalf("got %d %q %v %v; want %d %q %v err=%v", seq, body, end, err, tt.wantSeq, tt.wantBody, tt.wantEnd, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v; want ErrMalformed", err)
			}
		})
	}
}

func TestFeedEndpoint_AddsTheRankToThePort(t *testing.T) {
	if got := FeedEndpoint("10.0.0.1", 5557, 2); got != "tcp://10.0.0.1:5559" {
		t.Fatalf("got %s", got)
	}
	if got := FeedEndpoint("::1", 5557, 0); got != "tcp://[::1]:5557" {
		t.Fatalf("got %s", got)
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

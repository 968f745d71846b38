package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The KV family against TensorRT-LLM, which has no publisher: llbd drains
// POST /kv_cache_events on the worker's serving port. A hostile server
// listens there and answers each drain with what a broken or hostile
// engine could — malformed or oddly shaped JSON, absurd event ids, unknown
// events, huge bodies, slow, endless or failing answers — and, between
// cases, honestly in trtllm-serve's exact shape (inventory/testdata/trtllm):
// its answers are served in the order they were queued, then [] for every
// drain after. After every case a marker (one stored block at the next
// event_id) is queued behind it and waited for, so each
// case's effect on the feed's counters is measured alone; the oracle per
// case is on those deltas and on llbd's RSS during the case. After the
// family: a created event plus a stored run is mirrored exactly, llbd's RSS
// stayed bounded, it is alive, its log clean.

const (
	drainPort      = 8000
	drainBlockSize = 16
	drainWindow    = 4096
	// drainMaxBody is llbd's bound on one drain body
	// (inventory.DefaultDrainMaxBody).
	drainMaxBody = 64 << 20
	// drainTimeout is llbd's bound on one drain (inventory's
	// DefaultDrainTimeout).
	drainTimeout = 10 * time.Second
	// drainRSSBound bounds llbd's RSS growth during one case of a big
	// answer: three bodies at the bound (the body, its decoded events,
	// what the garbage collector has not yet given back).
	drainRSSBound = 3 * drainMaxBody
	// drainRecover bounds a recovery after a case that makes drains fail
	// (two failures mark the feed down; the back-off reaches 2 s).
	drainRecover = 20 * time.Second
)

// drainAction answers one drain. It may block until the request ends.
type drainAction func(w http.ResponseWriter, r *http.Request)

// drainServer is the hostile TensorRT-LLM serving port: GET /health, and
// POST /kv_cache_events answering the queued answers in order, then [] (an
// engine with nothing new). /elsewhere counts the requests a redirect led
// there.
type drainServer struct {
	mu        sync.Mutex
	script    []drainAction
	drains    int
	redirects int
	srv       *http.Server
	ln        net.Listener
}

func startDrainServer(addr string) (*drainServer, error) {
	var ln net.Listener
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s := &drainServer{ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		s.redirects++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("[]"))
	})
	mux.HandleFunc("POST /kv_cache_events", s.drain)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *drainServer) close() { _ = s.srv.Close() }

func (s *drainServer) drain(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.drains++
	if len(s.script) > 0 {
		a := s.script[0]
		s.script = s.script[1:]
		s.mu.Unlock()
		a(w, r)
		return
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("[]"))
}

// queue scripts the next drains' answers.
func (s *drainServer) queue(as ...drainAction) {
	s.mu.Lock()
	s.script = append(s.script, as...)
	s.mu.Unlock()
}

// offer queues an honest answer: events in trtllm-serve's array.
func (s *drainServer) offer(evs ...[]byte) { s.queue(body(drainBody(evs))) }

// state is how many queued answers are still waiting, and how many
// requests a redirect led to /elsewhere.
func (s *drainServer) state() (scripted, redirects int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script), s.redirects
}

// drainBody is trtllm-serve's answer: the events in a JSON array, no
// spaces (Starlette's JSONResponse).
func drainBody(evs [][]byte) []byte {
	n := 2
	for _, e := range evs {
		n += len(e) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, e := range evs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, ']')
}

// body answers a drain with b as application/json.
func body(b []byte) drainAction {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}
}

// trtBlock is one stored block as the family renders it.
type trtBlock struct {
	hash   uint64
	tokens []uint32
	extra  uint32 // token_extra_id of every token
}

// renderEvent renders one event as KVCacheEventSerializer does: event_id,
// data, window_size, then attention_dp_rank when rank >= 0.
func renderEvent(id string, data []byte, window int64, rank int64) []byte {
	b := make([]byte, 0, len(data)+80)
	b = append(b, `{"event_id":`...)
	b = append(b, id...)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	b = append(b, `,"window_size":`...)
	b = strconv.AppendInt(b, window, 10)
	if rank >= 0 {
		b = append(b, `,"attention_dp_rank":`...)
		b = strconv.AppendInt(b, rank, 10)
	}
	return append(b, '}')
}

// storedData is a stored event's data; parent nil is null.
func storedData(parent *uint64, blocks []trtBlock) []byte {
	b := make([]byte, 0, 64+len(blocks)*(120+16*56))
	b = append(b, `{"type":"stored","parent_hash":`...)
	if parent == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendUint(b, *parent, 10)
	}
	b = append(b, `,"blocks":[`...)
	for i, bl := range blocks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"stored_block","block_hash":`...)
		b = strconv.AppendUint(b, bl.hash, 10)
		b = append(b, `,"tokens":[`...)
		for j, t := range bl.tokens {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":"unique_token","token_id":`...)
			b = strconv.AppendUint(b, uint64(t), 10)
			b = append(b, `,"token_extra_id":`...)
			b = strconv.AppendUint(b, uint64(bl.extra), 10)
			b = append(b, '}')
		}
		b = append(b, `],"cache_level":0,"priority":35}`...)
	}
	return append(b, "]}"...)
}

// removedData is a removed event's data.
func removedData(hashes []uint64) []byte {
	b := make([]byte, 0, 40+len(hashes)*21)
	b = append(b, `{"type":"removed","block_hashes":[`...)
	for i, h := range hashes {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, h, 10)
	}
	return append(b, "]}"...)
}

// createdData is a created event's data.
func createdData() []byte {
	return []byte(`{"type":"created","num_blocks_per_cache_level":[4096,0]}`)
}

// drainFamily is one run of the KV family against TensorRT-LLM.
type drainFamily struct {
	cfg     *Config
	d       *daemon
	t       *Tally
	srv     *drainServer
	service string
	nextID  uint64 // rank 0's next event_id
	hashN   uint64 // engine block hashes drawn
	block   uint32 // the next fresh block's first token id
	// markers are the engine hashes of the blocks the markers stored
	// since the mirror was last cleared.
	markers []uint64
	// window is the attention window the engine's events carry.
	window int64
	// rankIDs are the next event_ids of the other attention-DP ranks.
	rankIDs   map[int64]uint64
	spent     map[string]int
	rssGrowth map[string]int64
	short     bool
}

// runKVDrain runs the TensorRT-LLM KV family within budget.
func runKVDrain(ctx context.Context, cfg *Config, n loopNet, budget time.Duration) (*Tally, error) {
	t := newTally(FamilyKV)
	srv, err := startDrainServer(net.JoinHostPort(n.ip(hostKVWorker), strconv.Itoa(drainPort)))
	if err != nil {
		return t, err
	}
	defer srv.close()
	f := &drainFamily{cfg: cfg, t: t, srv: srv, block: 1, window: drainWindow, rankIDs: map[int64]uint64{}, spent: map[string]int{}, rssGrowth: map[string]int64{}}
	d, err := startDaemon(ctx, cfg.LLBD, cfg.WorkDir, FamilyKV, nil, nil)
	if err != nil {
		return t, err
	}
	defer d.Kill()
	f.d = d
	vip := n.ip(hostKVVIP)
	rule, _ := json.Marshal(map[string]any{
		"serviceArguments": map[string]any{"externalIP": vip, "port": 2020, "protocol": "tcp", "mode": 4, "sel": 0, "name": "atk-kv",
			"kvEngineType": "trtllm", "kvExactMode": 3, "kvBlockSize": drainBlockSize, "kvWarmupSec": 0},
		"endpoints": []map[string]any{{"endpointIP": n.ip(hostKVWorker), "targetPort": drainPort, "weight": 1}},
	})
	if err := d.PostRule(ctx, rule); err != nil {
		return t, err
	}
	f.service = "tcp:" + vip + ":2020"
	// A fresh engine announces its cache first.
	f.srv.offer(renderEvent(f.id(), createdData(), f.window, -1))
	if _, err := f.sync(ctx, drainRecover); err != nil {
		return t, fmt.Errorf("the drain never mirrored a first event: %w", err)
	}
	base, err := d.usage(ctx)
	if err != nil {
		return t, err
	}
	t.note("baseline: %v; drain body bound %d MiB, drain timeout %v (llbd's defaults)", base, drainMaxBody>>20, drainTimeout)
	peak := watchRSS(ctx, d)
	deadline := time.Now().Add(attackSpan(budget, 10*time.Second))
	f.short = shortRun(budget)
	eachCase(ctx, cfg, FamilyKV, deadline, func(i int, rng *rand.Rand) {
		k := pickKind(rng, drainKinds, func(k drainKind) int { return k.weight })
		kind, o, repro := f.runCase(ctx, rng, k)
		t.add(i, kind, o, repro)
	})
	f.checkEnd(ctx, base, peak())
	return t, ctx.Err()
}

// id takes rank 0's next event_id.
func (f *drainFamily) id() string {
	s := strconv.FormatUint(f.nextID, 10)
	f.nextID++
	return s
}

// hash draws a fresh engine block hash (splitmix64 of a counter: spread
// over 64 bits, half of them past 2^63 as TensorRT-LLM's are).
func (f *drainFamily) hash() uint64 {
	f.hashN++
	z := f.hashN * 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// blocks are n fresh full blocks, a chain of their own token ids.
func (f *drainFamily) blocks(n int) []trtBlock {
	out := make([]trtBlock, n)
	for i := range out {
		toks := make([]uint32, drainBlockSize)
		for j := range toks {
			toks[j] = f.block + uint32(j)
		}
		f.block += drainBlockSize
		out[i] = trtBlock{hash: f.hash(), tokens: toks}
	}
	return out
}

// stored renders a stored event of n fresh blocks at the next event_id,
// without a parent; it returns the blocks' hashes too.
func (f *drainFamily) stored(n int) ([]byte, []uint64) {
	bs := f.blocks(n)
	hs := make([]uint64, n)
	for i, b := range bs {
		hs[i] = b.hash
	}
	return renderEvent(f.id(), storedData(nil, bs), f.window, -1), hs
}

// view reads the feed's state.
func (f *drainFamily) view(ctx context.Context) (feedView, error) {
	return readFeedView(ctx, f.d, f.service)
}

// sync offers a marker (one stored block at the next event_id) and waits
// until the feed reports it as its last event_id; it returns the view
// then. Answers queued before it are served first.
func (f *drainFamily) sync(ctx context.Context, within time.Duration) (feedView, error) {
	marker := f.nextID
	ev, hs := f.stored(1)
	f.markers = append(f.markers, hs[0])
	f.srv.offer(ev)
	// The feed records the event_id before the mirror applies the batch.
	v, ok, last := awaitMarker(ctx, f.view, marker, 20*time.Millisecond, time.Now().Add(within))
	switch {
	case ok:
		return v, last
	case ctx.Err() != nil:
		return feedView{}, ctx.Err()
	}
	left, _ := f.srv.state()
	return v, fmt.Errorf("marker event_id %d not mirrored within %v (last seen event_id %v, %d scripted answers unserved, %v)",
		marker, within, ptrStr(v.LastSeq), left, last)
}

// checkEnd is the family's closing oracle.
func (f *drainFamily) checkEnd(ctx context.Context, base usage, peakKB int64) {
	err := f.d.alive(ctx)
	f.t.check("alive", err == nil, fmt.Sprint(err), "")
	if err != nil {
		return
	}
	f.t.note("RSS peak %d MiB (baseline %d MiB)", peakKB>>10, base.rssKB>>10)
	for _, k := range drainKinds {
		if g, ok := f.rssGrowth[k.name]; ok {
			f.t.note("RSS growth during one %s case: up to %d MiB (bound %d MiB)", k.name, g>>20, k.rssBound>>20)
		}
	}
	f.t.check("rss_peak", (peakKB-base.rssKB)<<10 <= kvRSSBound,
		fmt.Sprintf("RSS peaked at %d MiB, %d MiB over the baseline (bound %d MiB)", peakKB>>10, (peakKB-base.rssKB)>>10, kvRSSBound>>20), "")
	_, redirects := f.srv.state()
	f.t.check("no_redirect_followed", redirects == 0,
		fmt.Sprintf("llbd followed %d redirects from /kv_cache_events to another path", redirects), "")
	// An honest engine again: after a created event and a stored run the
	// mirror holds exactly that run (and the marker).
	_, _ = f.sync(ctx, drainRecover)
	ev, want := f.stored(8)
	f.srv.offer(renderEvent(f.id(), createdData(), f.window, -1), ev)
	f.markers = nil
	v, err := f.sync(ctx, drainRecover)
	want = append(want, f.markers...)
	var got []uint64
	if err == nil {
		got, err = f.d.mirrorHashes(ctx, f.service)
	}
	slices.Sort(want)
	f.t.check("mirrors_valid_drain", err == nil && slices.Equal(got, want) && int(v.Blocks) == len(want),
		fmt.Sprintf("after a created event and a stored run of 8 blocks (+1 marker): mirror lists %d blocks %v, loxilb_pd_kv_blocks %v; want %v (%v)",
			len(got), got, v.Blocks, want, err), "")
	f.d.checkLog(f.t)
}

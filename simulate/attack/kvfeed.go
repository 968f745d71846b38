package attack

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/worker"
)

// The KV family: a fake ZMQ publisher bound where the rule's endpoint
// publishes KV events, sending what a broken or hostile engine could.
// After every case a marker batch (one valid block at the next sequence
// number) is sent and waited for, so each case's effect on the feed's
// counters is measured alone. Oracle per case: the counters account for
// what was refused (a malformed frame is one receive error, an unknown
// event one unknown event, a repeated sequence one duplicate, a frame over
// LLB_KV_MAX_MSG_BYTES one disconnect, ...) and the feed comes back within
// kvRecover. After the family: a cleared mirror plus a valid batch is
// mirrored exactly, llbd's RSS stayed bounded, it is alive, its log clean.

const (
	kvPort      = 5557
	kvBlockSize = 16
	// kvPageSize is the SGLang rule's page size (--page-size), unlike
	// vLLM's block size so a page of the wrong size is a real mismatch.
	kvPageSize = 32
	// kvRanks is the SGLang rule's kvDpRankCount: rank 0 is attacked,
	// rank 1 (at kvPort+1) publishes honestly beside it.
	kvRanks = 2
	kvSeed  = "0"
	// kvMaxMsg is llbd's default LLB_KV_MAX_MSG_BYTES.
	kvMaxMsg = 16 << 20
	// kvRecover bounds how long the feed may take to mirror the marker
	// after a case: a dropped connection is re-dialled after the
	// reconnect backoff (5 s at most, then once more).
	kvRecover = 20 * time.Second
	// kvRSSBound bounds llbd's RSS growth over its baseline.
	kvRSSBound = 512 << 20
)

// kvFamily is one run of the KV family.
type kvFamily struct {
	cfg     *Config
	d       *daemon
	t       *Tally
	pub     *zmq.Socket
	pubAddr string
	service string
	// keys derive the engine's block keys (vLLM's chain or SGLang's page
	// hash), bs is the block (page) size, layout the engine's event
	// encoding.
	keys   blockKeys
	bs     int
	layout inventory.Layout
	// peer is SGLang's honest rank 1 (nil for vLLM's single rank).
	peer  *kvPeer
	seq   uint64 // the next sequence number to publish
	block uint32 // the next fresh block's first token id
	// markers are the keys of the blocks the markers stored, in order.
	markers []uint64
	// spent counts the cases run by kind (expensive kinds have a cap);
	// rssGrowth is the most llbd's RSS grew (bytes) during one case of an
	// expensive kind.
	spent     map[string]int
	rssGrowth map[string]int64
	// short leaves the expensive kinds out (a short run).
	short bool
}

// runKV runs the family within budget.
func runKV(ctx context.Context, cfg *Config, n loopNet, budget time.Duration) (*Tally, error) {
	if cfg.dialect() == worker.DialectTRTLLM {
		return runKVDrain(ctx, cfg, n, budget) // no publisher: llbd drains HTTP
	}
	t := newTally(FamilyKV)
	f := &kvFamily{cfg: cfg, t: t, pubAddr: fmt.Sprintf("tcp://%s:%d", n.ip(hostKVWorker), kvPort), block: 1, spent: map[string]int{}, rssGrowth: map[string]int64{},
		bs: kvBlockSize, layout: inventory.LayoutMap}
	sa := map[string]any{"externalIP": n.ip(hostKVVIP), "port": 2020, "protocol": "tcp", "mode": 4, "sel": 0, "name": "atk-kv",
		"kvExactMode": 3, "kvZmqPort": kvPort, "kvBlockSize": kvBlockSize, "kvHashAlgo": "sha256_cbor", "kvNoneHashSeed": kvSeed, "kvWarmupSec": 0}
	var err error
	if cfg.dialect() == worker.DialectSGLang {
		f.bs, f.layout = kvPageSize, inventory.LayoutSGLang
		f.keys, err = inventory.NewSGLangHasher(kvPageSize)
		sa["kvBlockSize"], sa["kvDpRankCount"] = kvPageSize, kvRanks
		f.peer = &kvPeer{addr: fmt.Sprintf("tcp://%s:%d", n.ip(hostKVWorker), kvPort+1), seq: kvPeerSeq0}
	} else {
		f.keys, err = inventory.NewHasher(inventory.AlgoSHA256CBOR, kvBlockSize, kvSeed)
	}
	if err != nil {
		return t, err
	}
	wc := worker.DefaultConfig()
	wc.Name, wc.IP, wc.HTTPPort, wc.KVEvents = "kv-target", n.ip(hostKVWorker), 8000, false
	wc.Engine.Latency.TimeScale = 0.01
	w, err := worker.Start(wc)
	if err != nil {
		return t, err
	}
	defer w.Crash()
	if err := f.openPub(); err != nil {
		return t, err
	}
	defer func() { _ = f.pub.Close() }()
	if f.peer != nil {
		if err := f.peer.open(); err != nil {
			return t, err
		}
		defer func() { _ = f.peer.pub.Close() }()
	}
	d, err := startDaemon(ctx, cfg.LLBD, cfg.WorkDir, FamilyKV, nil, nil)
	if err != nil {
		return t, err
	}
	defer d.Kill()
	f.d = d
	vip := n.ip(hostKVVIP)
	rule, _ := json.Marshal(map[string]any{
		"serviceArguments": cfg.engineRule(sa),
		"endpoints":        []map[string]any{{"endpointIP": n.ip(hostKVWorker), "targetPort": 8000, "weight": 1}},
	})
	if err := d.PostRule(ctx, rule); err != nil {
		return t, err
	}
	f.service = "tcp:" + vip + ":2020"
	if _, err := f.sync(ctx, kvRecover); err != nil {
		return t, fmt.Errorf("the feed never mirrored a first batch: %w", err)
	}
	if f.peer != nil {
		if _, err := f.peerSync(ctx, kvRecover); err != nil {
			return t, fmt.Errorf("rank 1's feed never mirrored a first batch: %w", err)
		}
	}
	base, err := d.usage(ctx)
	if err != nil {
		return t, err
	}
	t.note("baseline: %v; LLB_KV_MAX_MSG_BYTES %d MiB (default)", base, kvMaxMsg>>20)
	peak := watchRSS(ctx, d)
	deadline := time.Now().Add(attackSpan(budget, 10*time.Second))
	f.short = shortRun(budget)
	eachCase(ctx, cfg, FamilyKV, deadline, func(i int, rng *rand.Rand) {
		k := pickKind(rng, f.kinds(), func(k kvKind) int { return k.weight })
		kind, o, repro := f.runCase(ctx, rng, k)
		t.add(i, kind, o, repro)
	})
	f.checkEnd(ctx, base, peak())
	return t, ctx.Err()
}

// openPub binds a fresh PUB socket (a publisher restart when one was
// open).
func (f *kvFamily) openPub() error {
	if f.pub != nil {
		_ = f.pub.Close()
	}
	s, err := bindPub(f.pubAddr)
	f.pub = s
	return err
}

// send publishes one multipart message.
func (f *kvFamily) send(parts ...[]byte) error {
	ps := make([]any, len(parts))
	for i, p := range parts {
		ps[i] = p
	}
	_, err := f.pub.SendMessage(ps...)
	return err
}

func seqFrame(s uint64) []byte { return binary.BigEndian.AppendUint64(nil, s) }

// blockKeys derives an engine's block keys from a run's tokens.
type blockKeys interface {
	AppendBlockKeys(dst []uint64, tokens []uint32, extra inventory.ExtraKeys) []uint64
}

// batch encodes events as rank 0's EventBatch in the engine's layout.
func (f *kvFamily) batch(events ...inventory.Event) []byte { return f.rankBatch(0, events...) }

// rankBatch encodes events as an EventBatch naming DP rank rank.
func (f *kvFamily) rankBatch(rank int64, events ...inventory.Event) []byte {
	b, err := inventory.AppendBatch(nil, &inventory.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: events, DPRank: rank, HasDPRank: true},
		inventory.EncodeOptions{Layout: f.layout})
	if err != nil {
		panic(fmt.Sprintf("encode a valid batch: %v", err)) // a bug of this package
	}
	return b
}

// stored is a BlockStored event of n fresh blocks (a chain from token 0
// of its own token ids, so its keys are what the engine would publish).
func (f *kvFamily) stored(n int) inventory.Event {
	tokens := make([]uint32, n*f.bs)
	for i := range tokens {
		tokens[i] = f.block + uint32(i)
	}
	f.block += uint32(len(tokens))
	return inventory.Event{Kind: inventory.EventBlockStored, BlockHashes: f.keys.AppendBlockKeys(nil, tokens, inventory.ExtraKeys{}),
		TokenIDs: tokens, BlockSize: f.bs}
}

// feedView is what the oracle reads of the feed: the inventory view's
// rank 0 and the feed's /metrics counters.
type feedView struct {
	Connected                             bool
	LastSeq                               *uint64
	RecvErrors, Batches, Events           uint64
	Gaps, Lost, Duplicates                uint64
	Restarts, Resyncs                     uint64
	Invalid, Unknown, Disconnects, Blocks float64
	// Ignored is llb_kv_events_ignored_total by reason.
	Ignored map[string]float64
	// Mismatched and Unverifiable count the stored runs the hash-contract
	// check found wrong or could not re-hash; ContractReason is the
	// guard's reason while it is raised.
	Mismatched, Unverifiable uint64
	ContractReason           string
}

// view reads the feed's state.
func (f *kvFamily) view(ctx context.Context) (feedView, error) {
	return readFeedView(ctx, f.d, f.service)
}

// readFeedView reads the state of endpoint 0's feed of rule service.
func readFeedView(ctx context.Context, d *daemon, service string) (feedView, error) {
	rv, err := d.inventoryRank(ctx, service, 0)
	if err != nil {
		return feedView{}, err
	}
	r := rv.Feed
	fv := feedView{Connected: r.Connected, LastSeq: r.LastSeq, RecvErrors: r.RecvErrors, Batches: r.Batches, Events: r.Events,
		Gaps: r.Gaps, Lost: r.LostBatches, Duplicates: r.Duplicates, Restarts: r.Restarts, Resyncs: r.Resyncs,
		Mismatched: rv.Contract.Mismatched, Unverifiable: rv.Contract.Unverifiable, ContractReason: rv.Contract.Reason}
	m, err := d.metrics(ctx)
	if err != nil {
		return fv, err
	}
	fv.Ignored = map[string]float64{}
	for _, s := range m {
		if s.name == "llb_kv_events_ignored_total" && strings.Contains(s.labels, `service="`+service+`"`) {
			if _, r, ok := strings.Cut(s.labels, `reason="`); ok {
				r, _, _ = strings.Cut(r, `"`)
				fv.Ignored[r] += s.value
			}
		}
	}
	label := `service="` + service + `"`
	fv.Invalid = m.sum("llb_kv_events_invalid_total", label)
	fv.Unknown = m.sum("llb_kv_events_unknown_total", label)
	fv.Disconnects = m.sum("llb_kv_subscriber_disconnects_total", label)
	fv.Blocks = m.sum("loxilb_pd_kv_blocks", label)
	return fv, nil
}

// awaitMarker polls the feed's view until its last sequence is marker —
// then it reads the view again after settle (a feed records the sequence
// before the mirror has applied the batch) and reports ok — or until stop
// passes or ctx ends; it returns the last view read and the last read's
// error.
func awaitMarker(ctx context.Context, view func(context.Context) (feedView, error), marker uint64, settle time.Duration, stop time.Time) (v feedView, ok bool, last error) {
	for ctx.Err() == nil {
		v, last = view(ctx)
		if last == nil && v.LastSeq != nil && *v.LastSeq == marker {
			time.Sleep(settle)
			v, last = view(ctx)
			return v, true, last
		}
		if time.Now().After(stop) {
			return v, false, last
		}
		time.Sleep(5 * time.Millisecond)
	}
	return v, false, ctx.Err()
}

// sync publishes a marker (one valid block at the next sequence number)
// and waits until the feed reports it as its last sequence, publishing a
// new marker every second (a marker sent while the connection was down is
// lost, as any message is). It returns the view then; f.markers grows by
// the markers sent.
func (f *kvFamily) sync(ctx context.Context, within time.Duration) (feedView, error) {
	deadline := time.Now().Add(within)
	for ctx.Err() == nil {
		marker := f.seq
		f.seq++
		ev := f.stored(1)
		f.markers = append(f.markers, ev.BlockHashes[0])
		if err := f.send([]byte{}, seqFrame(marker), f.batch(ev)); err != nil {
			return feedView{}, err
		}
		stop := time.Now().Add(time.Second)
		if deadline.Before(stop) {
			stop = deadline
		}
		v, ok, last := awaitMarker(ctx, f.view, marker, 10*time.Millisecond, stop)
		switch {
		case ok:
			return v, last
		case ctx.Err() == nil && time.Now().After(deadline):
			return v, fmt.Errorf("marker seq %d not mirrored within %v (last seen seq %v, %v)", marker, within, ptrStr(v.LastSeq), last)
		}
	}
	return feedView{}, ctx.Err()
}

func ptrStr(p *uint64) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatUint(*p, 10)
}

// checkEnd is the family's closing oracle.
func (f *kvFamily) checkEnd(ctx context.Context, base usage, peakKB int64) {
	err := f.d.alive(ctx)
	f.t.check("alive", err == nil, fmt.Sprint(err), "")
	if err != nil {
		return
	}
	f.t.note("RSS peak %d MiB (baseline %d MiB)", peakKB>>10, base.rssKB>>10)
	for _, k := range f.kinds() {
		if g, ok := f.rssGrowth[k.name]; ok {
			f.t.note("RSS growth during one %s case: up to %d MiB (bound %d MiB)", k.name, g>>20, k.rssBound>>20)
		}
	}
	f.t.check("rss_peak", (peakKB-base.rssKB)<<10 <= kvRSSBound,
		fmt.Sprintf("RSS peaked at %d MiB, %d MiB over the baseline (bound %d MiB)", peakKB>>10, (peakKB-base.rssKB)>>10, kvRSSBound>>20), "")
	// The mirror after AllBlocksCleared and one valid batch holds exactly
	// that batch (and, for SGLang, what rank 1 published since it too
	// cleared: the endpoint's mirror is the union of its ranks).
	var want []uint64
	if f.peer != nil {
		s := f.peer.seq
		f.peer.seq++
		_ = f.peerSend(s, f.rankBatch(1, inventory.Event{Kind: inventory.EventAllBlocksCleared}))
		from := len(f.peer.markers)
		_, err := f.peerSync(ctx, kvRecover)
		f.t.check("rank1_recovers", err == nil, fmt.Sprint(err), "")
		want = append(want, f.peer.markers[from:]...)
	}
	_, _ = f.sync(ctx, kvRecover)
	ev := f.stored(8)
	want = append(want, ev.BlockHashes...)
	s := f.seq
	f.seq++
	_ = f.send([]byte{}, seqFrame(s), f.batch(inventory.Event{Kind: inventory.EventAllBlocksCleared}, ev))
	from := len(f.markers)
	v, err := f.sync(ctx, kvRecover)
	want = append(want, f.markers[from:]...)
	var got []uint64
	if err == nil {
		got, err = f.d.mirrorHashes(ctx, f.service)
	}
	slices.Sort(want)
	f.t.check("mirrors_valid_batch", err == nil && slices.Equal(got, want) && int(v.Blocks) == len(want),
		fmt.Sprintf("after AllBlocksCleared and a batch of 8 blocks (+1 marker): mirror lists %d blocks %v, loxilb_pd_kv_blocks %v; want %v (%v)",
			len(got), got, v.Blocks, want, err), "")
	f.d.checkLog(f.t)
}

// mirrorHashes lists the block hashes llbd's mirror holds for endpoint 0
// of service, sorted.
func (d *daemon) mirrorHashes(ctx context.Context, service string) ([]uint64, error) {
	var inv struct {
		Blocks []struct {
			Hash uint64 `json:"hash_uint64"`
		} `json:"blocks"`
	}
	err := d.getJSON(ctx, "/netlox/v1/config/ai/kv/inventory?limit=10000&ep_idx=0&service_id="+url.QueryEscape(service), &inv)
	got := make([]uint64, 0, len(inv.Blocks))
	for _, b := range inv.Blocks {
		got = append(got, b.Hash)
	}
	slices.Sort(got)
	return got, err
}

// caseRSS watches llbd's RSS through one case when the case has a bound.
type caseRSS struct {
	rss0  int64
	peak  func() int64 // nil: not watched
	bound int64
}

func watchCaseRSS(pid int, bound int64) caseRSS {
	c := caseRSS{bound: bound}
	c.rss0, _ = procRSS(pid)
	if bound > 0 {
		c.peak = sampleRSS(pid, 20*time.Millisecond)
	}
	return c
}

// over ends the watch: it records the case's growth in growth[kind] and
// reports a defect when it passed the bound.
func (c caseRSS) over(kind string, growth map[string]int64) *Outcome {
	if c.peak == nil {
		return nil
	}
	grew := (c.peak() - c.rss0) << 10
	growth[kind] = max(growth[kind], grew)
	if grew <= c.bound {
		return nil
	}
	o := defect("llbd's RSS grew by %d MiB during the case (bound %d MiB)", grew>>20, c.bound>>20)
	return &o
}

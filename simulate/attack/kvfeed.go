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
	kvSeed      = "0"
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
	hasher  *inventory.Hasher
	seq     uint64 // the next sequence number to publish
	block   uint32 // the next fresh block's first token id
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
	h, err := inventory.NewHasher(inventory.AlgoSHA256CBOR, kvBlockSize, kvSeed)
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
	f := &kvFamily{cfg: cfg, t: t, hasher: h, pubAddr: fmt.Sprintf("tcp://%s:%d", n.ip(hostKVWorker), kvPort), block: 1, spent: map[string]int{}, rssGrowth: map[string]int64{}}
	if err := f.openPub(); err != nil {
		return t, err
	}
	defer func() { _ = f.pub.Close() }()
	d, err := startDaemon(ctx, cfg.LLBD, cfg.WorkDir, FamilyKV, nil, nil)
	if err != nil {
		return t, err
	}
	defer d.Kill()
	f.d = d
	vip := n.ip(hostKVVIP)
	rule, _ := json.Marshal(map[string]any{
		"serviceArguments": map[string]any{"externalIP": vip, "port": 2020, "protocol": "tcp", "mode": 4, "sel": 0, "name": "atk-kv",
			"kvExactMode": 3, "kvZmqPort": kvPort, "kvBlockSize": kvBlockSize, "kvHashAlgo": "sha256_cbor", "kvNoneHashSeed": kvSeed, "kvWarmupSec": 0},
		"endpoints": []map[string]any{{"endpointIP": n.ip(hostKVWorker), "targetPort": 8000, "weight": 1}},
	})
	if err := d.PostRule(ctx, rule); err != nil {
		return t, err
	}
	f.service = "tcp:" + vip + ":2020"
	if _, err := f.sync(ctx, kvRecover); err != nil {
		return t, fmt.Errorf("the feed never mirrored a first batch: %w", err)
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
		k := pickKind(rng, kvKinds, func(k kvKind) int { return k.weight })
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
	s, err := zmq.NewSocket(zmq.PUB)
	if err != nil {
		return err
	}
	_ = s.SetLinger(0)
	_ = s.SetSndhwm(0) // never drop on our side: what llbd buffers is what is measured
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err = s.Bind(f.pubAddr); err == nil {
			f.pub = s
			return nil
		}
		if time.Now().After(deadline) {
			_ = s.Close()
			return fmt.Errorf("bind %s: %w", f.pubAddr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
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

// batch encodes events as an EventBatch.
func batch(events ...inventory.Event) []byte {
	b, err := inventory.AppendBatch(nil, &inventory.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: events, DPRank: 0, HasDPRank: true},
		inventory.EncodeOptions{Layout: inventory.LayoutMap})
	if err != nil {
		panic(fmt.Sprintf("encode a valid batch: %v", err)) // a bug of this package
	}
	return b
}

// stored is a BlockStored event of n fresh blocks (a chain from token 0
// of its own token ids, so its keys are what the engine would publish).
func (f *kvFamily) stored(n int) inventory.Event {
	tokens := make([]uint32, n*kvBlockSize)
	for i := range tokens {
		tokens[i] = f.block + uint32(i)
	}
	f.block += uint32(len(tokens))
	return inventory.Event{Kind: inventory.EventBlockStored, BlockHashes: f.hasher.AppendBlockKeys(nil, tokens, inventory.ExtraKeys{}),
		TokenIDs: tokens, BlockSize: kvBlockSize}
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
		Gaps: r.Gaps, Lost: r.LostBatches, Duplicates: r.Duplicates, Restarts: r.Restarts, Resyncs: r.Resyncs}
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

// sync publishes a marker (one valid block at the next sequence number)
// and waits until the feed reports it as its last sequence, publishing a
// new marker every second (a marker sent while the connection was down is
// lost, as any message is). It returns the view then; f.markers grows by
// the markers sent.
func (f *kvFamily) sync(ctx context.Context, within time.Duration) (feedView, error) {
	deadline := time.Now().Add(within)
	var last error
	for ctx.Err() == nil {
		marker := f.seq
		f.seq++
		ev := f.stored(1)
		f.markers = append(f.markers, ev.BlockHashes[0])
		if err := f.send([]byte{}, seqFrame(marker), batch(ev)); err != nil {
			return feedView{}, err
		}
		resend := time.Now().Add(time.Second)
		for time.Now().Before(resend) {
			v, err := f.view(ctx)
			if err == nil && v.LastSeq != nil && *v.LastSeq == marker {
				// The feed records the sequence number before it decodes
				// and counts the batch: read again once that is done.
				time.Sleep(10 * time.Millisecond)
				return f.view(ctx)
			}
			last = err
			if time.Now().After(deadline) {
				return v, fmt.Errorf("marker seq %d not mirrored within %v (last seen seq %v, %v)", marker, within, ptrStr(v.LastSeq), last)
			}
			time.Sleep(5 * time.Millisecond)
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
	for _, k := range kvKinds {
		if g, ok := f.rssGrowth[k.name]; ok {
			f.t.note("RSS growth during one %s case: up to %d MiB (bound %d MiB)", k.name, g>>20, k.rssBound>>20)
		}
	}
	f.t.check("rss_peak", (peakKB-base.rssKB)<<10 <= kvRSSBound,
		fmt.Sprintf("RSS peaked at %d MiB, %d MiB over the baseline (bound %d MiB)", peakKB>>10, (peakKB-base.rssKB)>>10, kvRSSBound>>20), "")
	// The mirror after AllBlocksCleared and one valid batch holds exactly
	// that batch.
	_, _ = f.sync(ctx, kvRecover)
	ev := f.stored(8)
	want := slices.Clone(ev.BlockHashes)
	s := f.seq
	f.seq++
	_ = f.send([]byte{}, seqFrame(s), batch(inventory.Event{Kind: inventory.EventAllBlocksCleared}, ev))
	from := len(f.markers)
	v, err := f.sync(ctx, kvRecover)
	want = append(want, f.markers[from:]...)
	var inv struct {
		Blocks []struct {
			Hash uint64 `json:"hash_uint64"`
		} `json:"blocks"`
		Total int `json:"total"`
	}
	if err == nil {
		err = f.d.getJSON(ctx, "/netlox/v1/config/ai/kv/inventory?limit=10000&ep_idx=0&service_id="+url.QueryEscape(f.service), &inv)
	}
	var got []uint64
	for _, b := range inv.Blocks {
		got = append(got, b.Hash)
	}
	slices.Sort(got)
	slices.Sort(want)
	f.t.check("mirrors_valid_batch", err == nil && slices.Equal(got, want) && int(v.Blocks) == len(want),
		fmt.Sprintf("after AllBlocksCleared and a batch of 8 blocks (+1 marker): mirror lists %d blocks %v, loxilb_pd_kv_blocks %v; want %v (%v)",
			len(got), got, v.Blocks, want, err), "")
	f.d.checkLog(f.t)
}

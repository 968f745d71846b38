package attack

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// The KV cases. A case publishes, then runCase syncs on a marker and
// checks the counters' deltas (without the markers') against what the
// case expects llbd to have counted.

// kvKind is one case generator.
type kvKind struct {
	name   string
	weight int
	// limit caps how many cases of the kind a run takes (0: no cap); an
	// expensive kind past its cap is replaced by garbage.
	limit int
	// rank1 marks an SGLang case that acts on rank 1 (its oracle judges
	// rank 1's deltas; the others must leave rank 1 untouched).
	rank1 bool
	// rssBound, when set, bounds llbd's RSS growth during one case of the
	// kind (sampled every 20 ms from the publish to the marker).
	rssBound int64
	// send publishes the case and returns the oracle on the deltas and the
	// reproducer; within bounds the recovery (0: 5 s).
	send func(f *kvFamily, rng *rand.Rand) (check func(d delta) Outcome, repro string, within time.Duration)
}

// delta is what changed over a case, markers taken out.
type delta struct {
	recv, batches, events, gaps, lost, dups, restarts, resyncs int64
	invalid, unknown, disconnects                              int64
	markers                                                    int64
	// mismatched and unverifiable are the hash-contract check's counts;
	// contractReason its guard's reason after the case ("" when not
	// raised).
	mismatched, unverifiable int64
	contractReason           string
	// peer is SGLang's rank 1 over the case, its markers taken out (nil
	// for a single rank).
	peer *delta
	// blocks is the mirror's size after the case (its marker included),
	// grew how much it changed (the drain family's cases).
	blocks, grew int64
	// ignored is the change of llb_kv_events_ignored_total for a reason.
	ignored func(reason string) int64
	elapsed time.Duration
}

// deltaOf is what changed from v0 to v1 over a case that synced on
// markers markers.
func deltaOf(v0, v1 feedView, markers int64, elapsed time.Duration) delta {
	m := markers
	return delta{
		recv: int64(v1.RecvErrors - v0.RecvErrors), batches: int64(v1.Batches-v0.Batches) - m, events: int64(v1.Events-v0.Events) - m,
		gaps: int64(v1.Gaps - v0.Gaps), lost: int64(v1.Lost - v0.Lost), dups: int64(v1.Duplicates - v0.Duplicates),
		restarts: int64(v1.Restarts - v0.Restarts), resyncs: int64(v1.Resyncs - v0.Resyncs),
		invalid: int64(v1.Invalid - v0.Invalid), unknown: int64(v1.Unknown - v0.Unknown), disconnects: int64(v1.Disconnects - v0.Disconnects),
		blocks: int64(v1.Blocks), markers: m, elapsed: elapsed,
		mismatched: int64(v1.Mismatched - v0.Mismatched), unverifiable: int64(v1.Unverifiable - v0.Unverifiable), contractReason: v1.ContractReason,
		ignored: func(r string) int64 { return int64(v1.Ignored[r] - v0.Ignored[r]) },
	}
}

func (d delta) String() string {
	return fmt.Sprintf("recv_errors %+d, batches %+d, invalid %+d, unknown %+d, duplicates %+d, gaps %+d, lost %+d, restarts %+d, resyncs %+d, disconnects %+d, contract mismatched %+d, unverifiable %+d, guard %q",
		d.recv, d.batches, d.invalid, d.unknown, d.dups, d.gaps, d.lost, d.restarts, d.resyncs, d.disconnects, d.mismatched, d.unverifiable, d.contractReason)
}

// kvKinds are the case generators.
var kvKinds = []kvKind{
	{name: "frames", weight: 10, send: framesCase},
	{name: "garbage", weight: 25, send: garbageCase},
	{name: "unknown_event", weight: 8, send: unknownEventCase},
	{name: "invalid_event", weight: 14, send: invalidEventCase},
	{name: "duplicate_seq", weight: 8, send: duplicateCase},
	{name: "seq_gap", weight: 10, send: seqGapCase},
	{name: "seq_back", weight: 5, send: seqBackCase},
	{name: "topic", weight: 5, send: topicCase},
	{name: "flood", weight: 2, limit: 4, rssBound: 256 << 20, send: floodCase},
	{name: "huge_frame", weight: 2, limit: 3, rssBound: 64 << 20, send: hugeFrameCase},
	// LLB_KV_MAX_MSG_BYTES bounds a frame; libzmq assembles a multipart
	// message whole before llb sees it, so a message costs up to its frame
	// count times the limit. llb's SUB dials the engine's own address: only
	// the engine (or its host) sends, and llb trusts it this far — the
	// bound is what is documented (docs/security.md, "Trust boundary").
	{name: "many_big_frames", weight: 1, limit: 2, rssBound: (maxBigFrames+2)*kvMaxMsg + 64<<20, send: manyBigFramesCase},
	{name: "flood_big", weight: 1, limit: 2, rssBound: 256 << 20, send: floodBigCase},
	{name: "pub_restart", weight: 1, limit: 3, send: pubRestartCase},
}

// runCase runs one case: snapshot, publish, sync on a marker, judge. It
// returns the kind it ran (an expensive kind past its cap runs garbage).
func (f *kvFamily) runCase(ctx context.Context, rng *rand.Rand, k kvKind) (string, Outcome, func() string) {
	if k.limit > 0 && (f.short || f.spent[k.name] >= k.limit) {
		k = kvKinds[1]
	}
	f.spent[k.name]++
	v0, err := f.view(ctx)
	if err != nil {
		return k.name, defect("reading the feed before the case: %v", err), nil
	}
	var p0 feedView
	pm0 := 0
	if f.peer != nil {
		if p0, err = f.peerView(ctx); err != nil {
			return k.name, defect("reading rank 1's feed before the case: %v", err), nil
		}
		pm0 = len(f.peer.markers)
	}
	start := time.Now()
	m0 := len(f.markers)
	rss := watchCaseRSS(f.d.PID(), k.rssBound)
	check, repro, within := k.send(f, rng)
	if within == 0 {
		within = 5 * time.Second
	}
	v1, err := f.sync(ctx, within)
	reproF := func() string { return repro }
	if o := rss.over(k.name, f.rssGrowth); o != nil && err == nil {
		return k.name, *o, reproF
	}
	if err != nil {
		return k.name, defect("the feed did not come back after the case: %v", err), reproF
	}
	d := deltaOf(v0, v1, int64(len(f.markers)-m0), time.Since(start))
	if f.peer != nil {
		p1, err := f.peerSync(ctx, within)
		if err != nil {
			return k.name, defect("rank 1's feed did not come back after the case: %v", err), reproF
		}
		pd := deltaOf(p0, p1, int64(len(f.peer.markers)-pm0), d.elapsed)
		d.peer = &pd
		if !k.rank1 && (pd.recv != 0 || pd.batches != 0 || pd.dups != 0 || pd.gaps != 0 || pd.restarts != 0 || pd.resyncs != 0) {
			return k.name, defect("the honest rank 1 was disturbed by a case on rank 0 (rank 1: %s)", pd.String()), reproF
		}
	}
	o := check(d)
	if o.Verdict == Defective {
		o.Why += " (" + d.String() + ")"
	}
	return k.name, o, reproF
}

// mp encodes v as msgpack.
func mp(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("msgpack: %v", err)) // a bug of this package
	}
	return b
}

// next takes the next sequence number.
func (f *kvFamily) next() uint64 {
	s := f.seq
	f.seq++
	return s
}

// exactly is the verdict of a case whose counters must have moved just so.
func exactly(what string, ok bool) Outcome {
	if !ok {
		return defect("the counters do not account for %s", what)
	}
	return refused()
}

// framesCase sends messages that are not [topic, 8-byte seq, payload].
func framesCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	payload := f.batch(f.stored(1))
	seq := seqFrame(f.seq)
	shapes := []struct {
		name  string
		parts [][]byte
	}{
		{"one frame", [][]byte{payload}},
		{"two frames", [][]byte{{}, seq}},
		{"four frames", [][]byte{{}, seq, payload, payload}},
		{"ten frames", [][]byte{{}, seq, payload, {}, {}, {}, {}, {}, {}, {}}},
		{"a 7-byte seq", [][]byte{{}, seq[:7], payload}},
		{"a 9-byte seq", [][]byte{{}, append(seq, 0), payload}},
		{"an empty seq", [][]byte{{}, {}, payload}},
		{"three empty frames", [][]byte{{}, {}, {}}},
	}
	s := shapes[rng.IntN(len(shapes))]
	_ = f.send(s.parts...)
	return func(d delta) Outcome {
		return exactly("a malformed message (one receive error, nothing decoded)", d.recv == 1 && d.batches == 0 && d.dups == 0)
	}, fmt.Sprintf("publish %s: %s", s.name, quoteParts(s.parts)), 0
}

func quoteParts(parts [][]byte) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = quote(p, 200)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// garbageCase sends a well-framed message whose payload is not a batch,
// or barely one.
func garbageCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	valid := f.batch(f.stored(1 + rng.IntN(4)))
	var payload []byte
	what := ""
	switch v := rng.IntN(14); v {
	case 0:
		payload, what = make([]byte, 1+rng.IntN(4096)), "random bytes"
		for i := range payload {
			payload[i] = byte(rng.IntN(256))
		}
	case 1:
		payload, what = valid[:rng.IntN(len(valid))], "a truncated batch"
	case 2:
		payload, what = append([]byte(nil), valid...), "a batch with a flipped bit"
		payload[rng.IntN(len(payload))] ^= byte(1 << rng.IntN(8))
	case 3:
		payload, what = []byte{}, "an empty payload"
	case 4:
		payload, what = []byte{0xc0}, "msgpack nil"
	case 5:
		payload, what = append([]byte(strings.Repeat("\x91", 200000)), 0x01), "200 000 nested arrays"
	case 6:
		payload, what = []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}, "an array claiming 2^32-1 elements"
	case 7:
		payload, what = []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'a'}, "a map claiming 2^32-1 pairs"
	case 8:
		payload, what = append([]byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0xdb, 0xff, 0xff, 0xff, 0xff}, "abc"...), "a string claiming 4 GiB"
	case 9:
		payload, what = mp([]any{math.NaN(), []any{}, 0}), "a NaN timestamp and no events"
	case 10:
		payload, what = mp([]any{1.0, map[string]any{"a": 1}, 0}), "events as a map"
	case 11:
		payload, what = append(append([]byte(nil), valid...), 0x01), "a batch with a trailing byte"
	case 12:
		payload, what = mp(map[string]any{"ts": 1.0, "events": []any{}, "data_parallel_rank": "x"}), "a map envelope with a string rank"
	default:
		payload, what = []byte{0xc7, 0xff, 0x05, 'x'}, "an ext8 claiming 255 bytes"
	}
	seq := f.next()
	_ = f.send([]byte{}, seqFrame(seq), payload)
	return func(d delta) Outcome {
		switch {
		case d.recv == 1 && d.batches == 0:
			return refused() // unusable payload, counted
		case d.recv == 0 && d.batches == 1:
			if d.invalid > 0 || d.unknown > 0 {
				return refused()
			}
			return accepted() // still a batch (a flipped bit in a hash)
		}
		return defect("a garbage payload is neither one receive error nor one batch")
	}, fmt.Sprintf("publish seq %d, %s: %s", seq, what, quote(payload, 300)), 0
}

// unknownEventCase sends a batch with events of tags llb does not know.
func unknownEventCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	n := 1 + rng.IntN(5)
	events := make([]any, 0, n+1)
	for i := range n {
		if rng.IntN(2) == 0 {
			events = append(events, []any{fmt.Sprintf("Mystery%d", i), 1, "x"})
		} else {
			events = append(events, map[string]any{"type": "KVCacheSummoned", "block_hashes": []any{1, 2}})
		}
	}
	payload := mp([]any{1.0, events, 0})
	seq := f.next()
	_ = f.send([]byte{}, seqFrame(seq), payload)
	return func(d delta) Outcome {
		return exactly(fmt.Sprintf("%d unknown events in one batch", n), d.unknown == int64(n) && d.batches == 1 && d.recv == 0)
	}, fmt.Sprintf("publish seq %d: %s", seq, quote(payload, 300)), 0
}

// invalidEventCase sends BlockStored/BlockRemoved events with bad fields,
// beside one valid event.
func invalidEventCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	bad := []any{
		[]any{"BlockStored", "not-a-list", nil, []any{1}, 16},
		[]any{"BlockStored", []any{"str"}, nil, []any{1}, 16},
		[]any{"BlockStored", []any{[]byte{1, 2, 3}}, nil, []any{1}, 16},
		[]any{"BlockStored", []any{1}, nil, []any{-1}, 16},
		[]any{"BlockStored", []any{1}, map[string]any{"p": 1}, []any{1}, 16},
		[]any{"BlockStored", []any{1}, nil, "tokens", 16},
		[]any{"BlockStored"},
		[]any{"BlockRemoved", 5},
		[]any{"BlockRemoved", []any{1.5}},
		map[string]any{"type": "BlockStored", "block_hashes": []any{1}, "token_ids": []any{uint64(1) << 40}, "block_size": 16},
		map[string]any{"type": "BlockStored", "block_hashes": []any{1}, "block_size": "sixteen"},
		[]any{},
		"BlockStored",
	}
	b := bad[rng.IntN(len(bad))]
	good := f.stored(1)
	payload := mp([]any{1.0, []any{b, []any{"BlockStored", good.BlockHashes, nil, good.TokenIDs, f.bs, nil}}, 0})
	seq := f.next()
	_ = f.send([]byte{}, seqFrame(seq), payload)
	return func(d delta) Outcome {
		switch {
		case d.recv == 1 && d.batches == 0:
			return refused() // the envelope itself was refused
		case d.batches == 1 && d.invalid >= 1:
			return refused()
		case d.batches == 1 && d.events == 2:
			return defect("a bad event was decoded as a valid one")
		}
		return defect("a batch with a bad event is neither one invalid event nor one receive error")
	}, fmt.Sprintf("publish seq %d: %s", seq, quote(payload, 400)), 0
}

// duplicateCase re-sends the last sequence number.
func duplicateCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	seq := f.seq - 1
	payload := f.batch(f.stored(1))
	_ = f.send([]byte{}, seqFrame(seq), payload)
	return func(d delta) Outcome {
		return exactly("a repeated sequence number (one duplicate, nothing decoded)", d.dups == 1 && d.batches == 0 && d.recv == 0)
	}, fmt.Sprintf("publish seq %d again (the last one seen)", seq), 0
}

// seqGapCase jumps the sequence forward.
func seqGapCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	jumps := []uint64{2, 10, 64, 65, 1000, 1 << 32, 1 << 62}
	j := jumps[rng.IntN(len(jumps))]
	if f.seq > math.MaxUint64-j { // a wrap is a sequence going back, not a gap
		j = 2
	}
	seq := f.seq + j - 1
	f.seq = seq + 1
	_ = f.send([]byte{}, seqFrame(seq), f.batch(f.stored(1)))
	missing := j - 1
	return func(d delta) Outcome {
		plausible := int64(64 + 10000*(d.elapsed.Seconds()+1))
		switch {
		case d.gaps != 1:
			return defect("a jump of %d: %d gaps counted (want 1)", j, d.gaps)
		case d.lost < 0 || uint64(d.lost) > missing || d.lost > plausible:
			return defect("a jump of %d: %d lost batches counted (at most %d missing, %d plausible)", j, d.lost, missing, plausible)
		case missing > 64 && d.resyncs < 1:
			return defect("a jump of %d past the 64-batch window did not resync the mirror", j)
		}
		return refused()
	}, fmt.Sprintf("publish seq %d (a jump of %d)", seq, j), 0
}

// seqBackCase sends a sequence number lower than the last: a publisher
// restart.
func seqBackCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	var seq uint64
	if f.seq > 2 && rng.IntN(2) == 0 {
		seq = rng.Uint64N(f.seq - 2)
	}
	f.seq = seq + 1
	_ = f.send([]byte{}, seqFrame(seq), f.batch(f.stored(1)))
	return func(d delta) Outcome {
		return exactly("a sequence going back (one restart, a resync)", d.restarts == 1 && d.resyncs >= 1 && d.batches == 1)
	}, fmt.Sprintf("publish seq %d (back from %d)", seq, seq+1), 0
}

// topicCase sends valid batches under odd topics (llb subscribes to all).
func topicCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	topics := [][]byte{[]byte("kv@x"), {0, 1, 2, 0xff}, []byte(strings.Repeat("t", 1<<20)), []byte("\r\n")}
	t := topics[rng.IntN(len(topics))]
	seq := f.next()
	_ = f.send(t, seqFrame(seq), f.batch(f.stored(1)))
	return func(d delta) Outcome {
		if d.batches != 1 || d.recv != 0 {
			return defect("a valid batch under topic %s was not decoded", quote(t, 40))
		}
		return accepted()
	}, fmt.Sprintf("publish seq %d under topic %s", seq, quote(t, 100)), 0
}

// floodCase sends valid batches back to back, past the receive HWM.
func floodCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	n := 20000 + rng.IntN(20000)
	for range n {
		_ = f.send([]byte{}, seqFrame(f.next()), f.batch(f.stored(1)))
	}
	return func(d delta) Outcome {
		if d.batches > int64(n) || d.batches+d.lost < 0 || d.recv != 0 {
			return defect("a flood of %d batches: %d decoded", n, d.batches)
		}
		return accepted()
	}, fmt.Sprintf("publish %d one-block batches back to back", n), 10 * time.Second
}

// hugeFrameCase sends one frame over LLB_KV_MAX_MSG_BYTES: libzmq drops
// the connection before allocating it, llb counts a disconnect and
// re-dials.
func hugeFrameCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	size := kvMaxMsg + 1 + rng.IntN(8<<20)
	seq := f.next()
	_ = f.send([]byte{}, seqFrame(seq), make([]byte, size))
	return func(d delta) Outcome {
		if d.disconnects < 1 {
			return defect("a %d-byte frame over the %d-byte limit: no disconnect counted", size, kvMaxMsg)
		}
		return refused()
	}, fmt.Sprintf("publish seq %d with a %d-byte payload (limit %d)", seq, size, kvMaxMsg), kvRecover
}

// maxBigFrames is the most frames manyBigFramesCase sends in one message.
const maxBigFrames = 15

// manyBigFramesCase sends one message of many frames, each under the
// limit: ZMQ_MAXMSGSIZE bounds a frame, not a message.
func manyBigFramesCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	n := maxBigFrames - rng.IntN(8)
	frame := make([]byte, kvMaxMsg-1024)
	parts := [][]byte{{}, seqFrame(f.seq)}
	for range n {
		parts = append(parts, frame)
	}
	_ = f.send(parts...)
	return func(d delta) Outcome {
		return exactly("a message of many frames (one receive error)", d.recv == 1 || d.disconnects >= 1)
	}, fmt.Sprintf("publish one message: topic, seq, then %d frames of %d bytes (%d MiB in all)", n, len(frame), n*len(frame)>>20), kvRecover
}

// floodBigCase sends big (under the limit) garbage payloads back to back.
func floodBigCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	n := 24 + rng.IntN(24)
	payload := make([]byte, 12<<20)
	payload[0] = 0x93
	for range n {
		_ = f.send([]byte{}, seqFrame(f.next()), payload)
	}
	return func(d delta) Outcome {
		if d.recv < 1 || d.recv > int64(n) {
			return defect("%d garbage payloads of 12 MiB: %d receive errors", n, d.recv)
		}
		return refused()
	}, fmt.Sprintf("publish %d payloads of 12 MiB of garbage back to back", n), kvRecover
}

// restartFloor is the least next sequence number a publisher restarted
// from 0 must have reached for the restart to be seen as one.
const restartFloor = 2 * uint64(kvRecover/time.Second)

// pubRestartCase closes the publisher and binds a new one whose sequence
// starts at 0, as a restarted engine's does.
func pubRestartCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	// A restart from 0 shows as one only while the last sequence is past
	// the markers lost to the reconnect (up to one a second): after an
	// earlier restart it may not be, so the publisher goes on first.
	for f.seq < restartFloor {
		_ = f.send([]byte{}, seqFrame(f.next()), f.batch(f.stored(1)))
	}
	if _, err := f.sync(context.Background(), kvRecover); err != nil {
		return func(delta) Outcome { return defect("the feed did not mirror the batches before the restart: %v", err) }, "", 0
	}
	if err := f.openPub(); err != nil {
		return func(delta) Outcome { return defect("rebinding the publisher: %v", err) }, "", 0
	}
	f.seq = 0
	return func(d delta) Outcome {
		if d.restarts < 1 && d.gaps < 1 {
			return defect("a publisher restarted at seq 0: no restart counted")
		}
		return accepted()
	}, "close the publisher, bind a new one, publish from seq 0", kvRecover
}

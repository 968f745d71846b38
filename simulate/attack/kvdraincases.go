package attack

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The TensorRT-LLM KV cases. A case scripts the next drains' answers,
// then runCase syncs on a marker and checks the counters' deltas (without
// the marker's) against what the case expects llbd to have counted.

// drainKind is one case generator.
type drainKind struct {
	name   string
	weight int
	// limit caps how many cases of the kind a run takes (0: no cap); an
	// expensive kind past its cap is replaced by malformed.
	limit int
	// rssBound, when set, bounds llbd's RSS growth during one case of the
	// kind.
	rssBound int64
	// send scripts the case and returns the oracle on the deltas and the
	// reproducer; within bounds the recovery (0: 5 s).
	send func(f *drainFamily, rng *rand.Rand) (check func(d delta) Outcome, repro string, within time.Duration)
}

// drainKinds are the case generators.
var drainKinds = []drainKind{
	{name: "malformed", weight: 20, send: drainMalformedCase},
	{name: "wrong_shape", weight: 18, send: drainWrongShapeCase},
	{name: "unknown_type", weight: 6, send: drainUnknownTypeCase},
	{name: "duplicate_id", weight: 6, send: drainDuplicateCase},
	{name: "id_gap", weight: 8, send: drainGapCase},
	{name: "id_back", weight: 5, send: drainBackCase},
	{name: "id_max", weight: 2, send: drainMaxIDCase},
	{name: "removed_unknown", weight: 5, send: drainRemovedUnknownCase},
	{name: "orphan_parent", weight: 5, send: drainOrphanCase},
	{name: "parent_cycle", weight: 5, send: drainCycleCase},
	{name: "created_mid", weight: 4, send: drainCreatedCase},
	{name: "ranks", weight: 4, send: drainRanksCase},
	{name: "window", weight: 3, send: drainWindowCase},
	{name: "window_restart", weight: 2, send: drainWindowRestartCase},
	{name: "status", weight: 6, send: drainStatusCase},
	{name: "content_type", weight: 3, send: drainContentTypeCase},
	{name: "conn_cut", weight: 4, send: drainCutCase},
	{name: "deep_nesting", weight: 3, send: drainDeepCase},
	// A huge run is decoded and applied (the mirror grows by 50 000
	// blocks): a body more than a dropped answer.
	{name: "huge_tokens", weight: 2, limit: 3, rssBound: drainRSSBound + drainMaxBody, send: drainHugeTokensCase},
	{name: "huge_array", weight: 2, limit: 4, rssBound: drainRSSBound, send: drainHugeArrayCase},
	{name: "over_body", weight: 1, limit: 2, rssBound: drainRSSBound, send: drainOverBodyCase},
	{name: "endless", weight: 1, limit: 3, rssBound: drainRSSBound, send: drainEndlessCase},
	{name: "gzip_bomb", weight: 1, limit: 2, rssBound: drainRSSBound, send: drainGzipCase},
	{name: "flood", weight: 1, limit: 2, rssBound: drainRSSBound, send: drainFloodCase},
	{name: "slow", weight: 2, limit: 4, send: drainSlowCase},
}

// runCase runs one case: snapshot, script, sync on a marker, judge. It
// returns the kind it ran (an expensive kind past its cap runs
// malformed).
func (f *drainFamily) runCase(ctx context.Context, rng *rand.Rand, k drainKind) (string, Outcome, func() string) {
	if k.limit > 0 && (f.short || f.spent[k.name] >= k.limit) {
		k = drainKinds[0]
	}
	f.spent[k.name]++
	v0, err := f.view(ctx)
	if err != nil {
		return k.name, defect("reading the feed before the case: %v", err), nil
	}
	start := time.Now()
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
		return k.name, defect("the drain did not come back after the case: %v", err), reproF
	}
	d := deltaOf(v0, v1, 1, time.Since(start))
	d.grew = d.blocks - int64(v0.Blocks)
	o := check(d)
	if o.Verdict == Defective {
		o.Why += fmt.Sprintf(" (%v, mirror %+d blocks to %d)", d, d.grew, d.blocks)
	}
	return k.name, o, reproF
}

// counted reports whether a case left a trace in the counters that say
// input was refused or skipped.
func counted(d delta) bool {
	if d.recv > 0 || d.invalid > 0 || d.unknown > 0 {
		return true
	}
	for _, r := range []string{"invalid", "block_size", "window", "orphan_parent", "token_count", "multimodal", "cache_salt"} {
		if d.ignored(r) > 0 {
			return true
		}
	}
	return false
}

// lostShown is the oracle of a drain whose n events (at event_ids already
// taken) were dropped whole: one receive error, nothing applied, and the
// marker's event_id shows the n lost as one gap.
func lostShown(what string, n int) func(d delta) Outcome {
	return func(d delta) Outcome {
		switch {
		case d.recv < 1:
			return defect("%s: no receive error counted", what)
		case d.batches != 0:
			return defect("%s: %d batches applied from a dropped drain", what, d.batches)
		case n > 0 && (d.gaps != 1 || d.lost != int64(n)):
			return defect("%s: its %d events are gone from the engine, but the next event_id showed %d gaps and %d lost (want 1 gap of %d)", what, n, d.gaps, d.lost, n)
		case n == 0 && d.gaps != 0:
			return defect("%s: a gap counted though no event_id was lost", what)
		}
		return refused()
	}
}

// drainMalformedCase answers with a body that is not a drain (or barely
// one).
func drainMalformedCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	n := 1 + rng.IntN(4)
	evs := make([][]byte, n)
	for i := range evs {
		evs[i], _ = f.stored(1 + rng.IntN(3))
	}
	valid := drainBody(evs)
	var b []byte
	what := ""
	lost := n // the events' ids are taken: a dropped body shows as a gap
	lenient := false
	switch rng.IntN(14) {
	case 0:
		b, what = make([]byte, 1+rng.IntN(4096)), "random bytes"
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
	case 1:
		b, what = valid[:rng.IntN(len(valid))], "a truncated drain"
	case 2:
		b, what, lenient = bytes.Clone(valid), "a drain with a flipped bit", true
		b[rng.IntN(len(b))] ^= byte(1 << rng.IntN(8))
	case 3:
		b, what = []byte{}, "an empty body"
	case 4:
		b, what = []byte(`{}`), "an object, not an array"
	case 5:
		b, what = []byte(`"[]"`), "a string"
	case 6:
		b, what, lenient = []byte(`[1,2,3]`), "an array of numbers", true
	case 7:
		b, what = append(bytes.Clone(valid), "xyz"...), "a drain with trailing garbage"
	case 8:
		b, what = append([]byte("\xef\xbb\xbf"), valid...), "a drain after a byte-order mark"
	case 9:
		b, what = append([]byte(`{"events":`), append(bytes.Clone(valid), '}')...), "the events wrapped in an object"
	case 10:
		b, what = append(bytes.Clone(valid), "[]"...), "two arrays"
	case 11:
		b, what = []byte(`[null,null]`), "an array of nulls"
		lenient = true
	case 12:
		b, what = bytes.ReplaceAll(bytes.Clone(valid), []byte(`"`), []byte(`'`)), "single quotes"
	default:
		b, what = []byte(`[{"event_id":`+strconv.FormatUint(f.nextID, 10)+`,"data":{"type":"stored","blocks":[{"block_hash":1,"tokens":[{"token_id":1`), "an event cut in a token"
	}
	f.srv.queue(body(b))
	repro := fmt.Sprintf("answer one drain with %s: %s", what, quote(b, 300))
	if lenient {
		return func(d delta) Outcome {
			if !counted(d) && d.events == 0 && d.gaps == 0 {
				return defect("%s: nothing applied and nothing counted", what)
			}
			return refused()
		}, repro, 0
	}
	return lostShown(what, lost), repro, 0
}

// drainWrongShapeCase answers with one event of a wrong shape beside a
// valid one.
func drainWrongShapeCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	id := strconv.FormatUint(f.nextID, 10)
	blk := `{"type":"stored_block","block_hash":12345,"tokens":[` + strings.TrimSuffix(strings.Repeat(`{"type":"unique_token","token_id":7,"token_extra_id":0},`, drainBlockSize), ",") + `],"cache_level":0,"priority":35}`
	stored := func(blocks string) string { return `{"type":"stored","parent_hash":null,"blocks":[` + blocks + `]}` }
	tok := func(t string) string {
		return `{"type":"stored_block","block_hash":12345,"tokens":[` + strings.Repeat(`{"type":"unique_token","token_id":7,"token_extra_id":0},`, drainBlockSize-1) + t + `],"cache_level":0,"priority":35}`
	}
	ev := func(id, data string) string { return `{"event_id":` + id + `,"data":` + data + `,"window_size":4096}` }
	bad := []struct {
		what, ev string
		takesID  bool
	}{
		{"a negative event_id", ev("-1", stored(blk)), false},
		{"a fractional event_id", ev("1.5", stored(blk)), false},
		{"an exponent event_id", ev("1e3", stored(blk)), false},
		{"a null event_id", ev("null", stored(blk)), false},
		{"a string event_id", ev(`"abc"`, stored(blk)), false},
		{"an object event_id", ev(`{}`, stored(blk)), false},
		{"an array event_id", ev(`[1]`, stored(blk)), false},
		{"an event_id of 2^64", ev("18446744073709551616", stored(blk)), false},
		{"an event_id of 1e400", ev("1e400", stored(blk)), false},
		{"a boolean event_id", ev("true", stored(blk)), false},
		{"no event_id", `{"data":` + stored(blk) + `,"window_size":4096}`, false},
		{"data as an array", ev(id, `[]`), true},
		{"data as a string", ev(id, `"stored"`), true},
		{"data null", ev(id, `null`), true},
		{"no data", `{"event_id":` + id + `,"window_size":4096}`, true},
		{"blocks as an object", ev(id, `{"type":"stored","parent_hash":null,"blocks":{}}`), true},
		{"blocks of numbers", ev(id, `{"type":"stored","parent_hash":null,"blocks":[1,2]}`), true},
		{"tokens as an object", ev(id, stored(`{"type":"stored_block","block_hash":1,"tokens":{}}`)), true},
		{"tokens of numbers", ev(id, stored(`{"type":"stored_block","block_hash":1,"tokens":[1,2,3]}`)), true},
		{"a negative token_id", ev(id, stored(tok(`{"type":"unique_token","token_id":-1,"token_extra_id":0}`))), true},
		{"a token_id of 2^32", ev(id, stored(tok(`{"type":"unique_token","token_id":4294967296,"token_extra_id":0}`))), true},
		{"a token_id of 2^64", ev(id, stored(tok(`{"type":"unique_token","token_id":18446744073709551616,"token_extra_id":0}`))), true},
		{"a fractional token_id", ev(id, stored(tok(`{"type":"unique_token","token_id":1.5,"token_extra_id":0}`))), true},
		{"a string token_id", ev(id, stored(tok(`{"type":"unique_token","token_id":"7","token_extra_id":0}`))), true},
		{"a fractional block_hash", ev(id, stored(`{"type":"stored_block","block_hash":1.5,"tokens":[]}`)), true},
		{"a boolean block_hash", ev(id, stored(`{"type":"stored_block","block_hash":true,"tokens":[]}`)), true},
		{"an object block_hash", ev(id, stored(`{"type":"stored_block","block_hash":{},"tokens":[]}`)), true},
		{"a null block_hash", ev(id, stored(`{"type":"stored_block","block_hash":null,"tokens":[]}`)), true},
		{"a block_hash of 2^64", ev(id, stored(`{"type":"stored_block","block_hash":18446744073709551616,"tokens":[]}`)), true},
		{"an empty string block_hash", ev(id, stored(`{"type":"stored_block","block_hash":"","tokens":[]}`)), true},
		{"a removed list of objects", ev(id, `{"type":"removed","block_hashes":[{},[]]}`), true},
		{"a removed list as a string", ev(id, `{"type":"removed","block_hashes":"1,2"}`), true},
		{"a string parent_hash", ev(id, `{"type":"stored","parent_hash":"","blocks":[`+blk+`]}`), true},
		{"a parent_hash of 1e400", ev(id, `{"type":"stored","parent_hash":1e400,"blocks":[`+blk+`]}`), true},
		{"a NaN literal", ev(id, `{"type":"stored","parent_hash":NaN,"blocks":[`+blk+`]}`), true},
		{"an Infinity token", ev(id, stored(tok(`{"type":"unique_token","token_id":Infinity,"token_extra_id":0}`))), true},
		{"a hexadecimal event_id", ev("0x10", stored(blk)), false},
		{"an attention_dp_rank of -1", `{"event_id":0,"data":` + stored(blk) + `,"window_size":4096,"attention_dp_rank":-1}`, false},
		{"an attention_dp_rank of 64", `{"event_id":0,"data":` + stored(blk) + `,"window_size":4096,"attention_dp_rank":64}`, false},
		{"an attention_dp_rank of 2^40", `{"event_id":0,"data":` + stored(blk) + `,"window_size":4096,"attention_dp_rank":1099511627776}`, false},
		{"a string attention_dp_rank", `{"event_id":0,"data":` + stored(blk) + `,"window_size":4096,"attention_dp_rank":"1"}`, false},
		{"a string window_size", ev(id, stored(blk))[:len(ev(id, stored(blk)))-len(`4096}`)] + `"4096"}`, true},
		{"a fractional window_size", ev(id, stored(blk))[:len(ev(id, stored(blk)))-len(`4096}`)] + `1.5}`, true},
	}
	c := bad[rng.IntN(len(bad))]
	if c.takesID {
		f.nextID++
	}
	good, _ := f.stored(1)
	b := []byte("[" + c.ev + "," + string(good) + "]")
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		switch {
		case d.recv >= 1 && d.batches == 0:
			// The drain was dropped whole: the valid event's id (and the
			// bad one's) show as lost.
			if d.gaps != 1 {
				return defect("%s: the drain was dropped but the next event_id showed %d gaps (want 1)", c.what, d.gaps)
			}
			return refused()
		case !counted(d):
			return defect("%s was applied as a valid event: nothing counted", c.what)
		case d.events < 1:
			return defect("%s: the valid event beside it was not applied", c.what)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with %s beside a valid event: %s", c.what, quote(b, 600)), 0
}

// drainUnknownTypeCase answers with events of types llb does not know.
func drainUnknownTypeCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	types := []string{`"summoned"`, `""`, `"STORED"`, `"stored "`, `"created\u0000"`, `"` + strings.Repeat("x", 100000) + `"`}
	n := 1 + rng.IntN(4)
	evs := make([][]byte, n)
	for i := range evs {
		evs[i] = renderEvent(f.id(), []byte(`{"type":`+types[rng.IntN(len(types))]+`,"block_hashes":[1,2]}`), f.window, -1)
	}
	b := drainBody(evs)
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		if d.unknown != int64(n) || d.recv != 0 || d.events != int64(n) {
			return defect("%d events of unknown types: %d unknown counted", n, d.unknown)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with %d events of unknown types: %s", n, quote(b, 400)), 0
}

// drainDuplicateCase repeats the last event_id with a new block, in its
// own drain or twice in one.
func drainDuplicateCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	last := strconv.FormatUint(f.nextID-1, 10)
	blocks := f.blocks(1)
	ev := renderEvent(last, storedData(nil, blocks), f.window, -1)
	what := "the last event_id again"
	b := drainBody([][]byte{ev})
	if rng.IntN(2) == 0 {
		id := f.id()
		b = drainBody([][]byte{renderEvent(id, removedData([]uint64{1}), f.window, -1), renderEvent(id, storedData(nil, blocks), f.window, -1)})
		what = "one event_id twice in a drain"
	}
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		if d.dups != 1 || d.grew != 1 {
			return defect("%s: %d duplicates counted, the mirror grew by %d (want 1 duplicate, only the marker's block)", what, d.dups, d.grew)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with %s: %s", what, quote(b, 400)), 0
}

// drainGapCase jumps event_id forward (events another consumer took, or
// the ring dropped).
func drainGapCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	jumps := []uint64{2, 10, 64, 65, 1000, 1 << 32, 1 << 62}
	j := jumps[rng.IntN(len(jumps))]
	if f.nextID > math.MaxUint64/2 {
		j = 2
	}
	f.nextID += j - 1
	ev, _ := f.stored(1)
	b := drainBody([][]byte{ev})
	f.srv.queue(body(b))
	missing := j - 1
	return func(d delta) Outcome {
		switch {
		case d.gaps != 1:
			return defect("a jump of %d: %d gaps counted (want 1)", j, d.gaps)
		case d.lost < 1 || uint64(d.lost) > missing:
			return defect("a jump of %d: %d lost events counted (%d missing)", j, d.lost, missing)
		case missing > 64 && d.resyncs < 1:
			return defect("a jump of %d past the 64-event window did not clear the mirror", j)
		case missing > 64 && d.blocks != 2:
			return defect("a jump of %d cleared the mirror, which now holds %d blocks (want 2: the event's and the marker's)", j, d.blocks)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with a jump of %d in event_id: %s", j, quote(b, 200)), 0
}

// drainBackCase sends an event_id lower than the last: a restarted engine.
func drainBackCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	var id uint64
	if f.nextID > 2 && rng.IntN(2) == 0 {
		id = rng.Uint64N(f.nextID - 2)
	}
	f.nextID = id
	ev, _ := f.stored(1)
	f.srv.queue(body(drainBody([][]byte{ev})))
	return func(d delta) Outcome {
		if d.restarts != 1 || d.resyncs < 1 || d.blocks != 2 {
			return defect("an event_id going back to %d: %d restarts, %d resyncs, the mirror holds %d blocks (want 1 restart, a cleared mirror holding the event's and the marker's block)",
				id, d.restarts, d.resyncs, d.blocks)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with a stored event at event_id %d (back from %d)", id, id+1), 0
}

// drainMaxIDCase sends event_id 2^64-1; the marker then wraps to 0.
func drainMaxIDCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	last := f.nextID - 1
	f.nextID = math.MaxUint64
	ev, _ := f.stored(1) // nextID wraps to 0
	if last == 0 {
		f.nextID = 1 // the marker's event_id must not be the one already seen
	}
	f.srv.queue(body(drainBody([][]byte{ev})))
	return func(d delta) Outcome {
		if d.gaps != 1 || d.restarts != 1 || d.blocks != 1 {
			return defect("event_id 2^64-1 then 0: %d gaps, %d restarts, mirror %d blocks (want 1 gap, 1 restart, the marker's block alone)", d.gaps, d.restarts, d.blocks)
		}
		return refused()
	}, "answer one drain with a stored event at event_id 18446744073709551615, the next with event_id 0", 0
}

// drainRemovedUnknownCase removes blocks the engine never stored.
func drainRemovedUnknownCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	n := []int{1, 10, 1000, 100000}[rng.IntN(4)]
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = rng.Uint64()
	}
	b := drainBody([][]byte{renderEvent(f.id(), removedData(hs), f.window, -1)})
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		if d.events != 1 || d.grew != 1 || d.recv != 0 {
			return defect("a removal of %d unknown blocks: %d events, mirror %+d blocks (want 1 event, the marker's block alone)", n, d.events, d.grew)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with a removed event of %d random hashes: %s", n, quote(b, 300)), 0
}

// drainOrphanCase stores a run whose parent was never stored.
func drainOrphanCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	p := f.hash()
	bl := f.blocks(1 + rng.IntN(4))
	b := drainBody([][]byte{renderEvent(f.id(), storedData(&p, bl), f.window, -1)})
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		if d.ignored("orphan_parent") != 1 || d.grew != 1 {
			return defect("a run whose parent %d was never stored: %d orphan_parent counted, mirror %+d blocks (want 1, the marker's block alone)", p, d.ignored("orphan_parent"), d.grew)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with a stored run whose parent_hash %d was never stored: %s", p, quote(b, 300)), 0
}

// drainCycleCase makes parents loop: a run that is its own parent, or A
// then B stored and A stored again with parent B; all removed after.
func drainCycleCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	bl := f.blocks(2)
	a, bh := bl[0].hash, bl[1].hash
	var evs [][]byte
	what := ""
	if rng.IntN(2) == 0 {
		what = "a block that is its own parent"
		evs = append(evs, renderEvent(f.id(), storedData(&a, bl[:1]), f.window, -1))
	} else {
		what = "A→B stored, then A again with parent B, then every block removed"
		evs = append(evs, renderEvent(f.id(), storedData(nil, bl), f.window, -1),
			renderEvent(f.id(), storedData(&bh, bl[:1]), f.window, -1),
			renderEvent(f.id(), storedData(&a, bl[1:]), f.window, -1),
			renderEvent(f.id(), removedData([]uint64{a, bh, a, bh, a}), f.window, -1))
	}
	b := drainBody(evs)
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		if d.grew != 1 || d.recv != 0 || d.events != int64(len(evs)) {
			return defect("%s: %d events applied, mirror %+d blocks (want %d events, the marker's block alone)", what, d.events, d.grew, len(evs))
		}
		return refused()
	}, fmt.Sprintf("answer one drain with %s: %s", what, quote(b, 400)), 0
}

// drainCreatedCase sends created mid-stream: the mirror is cleared.
func drainCreatedCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	ev, _ := f.stored(2)
	b := drainBody([][]byte{ev, renderEvent(f.id(), createdData(), f.window, -1)})
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		if d.blocks != 1 || d.events != 2 {
			return defect("created mid-stream: mirror holds %d blocks after (want the marker's alone), %d events", d.blocks, d.events)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with a stored run then created: %s", quote(b, 300)), 0
}

// drainRanksCase sends events of other attention-DP ranks, valid or not.
func drainRanksCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	rank := []int64{1, 7, 63, 64, 1 << 20}[rng.IntN(5)]
	start, seen := f.rankIDs[rank]
	if !seen {
		start = rng.Uint64N(1 << 40) // a rank's first event_id is any
	}
	n := 1 + rng.IntN(5)
	evs := make([][]byte, n)
	for i := range evs {
		evs[i] = renderEvent(strconv.FormatUint(start+uint64(i), 10), storedData(nil, f.blocks(1)), f.window, rank)
	}
	if rank < 64 {
		f.rankIDs[rank] = start + uint64(n)
	}
	b := drainBody(evs)
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		switch {
		case rank < 64 && (d.invalid != 0 || d.events != int64(n) || d.gaps != 0):
			return defect("%d events of rank %d from event_id %d: %d applied, %d invalid, %d gaps (want every one, no gap)", n, rank, start, d.events, d.invalid, d.gaps)
		case rank >= 64 && (d.invalid != int64(n) || d.events != 0):
			return defect("%d events of rank %d (past the 64 ranks llb tracks): %d invalid, %d applied", n, rank, d.invalid, d.events)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with %d events of attention_dp_rank %d: %s", n, rank, quote(b, 300)), 0
}

// drainWindowCase sends events of another attention window (counted, not
// mirrored).
func drainWindowCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	w := []int64{128, 0, 1 << 40}[rng.IntN(3)] // never f.window
	b := drainBody([][]byte{renderEvent(f.id(), storedData(nil, f.blocks(2)), w, -1)})
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		if d.ignored("window") != 1 || d.grew != 1 {
			return defect("an event of window %d: %d counted as window, mirror %+d blocks (want 1, the marker's block alone)", w, d.ignored("window"), d.grew)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with a stored run of window_size %d", w), 0
}

// drainWindowRestartCase restarts the engine (event_id back to 0) with
// another attention window: its events are mirrored from then on.
func drainWindowRestartCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	old := f.window
	for f.window == old {
		f.window = []int64{4096, 8192, 32768}[rng.IntN(3)]
	}
	f.nextID = 0
	created := renderEvent(f.id(), createdData(), f.window, -1)
	ev, _ := f.stored(2)
	f.srv.offer(created, ev)
	return func(d delta) Outcome {
		if d.restarts != 1 || d.ignored("window") != 0 || d.blocks != 3 {
			return defect("an engine restarted with window %d (was %d): %d restarts, %d events skipped as another window's, mirror %d blocks (want 1 restart, none skipped, the run's 2 blocks and the marker's)",
				f.window, old, d.restarts, d.ignored("window"), d.blocks)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with created and a stored run at event_id 0 and 1, window_size %d (was %d)", f.window, old), 0
}

// drainStatusCase answers a failure status, or a redirect.
func drainStatusCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	codes := []int{500, 502, 503, 504, 404, 429, 400, 204, 301, 302, 307, 308, 201}
	code := codes[rng.IntN(len(codes))]
	ev, _ := f.stored(1)
	payload := drainBody([][]byte{ev}) // a body that looks like events: must not be applied
	_, r0 := f.srv.state()
	f.srv.queue(func(w http.ResponseWriter, _ *http.Request) {
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if code != 204 {
			_, _ = w.Write(payload)
		}
	})
	return func(d delta) Outcome {
		if _, r1 := f.srv.state(); r1 != r0 {
			return defect("a %d answer to the drain: llbd followed the redirect to /elsewhere", code)
		}
		return lostShown(fmt.Sprintf("a %d answer", code), 1)(d)
	}, fmt.Sprintf("answer one drain %d with a drain-like body: %s", code, quote(payload, 200)), drainRecover
}

// drainContentTypeCase answers a valid drain under another content type.
func drainContentTypeCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	ct := []string{"text/html", "", "application/msgpack", "text/event-stream", "application/json; charset=latin1"}[rng.IntN(5)]
	ev, _ := f.stored(1)
	b := drainBody([][]byte{ev})
	f.srv.queue(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = []string{ct}
		_, _ = w.Write(b)
	})
	return func(d delta) Outcome {
		switch {
		case d.events == 1 && d.recv == 0:
			return accepted() // the body is trtllm-serve's JSON whatever its label
		case d.recv == 1 && d.gaps == 1:
			return refused()
		}
		return defect("a valid drain labelled %q: neither applied nor counted", ct)
	}, fmt.Sprintf("answer one drain with a valid body as Content-Type %q", ct), 0
}

// drainCutCase cuts the connection at some point of the answer.
func drainCutCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	ev, _ := f.stored(2)
	b := drainBody([][]byte{ev})
	how := []string{"before the status line", "inside the headers", "inside a Content-Length body", "inside a chunked body"}[rng.IntN(4)]
	f.srv.queue(func(w http.ResponseWriter, _ *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			return
		}
		c, bw, err := hj.Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		switch how {
		case "inside the headers":
			_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: applic")
		case "inside a Content-Length body":
			_, _ = fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b[:len(b)/2])
		case "inside a chunked body":
			_, _ = fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(b)/2, b[:len(b)/2])
		}
		_ = bw.Flush()
	})
	return lostShown("a connection cut "+how, 1), "answer one drain by cutting the connection " + how, drainRecover
}

// drainDeepCase answers with deeply nested JSON.
func drainDeepCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	depth := 100000 + rng.IntN(100000)
	var b []byte
	what := ""
	switch rng.IntN(3) {
	case 0:
		what = "nested arrays"
		b = append(bytes.Repeat([]byte("["), depth), bytes.Repeat([]byte("]"), depth)...)
	case 1:
		what = "nested blocks in a stored event"
		b = []byte(`[{"event_id":` + f.id() + `,"data":{"type":"stored","parent_hash":null,"blocks":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `},"window_size":4096}]`)
	default:
		what = "an unknown member nested deep"
		b = []byte(`[{"event_id":` + f.id() + `,"x":` + strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth) + `,"data":{"type":"created"},"window_size":4096}]`)
	}
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		if !counted(d) {
			return defect("%d levels of %s: nothing counted", depth, what)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with %d levels of %s: %s", depth, what, quote(b, 200)), 0
}

// drainHugeTokensCase stores huge token lists under the body bound.
func drainHugeTokensCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	if rng.IntN(2) == 0 {
		// One block of a million tokens: not kvBlockSize, counted.
		toks := make([]uint32, 1<<20)
		for i := range toks {
			toks[i] = uint32(i)
		}
		b := drainBody([][]byte{renderEvent(f.id(), storedData(nil, []trtBlock{{hash: f.hash(), tokens: toks}}), f.window, -1)})
		f.srv.queue(body(b))
		return func(d delta) Outcome {
			if d.recv != 0 || d.events != 1 || d.grew != 1 {
				return defect("one block of 2^20 tokens (%d MiB): %d events, mirror %+d blocks (want the marker's alone)", len(b)>>20, d.events, d.grew)
			}
			return refused()
		}, fmt.Sprintf("answer one drain with a stored block of %d tokens (%d MiB)", len(toks), len(b)>>20), drainRecover
	}
	n := 50000 // about 52 MiB: under the bound
	b := drainBody([][]byte{renderEvent(f.id(), storedData(nil, f.blocks(n)), f.window, -1)})
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		if d.recv != 0 || d.events != 1 || d.grew != int64(n)+1 {
			return defect("a run of %d blocks (%d MiB, under the bound): %d events, mirror %+d blocks (want %d)", n, len(b)>>20, d.events, d.grew, n+1)
		}
		return accepted()
	}, fmt.Sprintf("answer one drain with a stored run of %d blocks (%d MiB)", n, len(b)>>20), drainRecover
}

// drainHugeArrayCase answers with structure-dense JSON just under the
// body bound: each byte costs llbd the most it can to decode.
func drainHugeArrayCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	size := drainMaxBody - 4096
	var what string
	var b []byte
	rep := func(prefix, unit, suffix string) []byte {
		n := (size - len(prefix) - len(suffix)) / (len(unit) + 1)
		out := make([]byte, 0, size)
		out = append(out, prefix...)
		for i := range n {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, unit...)
		}
		return append(out, suffix...)
	}
	id := strconv.FormatUint(f.nextID, 10)
	switch rng.IntN(5) {
	case 0:
		what, b = "empty events", rep("[", "{}", "]")
	case 1:
		what, b = "removed hashes", rep(`[{"event_id":`+id+`,"data":{"type":"removed","block_hashes":[`, "1", `]},"window_size":4096}]`)
		f.nextID++
	case 2:
		what, b = "empty blocks", rep(`[{"event_id":`+id+`,"data":{"type":"stored","parent_hash":null,"blocks":[`, "{}", `]},"window_size":4096}]`)
		f.nextID++
	case 3:
		what, b = "empty tokens", rep(`[{"event_id":`+id+`,"data":{"type":"stored","parent_hash":null,"blocks":[{"block_hash":1,"tokens":[`, "{}", `]}]},"window_size":4096}]`)
		f.nextID++
	default:
		what, b = "nulls", rep("[", "null", "]")
	}
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		if d.recv == 0 && !counted(d) && d.events == 0 && d.grew == 1 {
			return defect("%d MiB of %s: nothing applied, nothing counted", len(b)>>20, what)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with %d MiB of %s: %s", len(b)>>20, what, quote(b, 200)), drainRecover
}

// drainOverBodyCase answers a drain over the body bound: dropped, its
// events a gap.
func drainOverBodyCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	n := (drainMaxBody + 1<<20) / 20 // 19 digits and a comma each
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = 1<<63 + uint64(i)
	}
	b := drainBody([][]byte{renderEvent(f.id(), removedData(hs), f.window, -1)})
	chunked := rng.IntN(2) == 0
	f.srv.queue(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !chunked {
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		}
		_, _ = w.Write(b)
	})
	return lostShown(fmt.Sprintf("a %d MiB drain (chunked %v) over the %d MiB bound", len(b)>>20, chunked, drainMaxBody>>20), 1),
		fmt.Sprintf("answer one drain with a removed event of %d hashes (%d bytes, chunked %v)", n, len(b), chunked), drainRecover
}

// drainEndlessCase answers a body that never ends.
func drainEndlessCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	v := rng.IntN(3)
	unit := []string{"          ", "[[[[[[[[[[", `{"event_id":1,"data":{"type":"removed","block_hashes":[1]},"window_size":4096},`}[v]
	what := []string{"spaces", "opening brackets", "the same event"}[v]
	f.srv.queue(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if _, err := w.Write([]byte("[")); err != nil {
			return
		}
		chunk := []byte(strings.Repeat(unit, 64<<10/len(unit)))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	return lostShown("an endless body of "+what, 0), "answer one drain with '[' then " + what + " forever", drainRecover
}

// drainGzipCase answers a gzip body that inflates past the bound.
func drainGzipCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	_, _ = zw.Write([]byte("["))
	spaces := bytes.Repeat([]byte(" "), 1<<20)
	for range 512 {
		_, _ = zw.Write(spaces)
	}
	_, _ = zw.Write([]byte("]"))
	_ = zw.Close()
	gz := z.Bytes()
	f.srv.queue(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gz)
	})
	return func(d delta) Outcome {
		if d.recv != 1 && d.batches != 0 {
			return defect("%d KiB of gzip inflating to 512 MiB: %d receive errors", len(gz)>>10, d.recv)
		}
		return refused()
	}, fmt.Sprintf("answer one drain with %d KiB of gzip (Content-Encoding: gzip) inflating to '[' + 512 MiB of spaces + ']'", len(gz)>>10), drainRecover
}

// drainFloodCase answers many events in one drain.
func drainFloodCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	n := 100000 + rng.IntN(100000)
	evs := make([][]byte, n)
	for i := range evs {
		evs[i] = renderEvent(f.id(), removedData([]uint64{uint64(i)}), f.window, -1)
	}
	b := drainBody(evs)
	f.srv.queue(body(b))
	return func(d delta) Outcome {
		if d.recv == 0 && d.events != int64(n) {
			return defect("a drain of %d events: %d applied", n, d.events)
		}
		if d.recv != 0 && d.gaps != 1 {
			return defect("a drain of %d events refused, but no gap shown", n)
		}
		return accepted()
	}, fmt.Sprintf("answer one drain with %d removed events (%d MiB)", n, len(b)>>20), drainRecover
}

// drainSlowCase answers late, trickles, or never answers.
func drainSlowCase(f *drainFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	ev, _ := f.stored(1)
	b := drainBody([][]byte{ev})
	switch v := rng.IntN(4); v {
	case 0:
		f.srv.queue(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
		})
		return func(d delta) Outcome {
			if d.events != 1 || d.recv != 0 {
				return defect("a drain answered after 2 s (within the %v bound) was not applied", drainTimeout)
			}
			return accepted()
		}, "answer one drain after 2 s", drainRecover
	default:
		what := []string{"", "headers, then nothing", "nothing at all", "one byte every 200 ms"}[v]
		f.srv.queue(func(w http.ResponseWriter, r *http.Request) {
			if v == 1 || v == 3 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
			}
			for i := 0; r.Context().Err() == nil; i++ {
				select {
				case <-r.Context().Done():
				case <-time.After(200 * time.Millisecond):
					if v == 3 {
						_, _ = w.Write(b[i%len(b) : i%len(b)+1])
						w.(http.Flusher).Flush()
					}
				}
			}
		})
		start := time.Now()
		return func(d delta) Outcome {
			if el := time.Since(start); el > drainTimeout+drainRecover {
				return defect("a drain answered with %s held the feed %v", what, el)
			}
			return lostShown("a drain answered with "+what, 1)(d)
		}, "answer one drain with " + what + ", forever", drainTimeout + drainRecover
	}
}

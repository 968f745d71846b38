package ladder

import (
	"math"
	"time"
)

// Footprints: the headroom law's memory of which prefixes each endpoint
// serves and how many blocks they take. An endpoint's footprint is the sum
// of the prompt blocks of the prefix keys last sent to it within
// FootprintTTL — the cache its recent traffic needs to stay hits. The KV
// inventory cannot tell this: after warm-up every cache is full, of hot
// prefixes and of dead ones alike. With it a new prefix lands where its
// blocks fit beside the others (missTarget), and a request whose holder
// keeps evicting part of it moves to an endpoint with room (refit): when
// the prefixes sent to one endpoint need more blocks than it has, LRU
// evicts each one's tail in turn and every request pays its tail again, a
// cost no per-request comparison of prefill work sees (long-document Q&A:
// three documents on one worker whose cache holds two).
//
// A key counts on the endpoint it was last sent to only. Counting it on
// every endpoint that got it within the TTL would count a popular
// prefix's spilled copies too, inflating footprints the law then packs
// around (docs/performance.md, footprints and refits).

const (
	// FootprintTTL is how long a placement counts towards its endpoint's
	// footprint: the footprint is the hot part of what an endpoint keeps,
	// and a prefix not asked for within it is the one LRU should evict
	// first. The shorter, the better long-document Q&A is served; 20 s is
	// the shortest at which light-load traffic keeps its TTFT against
	// CHWBL (docs/performance.md, footprints and refits).
	FootprintTTL = 20 * time.Second
	// footprintSlots is the table size; a key takes slot key mod
	// footprintSlots and a colliding key simply replaces it (the table is
	// an estimate).
	footprintSlots = 1024
)

// RefitHorizon is how far ahead a refit counts the returns of the prompt
// it moves (RefitPays). Measured at 120 s, 300 s and 10 min: the shorter
// horizons refused refits long-document Q&A needed (a document's second
// request, its hit count still about one), while at 10 min the Mooncake
// synthetic trace's prompts seen about once before, 90 % or more cached
// on their pick, still stay there (docs/performance.md, refits that
// pay).
const RefitHorizon = 10 * time.Minute

type footprintEntry struct {
	key uint64
	at  int64 // unix nanoseconds of the last placement
	// hits is the key's requests, each decayed by SettleHalfLife from its
	// time to at: how often the prompt comes back (missTarget, settleMiss).
	hits   float32
	blocks uint32
	ep     int8
	set    bool
}

// footprintTable is a direct-mapped, fixed-size table of the latest
// placement of each prefix key: endpoint, prompt blocks, time. It never
// allocates. Owned by its Router.
type footprintTable struct {
	slots [footprintSlots]footprintEntry
}

// note records that key, a prompt of blocks blocks, was sent to ep at now;
// it leaves the footprint of the endpoint the key was sent to before.
func (t *footprintTable) note(now time.Time, key uint64, ep int, blocks uint32) {
	if ep < 0 || ep >= MaxEndpoints {
		return
	}
	e := &t.slots[key%footprintSlots]
	n := now.UnixNano()
	hits := float32(1)
	if e.set && e.key == key && n >= e.at {
		hits += e.hits * float32(decay(n-e.at))
	}
	*e = footprintEntry{key: key, at: n, hits: hits, blocks: blocks, ep: int8(ep), set: true}
}

// decay is the weight left after d nanoseconds of SettleHalfLife decay.
func decay(d int64) float64 { return math.Exp2(-float64(d) / float64(SettleHalfLife)) }

// weightedSums sets out[e] to endpoint e's footprint weighted by how often
// each prompt comes back: every key last sent to e within SettleHorizon,
// except skip, counts its blocks times min(1, rate · FootprintTTL), its
// rate the decayed hit count over SettleHalfLife. A prompt asked for at
// least about once per FootprintTTL counts whole however long ago it was
// placed (it stays on its endpoint's footprint while the 20 s one loses it
// between two requests); a prompt asked for once in a while counts little
// (LRU will not keep it anyway), so a Zipf workload's cold prompts do not
// inflate the footprint its hot ones need.
func (t *footprintTable) weightedSums(now time.Time, skip uint64, out *[MaxEndpoints]uint64) {
	*out = [MaxEndpoints]uint64{}
	n := now.UnixNano()
	perHit := math.Ln2 / float64(SettleHalfLife) * float64(FootprintTTL)
	for i := range t.slots {
		e := &t.slots[i]
		if !e.set || e.key == skip || e.at > n || n-e.at > int64(SettleHorizon) {
			continue
		}
		w := min(1, float64(e.hits)*decay(n-e.at)*perHit)
		out[e.ep] += uint64(float64(e.blocks)*w + 0.5)
	}
}

// returns is how many times key is expected to come back within
// RefitHorizon: its decayed hit count, the requests of it seen within
// about a SettleHalfLife, scaled to the horizon (a rate times a time).
// false when the table does not know the key: not placed within
// SettleHorizon, or another key took its slot since.
func (t *footprintTable) returns(now time.Time, key uint64) (float64, bool) {
	n := now.UnixNano()
	e := t.lookup(n, key)
	if e == nil {
		return 0, false
	}
	return float64(e.hits) * decay(n-e.at) * math.Ln2 / float64(SettleHalfLife) * float64(RefitHorizon), true
}

// hotHome returns the endpoint key was last sent to within SettleHorizon
// when the prompt is hot: it comes back about once per FootprintTTL or
// more often (its weight in weightedSums is whole). false for a colder
// prompt, or one the table does not know.
func (t *footprintTable) hotHome(now time.Time, key uint64) (int, bool) {
	n := now.UnixNano()
	e := t.lookup(n, key)
	if e == nil || float64(e.hits)*decay(n-e.at)*math.Ln2/float64(SettleHalfLife)*float64(FootprintTTL) < 1 {
		return -1, false
	}
	return int(e.ep), true
}

// lookup returns key's entry when it was placed within SettleHorizon of n
// (unix nanoseconds), else nil.
func (t *footprintTable) lookup(n int64, key uint64) *footprintEntry {
	e := &t.slots[key%footprintSlots]
	if !e.set || e.key != key || e.at > n || n-e.at > int64(SettleHorizon) {
		return nil
	}
	return e
}

// sums sets out[e] to endpoint e's footprint at now: the blocks of the
// keys last sent to e within FootprintTTL, except skip (the key being
// placed, which counts wherever it goes).
func (t *footprintTable) sums(now time.Time, skip uint64, out *[MaxEndpoints]uint64) {
	*out = [MaxEndpoints]uint64{}
	n := now.UnixNano()
	for i := range t.slots {
		e := &t.slots[i]
		if !e.set || e.key == skip || e.at > n || n-e.at > int64(FootprintTTL) {
			continue
		}
		out[e.ep] += uint64(e.blocks)
	}
}

// removeEndpoint forgets the keys last sent to ep: its cache is not to be
// counted on (its breaker tripped; the engine may come back empty).
func (t *footprintTable) removeEndpoint(ep int) {
	for i := range t.slots {
		if e := &t.slots[i]; e.set && int(e.ep) == ep {
			*e = footprintEntry{}
		}
	}
}

// Overflows is the headroom law's test of the pick, an endpoint of
// capacity blocks with the given footprint (without this prompt's key):
// true when the request must compute at least SpillMarginBlocks of its
// promptBlocks there (overlap short of the prompt by that much) and the
// endpoint's footprint with the prompt exceeds its capacity, so the
// missing blocks are the tail LRU evicted and will evict again.
func Overflows(footprint, capacity uint64, promptBlocks, overlap uint32) bool {
	if promptBlocks-min(overlap, promptBlocks) < SpillMarginBlocks {
		return false
	}
	return !Fits(footprint, capacity, promptBlocks)
}

// RefitPays is the headroom law's price test of a refit of a prompt of
// promptBlocks from a pick holding pickOverlap of it to a target holding
// targetOverlap: the move gives up pickOverlap − targetOverlap cached
// blocks now, and saves the promptBlocks − pickOverlap blocks of tail the
// pick would compute again on each of the prompt's expected returns. It
// pays when the blocks saved are at least the blocks given up. A prompt
// that does not come back (most of a recorded trace's) never pays for
// its copy; a document asked about every few seconds does at once.
func RefitPays(returns float64, promptBlocks, pickOverlap, targetOverlap uint32) bool {
	pickOverlap = min(pickOverlap, promptBlocks)
	if targetOverlap >= pickOverlap {
		return true
	}
	return returns*float64(promptBlocks-pickOverlap) >= float64(pickOverlap-targetOverlap)
}

// Fits reports whether a prompt of promptBlocks fits an endpoint of
// capacity blocks beside its footprint.
func Fits(footprint, capacity uint64, promptBlocks uint32) bool {
	return footprint <= capacity && uint64(promptBlocks) <= capacity-footprint
}

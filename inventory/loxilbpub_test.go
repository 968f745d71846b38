package inventory

import (
	"encoding/binary"
	"math"
	"testing"
)

// LoxiLB's own CI publisher (loxilb-inference-gateway
// cicd/vllm-kvcache-routing-cpu/kv_event_publisher.py) reproduced byte for
// byte: Python msgpack.packb(use_bin_type=True) of [time.time(), [event],
// None] on topic "kv", one BlockStored per block, legacy 9-element arrays
// ["BlockStored", [u64], parent_u64, tokens, 16, None, "gpu", None, None]
// — medium in lower case, and the parent of block 0 is NONE_HASH's key,
// not nil — then ["BlockRemoved", [0xDEADBEEF], "gpu"] and
// ["AllBlocksCleared"]. llb kept only "GPU": the feed connected, every
// event arrived, and the mirror stayed at 0 blocks without a word.

// pyPack is the subset of Python msgpack's packer these events use.
type pyPack []byte

func (p pyPack) arr(n int) pyPack     { return mpArrayHead(p, n) }
func (p pyPack) str(s string) pyPack  { return mpStr(p, s) }
func (p pyPack) uint(v uint64) pyPack { return mpUint(p, v) }
func (p pyPack) nil() pyPack          { return append(p, 0xc0) }
func (p pyPack) float(f float64) pyPack {
	return binary.BigEndian.AppendUint64(append(p, 0xcb), math.Float64bits(f))
}

// loxilbBatch is one emit(): [ts, [ev], None].
func loxilbBatch(ev pyPack) []byte {
	return pyPack(nil).arr(3).float(1.7e9).arr(1).append(ev).nil()
}

func (p pyPack) append(q pyPack) pyPack { return append(p, q...) }

func loxilbStored(hash, parent uint64, tokens []uint32, bs int) pyPack {
	p := pyPack(nil).arr(9).str("BlockStored").arr(1).uint(hash).uint(parent).arr(len(tokens))
	for _, t := range tokens {
		p = p.uint(uint64(t))
	}
	return p.uint(uint64(bs)).nil().str("gpu").nil().nil()
}

func TestFeed_LoxiLBCIPublisherLowercaseGPUFillsTheMirror(t *testing.T) {
	const bs = 16
	h, err := NewHasher(AlgoSHA256CBOR, bs, "0")
	if err != nil {
		t.Fatal(err)
	}
	prompt := seqTokens(1000, 5*bs)
	digs, err := h.AppendDigests(nil, Digest{}, 0, prompt, ExtraKeys{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []struct {
		name      string
		keys      ChainHasher
		wantScore int
		wantWhy   IgnoreReason
	}{
		// Exact mode keys by the published hashes: every block counts.
		{"exact", h, 5, NumIgnoreReasons},
		// Token-keyed mode chains own keys from parents; the publisher's
		// block-0 parent (NONE_HASH's key instead of nil) is unknown, so
		// the runs are orphans — counted, logged, and visible.
		{"token", mustTokenHasher(t, bs), 0, IgnoreOrphanParent},
	} {
		t.Run(mode.name, func(t *testing.T) {
			pub := newTestPub(t, "")
			fh := startFeed(t, FeedConfig{Endpoint: pub.addr}, mode.keys)
			seq := fh.join(t, pub, 0)
			parent := h.NoneHash().Key()
			for i, d := range digs {
				pub.sendRaw(t, []byte("kv"), seq8(seq), loxilbBatch(loxilbStored(d.Key(), parent, prompt[i*bs:(i+1)*bs], bs)))
				seq++
				parent = d.Key()
			}
			fh.waitSeq(t, seq-1)
			chain := mode.keys.AppendBlockKeys(nil, prompt, ExtraKeys{})
			if got := fh.mirror.Score(chain); got != mode.wantScore {
				t.Fatalf("score %d; want %d (stats %+v)", got, mode.wantScore, fh.mirror.Stats())
			}
			st := fh.mirror.Stats()
			if mode.wantWhy < NumIgnoreReasons && st.Ignored[mode.wantWhy].Events != 5 {
				t.Fatalf("ignored %+v; want 5 events for %s", st.Ignored, mode.wantWhy)
			}
			if mode.wantWhy == NumIgnoreReasons && (st.IgnoredEvents != 0 || st.Blocks != 5) {
				t.Fatalf("stats %+v; want 5 blocks, nothing ignored", st)
			}
			// The vocabulary tail: an unknown removal, then a clear.
			removal := pyPack(nil).arr(3).str("BlockRemoved").arr(1).uint(0xDEADBEEF).str("gpu")
			pub.sendRaw(t, []byte("kv"), seq8(seq), loxilbBatch(removal))
			pub.sendRaw(t, []byte("kv"), seq8(seq+1), loxilbBatch(pyPack(nil).arr(1).str("AllBlocksCleared")))
			fh.waitSeq(t, seq+1)
			st = fh.mirror.Stats()
			if st.Blocks != 0 || st.Clears != 1 || st.Ignored[IgnoreUnknownBlock].Blocks != 1 {
				t.Fatalf("after the tail: stats %+v; want empty, one clear, one unknown block", st)
			}
			if fs := fh.feed.Stats(); fs.InvalidEvents != 0 || fs.UnknownEvents != 0 {
				t.Fatalf("feed dropped events: %+v", fs)
			}
		})
	}
}

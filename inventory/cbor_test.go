package inventory

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"pgregory.net/rapid"
)

// canonicalMode is fxamacker's canonical encoder, the reference the hand
// encoder must match byte for byte (vllm-contract.md §2.5: verified equal to
// cbor2 canonical=True on the spec vectors).
func canonicalMode(t interface{ Fatalf(string, ...any) }) cbor.EncMode {
	em, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		t.Fatalf("enc mode: %v", err)
	}
	return em
}

// tokenGen draws token ids spread over every CBOR head width.
func tokenGen() *rapid.Generator[uint32] {
	return rapid.OneOf(
		rapid.Uint32Range(0, 23),
		rapid.Uint32Range(24, 255),
		rapid.Uint32Range(256, 65535),
		rapid.Uint32Range(65536, 200000),
		rapid.Uint32(),
	)
}

// textGen draws strings of every CBOR length-head width, including UTF-8.
func textGen() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.StringN(0, 23, -1),
		rapid.StringN(24, 300, -1),
		rapid.StringOfN(rapid.RuneFrom([]rune{'a', 'é', '中', '🙂'}), 0, 40, -1),
	)
}

// extraKeysGen draws request-level extra keys with sorted mm items.
func extraKeysGen(maxTokens int) *rapid.Generator[ExtraKeys] {
	return rapid.Custom(func(t *rapid.T) ExtraKeys {
		var ek ExtraKeys
		if rapid.Bool().Draw(t, "lora") {
			ek.LoRAName = textGen().Draw(t, "lora_name")
		}
		if rapid.Bool().Draw(t, "salt") {
			ek.CacheSalt = textGen().Draw(t, "cache_salt")
		}
		n := rapid.IntRange(0, 4).Draw(t, "mm_items")
		off := 0
		for i := 0; i < n && off < maxTokens; i++ {
			off += rapid.IntRange(0, maxTokens/2+1).Draw(t, "mm_gap")
			ln := rapid.IntRange(1, maxTokens+1).Draw(t, "mm_len")
			ek.MM = append(ek.MM, MMItem{Identifier: textGen().Draw(t, "mm_id"), Offset: off, Length: ln})
		}
		return ek
	})
}

// genericValueGen draws extra-key values of the kinds a decoded event holds.
func genericValueGen(depth int) *rapid.Generator[any] {
	leaves := []*rapid.Generator[any]{
		rapid.Just[any](nil),
		rapid.Map(rapid.Bool(), func(b bool) any { return b }),
		rapid.Map(textGen(), func(s string) any { return s }),
		rapid.Map(rapid.SliceOfN(rapid.Byte(), 0, 300), func(b []byte) any { return b }),
		rapid.Map(rapid.Int64(), func(v int64) any { return v }),
		rapid.Map(rapid.Uint64(), func(v uint64) any { return v }),
		rapid.Map(rapid.Int8(), func(v int8) any { return v }),
		rapid.Map(rapid.Uint16(), func(v uint16) any { return v }),
		rapid.Map(rapid.Int(), func(v int) any { return v }),
	}
	if depth <= 0 {
		return rapid.OneOf(leaves...)
	}
	return rapid.OneOf(append(leaves,
		rapid.Map(rapid.SliceOfN(genericValueGen(depth-1), 0, 30), func(v []any) any { return v }))...)
}

func TestCBOR_BlockEncodingMatchesFxamacker(t *testing.T) {
	em := canonicalMode(t)
	rapid.Check(t, func(t *rapid.T) {
		algo := rapid.SampledFrom([]Algo{AlgoSHA256CBOR, AlgoXXHashCBOR}).Draw(t, "algo")
		bs := rapid.IntRange(1, 40).Draw(t, "block_size")
		nblk := rapid.IntRange(1, 4).Draw(t, "blocks")
		toks := rapid.SliceOfN(tokenGen(), bs*nblk, bs*nblk).Draw(t, "tokens")
		parent := rapid.SliceOfN(rapid.Byte(), algo.DigestSize(), algo.DigestSize()).Draw(t, "parent")
		ek := extraKeysGen(bs*nblk).Draw(t, "extra")
		for blk := 0; blk < nblk; blk++ {
			got := []byte{cborArray | 3}
			got = appendCBORHead(got, cborBytes, uint64(len(parent)))
			got = append(got, parent...)
			got = appendCBORTokens(got, toks[blk*bs:(blk+1)*bs])
			got = ek.appendBlockTuple(got, blk, blk*bs, bs)

			var tuple any
			if tup := ek.BlockTuple(blk, bs); tup != nil {
				tuple = tup
			}
			want, err := em.Marshal([]any{parent, toks[blk*bs : (blk+1)*bs], tuple})
			if err != nil {
				t.Fatalf("fxamacker: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("block %d\n got %x\nwant %x", blk, got, want)
			}
		}
	})
}

func TestCBOR_GenericValuesMatchFxamacker(t *testing.T) {
	em := canonicalMode(t)
	enc := cborValueEncoder{} // no fallback: every generated kind is hand-encoded
	rapid.Check(t, func(t *rapid.T) {
		v := genericValueGen(3).Draw(t, "value")
		got, err := enc.appendValue(nil, v, 0)
		if err != nil {
			t.Fatalf("hand encoder: %v", err)
		}
		want, err := em.Marshal(v)
		if err != nil {
			t.Fatalf("fxamacker: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("value %#v\n got %x\nwant %x", v, got, want)
		}
	})
}

// naiveChain is the obviously-correct reference: fxamacker + the digest on
// every block, chained on the full digest.
func naiveChain(t *rapid.T, em cbor.EncMode, h *Hasher, toks []uint32, ek ExtraKeys) []Digest {
	bs := h.BlockSize()
	parent := h.NoneHash().Bytes()
	var out []Digest
	for blk := 0; blk < len(toks)/bs; blk++ {
		var tuple any
		if tup := ek.BlockTuple(blk, bs); tup != nil {
			tuple = tup
		}
		raw, err := em.Marshal([]any{parent, toks[blk*bs : (blk+1)*bs], tuple})
		if err != nil {
			t.Fatalf("fxamacker: %v", err)
		}
		var d Digest
		if h.Algo() == AlgoSHA256CBOR {
			s := sha256.Sum256(raw)
			d, _ = DigestFromBytes(s[:])
		} else {
			d = h.sum(raw)
		}
		out = append(out, d)
		parent = d.Bytes()
	}
	return out
}

func TestHasher_ChainMatchesNaiveReference(t *testing.T) {
	em := canonicalMode(t)
	rapid.Check(t, func(t *rapid.T) {
		algo := rapid.SampledFrom([]Algo{AlgoSHA256CBOR, AlgoXXHashCBOR}).Draw(t, "algo")
		bs := rapid.IntRange(1, 32).Draw(t, "block_size")
		seed := textGen().Draw(t, "seed")
		toks := rapid.SliceOfN(tokenGen(), 0, 8*bs+bs-1).Draw(t, "tokens")
		ek := extraKeysGen(len(toks)+1).Draw(t, "extra")
		h, err := NewHasher(algo, bs, seed)
		if err != nil {
			t.Fatal(err)
		}
		want := naiveChain(t, em, h, toks, ek)
		got, err := h.AppendDigests(nil, Digest{}, 0, toks, ek)
		if err != nil {
			t.Fatal(err)
		}
		keys := h.AppendBlockKeys(nil, toks, ek)
		if len(got) != len(want) || len(keys) != len(want) {
			t.Fatalf("got %d digests, %d keys; want %d", len(got), len(keys), len(want))
		}
		var evExtras []any
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("block %d digest %s; want %s", i, got[i], want[i])
			}
			if keys[i] != want[i].Key() {
				t.Fatalf("block %d key %d; want %d", i, keys[i], want[i].Key())
			}
			var tuple any
			if tup := ek.BlockTuple(i, bs); tup != nil {
				tuple = tup
			}
			evExtras = append(evExtras, tuple)
		}
		run, err := h.AppendRunDigests(nil, Digest{}, toks[:len(want)*bs], evExtras)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if run[i] != want[i] {
				t.Fatalf("block %d event-extras digest %s; want %s", i, run[i], want[i])
			}
		}
	})
}

package inventory

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"pgregory.net/rapid"
)

// extraValueGen draws extra-key values in the normalized form the decoder
// produces (int64, string, []byte, nil, []any).
func extraValueGen(depth int) *rapid.Generator[any] {
	leaves := []*rapid.Generator[any]{
		rapid.Just[any](nil),
		rapid.Map(rapid.StringN(0, 40, -1), func(s string) any { return s }),
		rapid.Map(rapid.Int64(), func(v int64) any { return v }),
		rapid.Map(rapid.SliceOfN(rapid.Byte(), 0, 40), func(b []byte) any { return b }),
	}
	if depth <= 0 {
		return rapid.OneOf(leaves...)
	}
	return rapid.OneOf(append(leaves, rapid.Map(rapid.SliceOfN(extraValueGen(depth-1), 0, 5), func(v []any) any { return v }))...)
}

// eventGen draws a valid event of any kind with any optional fields.
func eventGen(digests bool) *rapid.Generator[Event] {
	return rapid.Custom(func(t *rapid.T) Event {
		kind := rapid.SampledFrom([]EventKind{EventBlockStored, EventBlockRemoved, EventAllBlocksCleared}).Draw(t, "kind")
		ev := Event{Kind: kind}
		if kind == EventAllBlocksCleared {
			return ev
		}
		n := rapid.IntRange(0, 20).Draw(t, "blocks")
		for i := 0; i < n; i++ {
			if digests {
				size := rapid.SampledFrom([]int{16, 32}).Draw(t, "digest_size")
				d, _ := DigestFromBytes(rapid.SliceOfN(rapid.Byte(), size, size).Draw(t, "digest"))
				ev.BlockDigests = append(ev.BlockDigests, d)
				ev.BlockHashes = append(ev.BlockHashes, d.Key())
			} else {
				ev.BlockHashes = append(ev.BlockHashes, rapid.Uint64().Draw(t, "hash"))
			}
		}
		if ev.HasMedium = rapid.Bool().Draw(t, "has_medium"); ev.HasMedium {
			ev.Medium = rapid.SampledFrom([]string{"GPU", "CPU", "STORAGE", ""}).Draw(t, "medium")
		}
		if ev.HasGroupIdx = rapid.Bool().Draw(t, "has_group"); ev.HasGroupIdx {
			ev.GroupIdx = rapid.Int64Range(-1000, 1<<40).Draw(t, "group")
		}
		if kind == EventBlockRemoved {
			return ev
		}
		if ev.HasParent = rapid.Bool().Draw(t, "has_parent"); ev.HasParent {
			if digests {
				ev.ParentDigest, _ = DigestFromBytes(rapid.SliceOfN(rapid.Byte(), 32, 32).Draw(t, "parent_digest"))
				ev.Parent = ev.ParentDigest.Key()
			} else {
				ev.Parent = rapid.Uint64().Draw(t, "parent")
			}
		}
		ev.BlockSize = rapid.IntRange(0, 300).Draw(t, "block_size")
		ev.TokenIDs = rapid.SliceOfN(tokenGen(), 0, 200).Draw(t, "tokens")
		if ev.HasLoRAID = rapid.Bool().Draw(t, "has_lora_id"); ev.HasLoRAID {
			ev.LoRAID = rapid.Int64().Draw(t, "lora_id")
		}
		if ev.HasLoRAName = rapid.Bool().Draw(t, "has_lora_name"); ev.HasLoRAName {
			ev.LoRAName = rapid.StringN(0, 300, -1).Draw(t, "lora_name")
		}
		if ev.HasExtraKeys = rapid.Bool().Draw(t, "has_extra"); ev.HasExtraKeys {
			ev.ExtraKeys = rapid.SliceOfN(extraValueGen(2), 0, n+1).Draw(t, "extra")
		}
		if ev.HasSpecKind = rapid.Bool().Draw(t, "has_spec"); ev.HasSpecKind {
			ev.SpecKind = rapid.SampledFrom([]string{"full_attention", "sliding_window", "mamba"}).Draw(t, "spec")
		}
		if ev.HasSlidingWindow = rapid.Bool().Draw(t, "has_window"); ev.HasSlidingWindow {
			ev.SlidingWindow = rapid.Int64().Draw(t, "window")
		}
		return ev
	})
}

func TestCodec_EncodeDecodeRoundTripsEveryField(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		digests := rapid.Bool().Draw(t, "digests")
		layout := rapid.SampledFrom([]Layout{LayoutMap, LayoutArray}).Draw(t, "layout")
		in := &Batch{TS: rapid.Float64().Draw(t, "ts"), Events: rapid.SliceOfN(eventGen(digests), 0, 8).Draw(t, "events")}
		if in.HasDPRank = rapid.Bool().Draw(t, "has_rank"); in.HasDPRank {
			in.DPRank = rapid.Int64Range(0, 1024).Draw(t, "rank")
		}
		raw, err := AppendBatch(nil, in, EncodeOptions{Layout: layout, DigestHashes: digests})
		if err != nil {
			t.Fatal(err)
		}
		var out Batch
		if err := out.Decode(raw); err != nil {
			t.Fatalf("decode: %v\n%x", err, raw)
		}
		if out.Invalid != 0 || out.Unknown != 0 {
			t.Fatalf("invalid %d unknown %d (%v)", out.Invalid, out.Unknown, out.InvalidErr)
		}
		if !sameFloat(out.TS, in.TS) || out.HasDPRank != in.HasDPRank || out.DPRank != in.DPRank {
			t.Fatalf("envelope %v/%v/%v; want %v/%v/%v", out.TS, out.DPRank, out.HasDPRank, in.TS, in.DPRank, in.HasDPRank)
		}
		if len(out.Events) != len(in.Events) {
			t.Fatalf("%d events; want %d", len(out.Events), len(in.Events))
		}
		for i := range in.Events {
			want := in.Events[i]
			if want.Kind != EventBlockStored {
				// the legacy array has no slot for stored-only fields
				want.TokenIDs = nil
			}
			if !eventsEqual(out.Events[i], want) {
				t.Fatalf("event %d\n got %+v\nwant %+v", i, out.Events[i], want)
			}
		}

		// An independent decoder (msgpack/v5) sees the same hashes.
		var generic []any
		if err := msgpack.Unmarshal(raw, &generic); err != nil {
			t.Fatalf("msgpack/v5 rejects our encoding: %v", err)
		}
		evs := generic[1].([]any)
		for i, gev := range evs {
			if in.Events[i].Kind == EventAllBlocksCleared {
				continue
			}
			var hs []any
			if m, ok := gev.(map[string]any); ok {
				hs = m["block_hashes"].([]any)
			} else {
				hs = gev.([]any)[1].([]any)
			}
			for j, h := range hs {
				var key uint64
				switch x := h.(type) {
				case []byte:
					key = KeyFromBytes(x)
				default:
					key = reflect.ValueOf(x).Convert(reflect.TypeOf(uint64(0))).Uint()
				}
				if key != in.Events[i].BlockHashes[j] {
					t.Fatalf("event %d hash %d: msgpack/v5 sees %d; want %d", i, j, key, in.Events[i].BlockHashes[j])
				}
			}
		}
	})
}

// sameFloat compares floats bit-for-bit (NaN equal to itself).
func sameFloat(a, b float64) bool { return a == b || (a != a && b != b) }

// FuzzDecodeBatch: the decoder never panics, and whatever it accepts
// re-encodes to bytes it decodes to the same re-encoding (a fixed point).
func FuzzDecodeBatch(f *testing.F) {
	for _, hx := range []string{
		// vllm-contract.md §3.2
		"93cb41d954fc40200000928ba474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657392cf2ceabcfae6d332eacf26470bbec927f5bfb1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f696473dc00200102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20aa626c6f636b5f73697a6510a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c0aa65787472615f6b65797392c0c0a967726f75705f69647800b26b765f63616368655f737065635f6b696e64ae66756c6c5f617474656e74696f6e84a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cf2ceabcfae6d332eaa66d656469756da3475055a967726f75705f6964780000",
		"93cb41d954fc40200000929cab426c6f636b53746f72656492cf2ceabcfae6d332eacf26470bbec927f5bfc0dc00200102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f2010c0a3475055c092c0c000ae66756c6c5f617474656e74696f6ec094ac426c6f636b52656d6f76656491cf2ceabcfae6d332eaa34750550000",
		"93cb41d954fc402000009184a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391c420202da172482d928bbc42ab25b0151e2b895f13f41002e27b2ceabcfae6d332eaa66d656469756da3475055a967726f75705f6964780000",
		"93cb41d954fc402000009191b0416c6c426c6f636b73436c656172656400",
		"93cb41d954fc402000009181a474797065b0416c6c426c6f636b73436c656172656400",
	} {
		raw, err := hex.DecodeString(hx)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var b Batch
		if err := b.Decode(payload); err != nil {
			return
		}
		first, err := AppendBatch(nil, &b, EncodeOptions{})
		if err != nil {
			t.Fatalf("re-encode of an accepted batch: %v", err)
		}
		var b2 Batch
		if err := b2.Decode(first); err != nil {
			t.Fatalf("decode of our own encoding: %v\n%x", err, first)
		}
		second, err := AppendBatch(nil, &b2, EncodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("not a fixed point\n first %x\nsecond %x", first, second)
		}
	})
}

package inventory

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// specBatch is the batch of vllm-contract.md §3.2, built by hand.
func specBatch(layout Layout) *Batch {
	toks := make([]uint32, 32)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	stored := Event{
		Kind:        EventBlockStored,
		BlockHashes: []uint64{3236607068019569386, 2758186210834249151},
		TokenIDs:    toks, BlockSize: 16,
		Medium: MediumGPU, HasMedium: true,
		ExtraKeys: []any{nil, nil}, HasExtraKeys: true,
		GroupIdx: 0, HasGroupIdx: true,
		SpecKind: SpecFullAttention, HasSpecKind: true,
	}
	removed := Event{
		Kind:        EventBlockRemoved,
		BlockHashes: []uint64{3236607068019569386},
		Medium:      MediumGPU, HasMedium: true,
		GroupIdx: 0, HasGroupIdx: true,
	}
	return &Batch{TS: 1700000000.5, DPRank: 0, HasDPRank: true, Events: []Event{stored, removed}}
}

func TestCodec_SpecPayloadsDecodeToTheDocumentedEvents(t *testing.T) {
	v := loadSpecVectors(t)
	digest := mustHex(t, "202da172482d928bbc42ab25b0151e2b895f13f41002e27b2ceabcfae6d332ea")
	dig, _ := DigestFromBytes(digest)
	tests := []struct {
		name string
		want []Event
	}{
		{"map_layout", specBatch(LayoutMap).Events},
		{"legacy_array_layout", specBatch(LayoutArray).Events},
		{"map_layout_bytes_hash_removed", []Event{{
			Kind: EventBlockRemoved, BlockHashes: []uint64{3236607068019569386}, BlockDigests: []Digest{dig},
			Medium: MediumGPU, HasMedium: true, HasGroupIdx: true,
		}}},
		{"legacy_all_blocks_cleared", []Event{{Kind: EventAllBlocksCleared}}},
		{"map_all_blocks_cleared", []Event{{Kind: EventAllBlocksCleared}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hx, ok := v.Payloads[tt.name]
			if !ok {
				t.Fatalf("payload %q missing from vectors", tt.name)
			}
			got, err := DecodeBatch(mustHex(t, hx))
			if err != nil {
				t.Fatal(err)
			}
			if got.TS != 1700000000.5 || !got.HasDPRank || got.DPRank != 0 {
				t.Fatalf("envelope ts=%v rank=%v/%v; want 1700000000.5 rank 0", got.TS, got.DPRank, got.HasDPRank)
			}
			if got.Unknown != 0 || got.Invalid != 0 {
				t.Fatalf("unknown=%d invalid=%d (%v); want 0", got.Unknown, got.Invalid, got.InvalidErr)
			}
			if len(got.Events) != len(tt.want) {
				t.Fatalf("got %d events; want %d", len(got.Events), len(tt.want))
			}
			for i := range tt.want {
				if !eventsEqual(got.Events[i], tt.want[i]) {
					t.Errorf("event %d\n got %+v\nwant %+v", i, got.Events[i], tt.want[i])
				}
			}
		})
	}
}

func TestCodec_EncoderReproducesSpecPayloadsByteForByte(t *testing.T) {
	v := loadSpecVectors(t)
	digest := mustHex(t, "202da172482d928bbc42ab25b0151e2b895f13f41002e27b2ceabcfae6d332ea")
	dig, _ := DigestFromBytes(digest)
	tests := []struct {
		name string
		give *Batch
		opts EncodeOptions
	}{
		{"map_layout", specBatch(LayoutMap), EncodeOptions{Layout: LayoutMap}},
		{"legacy_array_layout", specBatch(LayoutArray), EncodeOptions{Layout: LayoutArray}},
		{"map_layout_bytes_hash_removed", &Batch{TS: 1700000000.5, HasDPRank: true, Events: []Event{{
			Kind: EventBlockRemoved, BlockHashes: []uint64{dig.Key()}, BlockDigests: []Digest{dig},
			Medium: MediumGPU, HasMedium: true, HasGroupIdx: true,
		}}}, EncodeOptions{DigestHashes: true}},
		{"legacy_all_blocks_cleared", &Batch{TS: 1700000000.5, HasDPRank: true, Events: []Event{{Kind: EventAllBlocksCleared}}}, EncodeOptions{Layout: LayoutArray}},
		{"map_all_blocks_cleared", &Batch{TS: 1700000000.5, HasDPRank: true, Events: []Event{{Kind: EventAllBlocksCleared}}}, EncodeOptions{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AppendBatch(nil, tt.give, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			want := mustHex(t, v.Payloads[tt.name])
			if !bytes.Equal(got, want) {
				t.Fatalf("\n got %x\nwant %x", got, want)
			}
			// and decode -> encode is the identity on these bytes
			dec, err := DecodeBatch(want)
			if err != nil {
				t.Fatal(err)
			}
			again, err := AppendBatch(nil, dec, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, want) {
				t.Fatalf("round trip\n got %x\nwant %x", again, want)
			}
		})
	}
}

// eventsEqual compares events field by field (slices by content).
func eventsEqual(a, b Event) bool {
	if len(a.BlockHashes) == 0 && len(b.BlockHashes) == 0 {
		a.BlockHashes, b.BlockHashes = nil, nil
	}
	if len(a.TokenIDs) == 0 && len(b.TokenIDs) == 0 {
		a.TokenIDs, b.TokenIDs = nil, nil
	}
	if len(a.BlockDigests) == 0 && len(b.BlockDigests) == 0 {
		a.BlockDigests, b.BlockDigests = nil, nil
	}
	if len(a.ExtraKeys) == 0 && len(b.ExtraKeys) == 0 {
		a.ExtraKeys, b.ExtraKeys = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// mp encodes a Go value with msgpack/v5 (an independent encoder) using
// compact ints, for building unusual payloads.
func mp(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("msgpack encode: %v", err)
	}
	return buf.Bytes()
}

func TestCodec_DecodesEveryHashAndLayoutVariant(t *testing.T) {
	digest32 := bytes.Repeat([]byte{0xab}, 24)
	digest32 = append(digest32, 1, 2, 3, 4, 5, 6, 7, 8)
	digest16 := append(bytes.Repeat([]byte{0xcd}, 8), 8, 7, 6, 5, 4, 3, 2, 1)
	tests := []struct {
		name        string
		give        any
		wantHashes  []uint64
		wantParent  uint64
		wantTokens  int
		wantUnknown int
		wantInvalid int
	}{
		{"map event, uint8/16/32/64 hashes",
			[]any{1.5, []any{map[string]any{"type": "BlockStored", "block_hashes": []any{uint8(7), uint16(300), uint32(70000), uint64(math.MaxUint64)}, "parent_block_hash": nil, "token_ids": []any{1, 2}, "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil}}, 0},
			[]uint64{7, 300, 70000, math.MaxUint64}, 0, 2, 0, 0},
		{"negative int64 hash keeps its bit pattern",
			[]any{1.5, []any{[]any{"BlockRemoved", []any{int64(-2)}, "GPU"}}, 0},
			[]uint64{math.MaxUint64 - 1}, 0, 0, 0, 0},
		{"32-byte and 16-byte digests take the last 8 bytes",
			[]any{1.5, []any{[]any{"BlockStored", []any{digest32, digest16}, digest16, []any{}, 16, nil, "GPU"}}, 0},
			[]uint64{0x0102030405060708, 0x0807060504030201}, 0x0807060504030201, 0, 0, 0},
		{"legacy 6-element BlockStored (v0.9)",
			[]any{1.5, []any{[]any{"BlockStored", []any{5}, 4, []any{9, 9}, 16, nil}}, nil},
			[]uint64{5}, 4, 2, 0, 0},
		{"legacy array with extra trailing fields",
			[]any{1.5, []any{[]any{"BlockStored", []any{5}, nil, []any{}, 16, nil, "GPU", nil, nil, 0, "full_attention", nil, "future", 1, 2}}, 0},
			[]uint64{5}, 0, 0, 0, 0},
		{"two-element envelope (no dp rank)",
			[]any{1.5, []any{[]any{"BlockRemoved", []any{1}}}},
			[]uint64{1}, 0, 0, 0, 0},
		{"map envelope",
			map[string]any{"ts": 1.5, "events": []any{[]any{"BlockRemoved", []any{3}, "GPU", 0}}, "data_parallel_rank": 2},
			[]uint64{3}, 0, 0, 0, 0},
		{"unknown tags and unknown keys are skipped",
			[]any{1.5, []any{[]any{"Future", 1, 2}, map[string]any{"type": "Other"}, map[string]any{"type": "BlockRemoved", "block_hashes": []any{4}, "medium": "GPU", "locality": map[string]any{"x": 1}}}, 0},
			[]uint64{4}, 0, 0, 2, 0},
		{"a bin shorter than 8 bytes invalidates only its event",
			[]any{1.5, []any{[]any{"BlockRemoved", []any{[]byte{1, 2, 3}}, "GPU"}, []any{"BlockRemoved", []any{6}, "GPU"}}, 0},
			[]uint64{6}, 0, 0, 0, 1},
		{"a string hash invalidates its event",
			[]any{1.5, []any{[]any{"BlockRemoved", []any{"x"}, "GPU"}, []any{"BlockRemoved", []any{6}, "GPU"}}, 0},
			[]uint64{6}, 0, 0, 0, 1},
		{"a negative token invalidates its event",
			[]any{1.5, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 1, nil, "GPU"}, []any{"BlockRemoved", []any{6}, "GPU"}}, 0},
			[]uint64{6}, 0, 0, 0, 1},
		{"an event without block_hashes is invalid",
			[]any{1.5, []any{map[string]any{"type": "BlockRemoved", "medium": "GPU"}, []any{"BlockRemoved", []any{6}, "GPU"}}, 0},
			[]uint64{6}, 0, 0, 0, 1},
		{"an untagged map event is invalid",
			[]any{1.5, []any{map[string]any{"block_hashes": []any{1}}, []any{"BlockRemoved", []any{6}, "GPU"}}, 0},
			[]uint64{6}, 0, 0, 0, 1},
		{"a scalar event is invalid",
			[]any{1.5, []any{42, []any{"BlockRemoved", []any{6}, "GPU"}}, 0},
			[]uint64{6}, 0, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := DecodeBatch(mp(t, tt.give))
			if err != nil {
				t.Fatal(err)
			}
			var hashes []uint64
			var parent uint64
			tokens := 0
			for _, ev := range b.Events {
				hashes = append(hashes, ev.BlockHashes...)
				parent |= ev.Parent
				tokens += len(ev.TokenIDs)
			}
			if !reflect.DeepEqual(hashes, tt.wantHashes) {
				t.Errorf("hashes %v; want %v", hashes, tt.wantHashes)
			}
			if parent != tt.wantParent || tokens != tt.wantTokens {
				t.Errorf("parent %d tokens %d; want %d, %d", parent, tokens, tt.wantParent, tt.wantTokens)
			}
			if b.Unknown != tt.wantUnknown || b.Invalid != tt.wantInvalid {
				t.Errorf("unknown %d invalid %d (%v); want %d, %d", b.Unknown, b.Invalid, b.InvalidErr, tt.wantUnknown, tt.wantInvalid)
			}
			if tt.wantInvalid > 0 && !errors.Is(b.InvalidErr, ErrMalformed) {
				t.Errorf("InvalidErr %v; want ErrMalformed", b.InvalidErr)
			}
		})
	}
}

func TestCodec_MapEventsOmitDefaultsAndLegacyEventsPadWithNil(t *testing.T) {
	b, err := DecodeBatch(mp(t, []any{1.0, []any{
		map[string]any{"type": "BlockStored", "block_hashes": []any{1}, "parent_block_hash": nil, "token_ids": []any{1}, "block_size": 1, "lora_id": 3, "medium": "CPU", "lora_name": "l"},
		[]any{"BlockStored", []any{2}, nil, []any{2}, 1, nil, nil},
	}, 0}))
	if err != nil {
		t.Fatal(err)
	}
	m, l := b.Events[0], b.Events[1]
	if m.HasExtraKeys || m.HasGroupIdx || m.HasSpecKind || !m.HasLoRAID || m.LoRAID != 3 || m.Medium != "CPU" || m.LoRAName != "l" {
		t.Errorf("map event %+v", m)
	}
	if l.HasMedium || l.HasLoRAName || l.HasExtraKeys || l.HasGroupIdx {
		t.Errorf("legacy event %+v; want trailing fields absent", l)
	}
}

func TestCodec_DecodesExtraKeysAsGenericTuples(t *testing.T) {
	b, err := DecodeBatch(mp(t, []any{1.0, []any{
		[]any{"BlockStored", []any{1, 2}, nil, []any{1, 2}, 1, nil, "GPU", "lora", []any{[]any{"lora", []any{"mm", -12}, []byte{9}}, nil}, 0, "full_attention"},
	}, 0}))
	if err != nil {
		t.Fatal(err)
	}
	want := []any{[]any{"lora", []any{"mm", int64(-12)}, []byte{9}}, nil}
	if got := b.Events[0].ExtraKeys; !reflect.DeepEqual(got, want) {
		t.Fatalf("extra keys %#v; want %#v", got, want)
	}
}

func TestCodec_RejectsUnusablePayloads(t *testing.T) {
	tests := []struct {
		name string
		give []byte
	}{
		{"empty", nil},
		{"scalar", []byte{0x01}},
		{"one-element envelope", []byte{0x91, 0xc0}},
		{"events not an array", mp(t, []any{1.0, 5, 0})},
		{"map envelope without events", mp(t, map[string]any{"ts": 1.0})},
		{"truncated", mustHex(t, "93cb41d954fc402000009291b0416c6c426c6f636b73436c6561726564")},
		{"trailing garbage", append(mp(t, []any{1.0, []any{}, 0}), 0x00)},
		{"array length beyond payload", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
		{"invalid code", []byte{0x93, 0xc1, 0x90, 0x00}},
		{"deep nesting", append(append([]byte{0x93, 0x00, 0x91, 0x92, 0xa1, 'X'}, bytes.Repeat([]byte{0x91}, 100)...), 0x00, 0x00)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Batch
			err := b.Decode(tt.give)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v; want ErrMalformed", err)
			}
			if len(b.Events) != 0 {
				t.Fatalf("got %d events after a failed decode; want 0", len(b.Events))
			}
		})
	}
}

func TestCodec_ParseFrameChecksShape(t *testing.T) {
	seq := binary.BigEndian.AppendUint64(nil, 42)
	if f, err := ParseFrame([][]byte{[]byte("kv@x"), seq, {0x90}}); err != nil || f.Seq != 42 || string(f.Topic) != "kv@x" {
		t.Fatalf("got %+v, %v; want seq 42 topic kv@x", f, err)
	}
	for _, bad := range [][][]byte{{seq, {0x90}}, {nil, seq[:7], {0x90}}, {nil, seq, {0x90}, nil}} {
		if _, err := ParseFrame(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseFrame(%d frames) = %v; want ErrMalformed", len(bad), err)
		}
	}
}

func TestCodec_DecodeReusesStorageWithoutAllocating(t *testing.T) {
	payload, err := AppendBatch(nil, specBatch(LayoutMap), EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	if err := b.Decode(payload); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(50, func() {
		if err := b.Decode(payload); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("got %.1f allocs per decode; want 0", allocs)
	}
}

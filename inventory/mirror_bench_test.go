package inventory

import (
	"fmt"
	"runtime"
	"testing"
)

// ingestPayloads builds n encoded batches; batch i stores run i (events of
// blocksPerEvent blocks, real sha256_cbor keys) and removes the blocks run
// i-n/2 stored, so cycling through them keeps the mirror at a steady size.
func ingestPayloads(b *testing.B, n, eventsPerBatch, blocksPerEvent int) ([][]byte, int) {
	b.Helper()
	h, err := NewHasher(AlgoSHA256CBOR, 16, "0")
	if err != nil {
		b.Fatal(err)
	}
	eng := engine{h: h}
	runs := make([][]Event, n)
	for i := range runs {
		for e := 0; e < eventsPerBatch; e++ {
			toks := seqTokens((i*eventsPerBatch+e)*blocksPerEvent*16, blocksPerEvent*16)
			runs[i] = append(runs[i], eng.store(b, toks, 0, ExtraKeys{}))
		}
	}
	payloads := make([][]byte, n)
	blocks := 0
	for i := range runs {
		evs := append([]Event(nil), runs[i]...)
		for _, old := range runs[(i+n/2)%n] {
			evs = append(evs, removed(old.BlockHashes...))
		}
		batch := &Batch{TS: 1.5, HasDPRank: true, Events: evs}
		blocks += batch.NumBlocks()
		if payloads[i], err = AppendBatch(nil, batch, EncodeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return payloads, blocks / n
}

// BenchmarkIngest measures decode + apply per batch (target >= 1M blocks/s
// per core). blocks counts stored and removed blocks.
func BenchmarkIngest(b *testing.B) {
	for _, shape := range []struct{ events, blocks int }{{16, 1}, {8, 16}, {2, 128}} {
		payloads, perBatch := ingestPayloads(b, 64, shape.events, shape.blocks)
		// exact_fresh decodes every payload into a new Batch, as the Feed
		// does (a Batch's ownership passes to the sink).
		for _, mode := range []string{"exact", "exact_fresh", "token"} {
			b.Run(fmt.Sprintf("%s/events=%d/blocks_per_event=%d", mode, shape.events, shape.blocks), func(b *testing.B) {
				var keys ChainHasher = mustHasher(b, AlgoSHA256CBOR)
				if mode == "token" {
					keys = mustTokenHasher(b, 16)
				}
				m := newTestMirror(b, keys, 0)
				var batch Batch
				for _, p := range payloads { // warm the tables
					if err := batch.Decode(p); err != nil {
						b.Fatal(err)
					}
					m.Apply(&batch)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					bp := &batch
					if mode == "exact_fresh" {
						bp = new(Batch)
					}
					if err := bp.Decode(payloads[i%len(payloads)]); err != nil {
						b.Fatal(err)
					}
					m.Apply(bp)
					i++
				}
				b.ReportMetric(float64(perBatch*b.N)/b.Elapsed().Seconds(), "blocks/s")
				if m.Contract().Tripped {
					b.Fatalf("contract tripped: %+v", m.Contract())
				}
			})
		}
	}
}

// BenchmarkMirrorMemory measures heap bytes per mirrored block (target
// <= 32 in exact mode), against a Go map for reference. 104858 blocks is
// the table's worst point (just grown: load 2/5), 209715 its best (4/5).
func BenchmarkMirrorMemory(b *testing.B) {
	for _, n := range []int{104_858, 209_715, 1_000_000} {
		keysOf := func(i int) uint64 { return uint64(i)*0x9E3779B97F4A7C15 + 12345 }
		b.Run(fmt.Sprintf("exact/blocks=%d", n), func(b *testing.B) {
			for b.Loop() {
				before := heapInUse()
				m, err := NewMirror(MirrorConfig{Keys: mustHasher(b, AlgoSHA256CBOR), MaxBlocks: n})
				if err != nil {
					b.Fatal(err)
				}
				ev := Event{Kind: EventBlockStored, BlockHashes: make([]uint64, 1)}
				batch := &Batch{Events: []Event{ev}}
				for i := 0; i < n; i++ {
					batch.Events[0].BlockHashes[0] = keysOf(i)
					m.Apply(batch)
				}
				after := heapInUse()
				b.ReportMetric(float64(after-before)/float64(m.Len()), "bytes/block")
				b.ReportMetric(float64(m.Stats().MemBytes)/float64(m.Len()), "table_bytes/block")
				runtime.KeepAlive(m)
				m.Close()
			}
		})
		b.Run(fmt.Sprintf("token/blocks=%d", n), func(b *testing.B) {
			th := mustTokenHasher(b, 1)
			for b.Loop() {
				before := heapInUse()
				m, err := NewMirror(MirrorConfig{Keys: th, MaxBlocks: n})
				if err != nil {
					b.Fatal(err)
				}
				ev := Event{Kind: EventBlockStored, BlockHashes: make([]uint64, 1), TokenIDs: make([]uint32, 1), BlockSize: 1}
				batch := &Batch{Events: []Event{ev}}
				for i := 0; i < n; i++ {
					batch.Events[0].BlockHashes[0] = keysOf(i)
					batch.Events[0].TokenIDs[0] = uint32(i)
					m.Apply(batch)
				}
				after := heapInUse()
				b.ReportMetric(float64(after-before)/float64(m.Len()), "bytes/block")
				runtime.KeepAlive(m)
				m.Close()
			}
		})
		b.Run(fmt.Sprintf("go_map_reference/blocks=%d", n), func(b *testing.B) {
			for b.Loop() {
				before := heapInUse()
				mp := map[uint64]uint32{}
				for i := 0; i < n; i++ {
					mp[keysOf(i)]++
				}
				after := heapInUse()
				b.ReportMetric(float64(after-before)/float64(len(mp)), "bytes/block")
				runtime.KeepAlive(mp)
			}
		})
	}
}

// heapInUse is the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

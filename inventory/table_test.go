package inventory

import (
	"testing"

	"pgregory.net/rapid"
)

// TestBlockTable_MatchesMapModel drives the table and a map with the same
// random operations (keys from a small pool, so collisions, re-stores and
// backward shifts are frequent) and checks they always agree.
func TestBlockTable_MatchesMapModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		withVals := rapid.Bool().Draw(t, "vals")
		tbl := newBlockTable(withVals)
		model := map[uint64]uint32{}
		vals := map[uint64]uint64{}
		pool := rapid.SliceOfNDistinct(rapid.Uint64(), 1, 600, rapid.ID[uint64]).Draw(t, "pool")
		key := rapid.SampledFrom(pool)
		ops := rapid.IntRange(1, 3000).Draw(t, "ops")
		for op := 0; op < ops; op++ {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2, 3, 4:
				k := key.Draw(t, "k")
				_, added := tbl.inc(k, k^0xabc)
				if added != (model[k] == 0) {
					t.Fatalf("inc(%d) added=%v; model count %d", k, added, model[k])
				}
				if added {
					vals[k] = k ^ 0xabc
				}
				model[k]++
			case 5, 6, 7:
				k := key.Draw(t, "k")
				i := tbl.find(k)
				if (i >= 0) != (model[k] > 0) {
					t.Fatalf("find(%d)=%d; model count %d", k, i, model[k])
				}
				if i >= 0 {
					by := uint32(rapid.IntRange(1, 3).Draw(t, "by"))
					deleted := tbl.dec(i, by)
					if by >= model[k] {
						delete(model, k)
						if !deleted {
							t.Fatalf("dec(%d, %d) kept the key; model count was lower", k, by)
						}
					} else {
						model[k] -= by
					}
				}
			case 8:
				k, c, v, ok := tbl.evict()
				if ok != (len(model) > 0) {
					t.Fatalf("evict ok=%v with %d keys", ok, len(model))
				}
				if ok {
					if model[k] != c {
						t.Fatalf("evicted %d with count %d; model %d", k, c, model[k])
					}
					if withVals && v != vals[k] {
						t.Fatalf("evicted value %d; want %d", v, vals[k])
					}
					delete(model, k)
				}
			case 9:
				if rapid.IntRange(0, 50).Draw(t, "reset?") == 0 {
					tbl.reset()
					clear(model)
				}
			}
		}
		if tbl.n != len(model) {
			t.Fatalf("table holds %d keys; model %d", tbl.n, len(model))
		}
		for k, c := range model {
			i := tbl.find(k)
			if i < 0 || tbl.count(i) != c {
				t.Fatalf("key %d: slot %d count %d; want %d", k, i, tbl.count(max(i, 0)), c)
			}
			if withVals && tbl.vals[i] != vals[k] {
				t.Fatalf("key %d value %d; want %d", k, tbl.vals[i], vals[k])
			}
		}
		if got := len(tbl.appendKeys(nil, 0, 1<<30)); got != len(model) {
			t.Fatalf("listed %d keys; want %d", got, len(model))
		}
	})
}

func TestBlockTable_ClockEvictsKeysNotStoredAgainFirst(t *testing.T) {
	tbl := newBlockTable(false)
	for k := uint64(1); k <= 100; k++ {
		tbl.inc(k, 0)
	}
	// One eviction sweeps every reference bit clear, then evicts.
	first, _, _, _ := tbl.evict()
	// Re-store half the keys: they get a second chance.
	for k := uint64(1); k <= 100; k += 2 {
		if k != first {
			tbl.inc(k, 0)
		}
	}
	for n := 0; n < 40; n++ {
		k, _, _, ok := tbl.evict()
		if !ok {
			t.Fatal("evict failed with keys present")
		}
		if k%2 == 1 {
			t.Fatalf("evicted re-stored key %d while never-re-stored keys remain", k)
		}
	}
}

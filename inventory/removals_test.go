package inventory

import "testing"

// TestMirror_RemembersWhatItRemovedSinceAMark: RemovedSince finds a key
// whose last reference a GPU removal took after the mark, in both modes
// (token-keyed mode answers in its own keys, the ones a chain holds), and
// nothing for a removal before the mark, a key still referenced, or an
// offload-tier removal.
func TestMirror_RemembersWhatItRemovedSinceAMark(t *testing.T) {
	h := mustExactHasher(t, "0")
	eng := engine{h: h}
	toks := seqTokens(1, 16) // 4 blocks of 4
	for _, tc := range []struct {
		name string
		keys ChainHasher
	}{{"exact", h}, {"token", mustTokenHasher(t, 4)}} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMirror(t, tc.keys, 0)
			run := eng.store(t, toks, 0, ExtraKeys{})
			chain := tc.keys.AppendBlockKeys(nil, toks, ExtraKeys{})
			m.Apply(batchOf(run, eng.store(t, toks[:4], 0, ExtraKeys{}))) // block 0 twice
			m.Apply(batchOf(removed(run.BlockHashes[3])))
			mark := m.Removals()
			if mark != 1 {
				t.Fatalf("Removals %d; want 1", mark)
			}
			if found, complete := m.RemovedSince(mark, chain); found || !complete {
				t.Fatalf("RemovedSince(mark) = %v, %v before any later removal; want false, true", found, complete)
			}
			if found, _ := m.RemovedSince(0, chain[3:]); !found {
				t.Fatal("the removal before the mark is not found from 0")
			}
			cpu := removed(run.BlockHashes[2])
			cpu.Medium = MediumCPU
			m.Apply(batchOf(removed(run.BlockHashes[0]), cpu)) // block 0 still held once; a CPU removal
			if found, _ := m.RemovedSince(mark, chain); found || m.Removals() != mark {
				t.Fatalf("found %v, Removals %d after removing a block held twice once and a CPU block; want nothing logged", found, m.Removals())
			}
			m.Apply(batchOf(removed(run.BlockHashes[1])))
			if found, complete := m.RemovedSince(mark, chain[1:3]); !found || !complete {
				t.Fatalf("RemovedSince = %v, %v after removing block 1; want true, true", found, complete)
			}
			if found, _ := m.RemovedSince(mark, chain[2:3]); found {
				t.Fatal("block 2 found; only block 1 was removed since the mark")
			}
		})
	}
}

// TestRemovalLog_ForgetsTheOldestAndSaysSo: past removalLogSize removals
// since a mark, the ring answers from what it still holds and reports it
// incomplete.
func TestRemovalLog_ForgetsTheOldestAndSaysSo(t *testing.T) {
	var l removalLog
	for k := range uint64(removalLogSize + 10) {
		l.add(k + 1)
	}
	if found, complete := l.since(0, []uint64{5}); found || complete {
		t.Fatalf("an overwritten key: %v, %v; want false, false", found, complete)
	}
	if found, complete := l.since(0, []uint64{removalLogSize}); !found || complete {
		t.Fatalf("a key the ring holds: %v, %v; want true, false", found, complete)
	}
	if found, complete := l.since(20, []uint64{removalLogSize + 10}); !found || !complete {
		t.Fatalf("the newest key since 20: %v, %v; want true, true", found, complete)
	}
	if found, complete := l.since(removalLogSize+10, []uint64{removalLogSize + 10}); found || !complete {
		t.Fatalf("nothing since the last removal: %v, %v; want false, true", found, complete)
	}
}

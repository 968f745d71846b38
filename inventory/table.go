package inventory

import "math/bits"

// blockTable is an open-addressing hash table from a 64-bit block key to a
// reference count (and, in token-keyed mode, a 64-bit value), built for the
// mirror's memory budget: parallel arrays of 8-byte keys and 4-byte meta
// words (12 bytes a slot, 20 with values), linear probing, backward-shift
// deletion (no tombstones), a load factor kept in (2/5, 4/5], so 15 to 30
// bytes per block in exact mode (a Go map[uint64]uint32 measures 22 to 38
// and would need a separate structure for eviction order).
//
// Eviction is CLOCK (second chance) over the slots themselves: inserting or
// re-storing a key sets its reference bit; the hand clears set bits and
// evicts the first key whose bit is already clear. That approximates
// "evict the oldest block not stored again since", with no extra memory.
//
// Invariant: meta[i] == 0 exactly when slot i is empty; a present key has a
// count >= 1.
// Invariant: n <= len(keys)*4/5.
// Single owner; no locks.
type blockTable struct {
	keys  []uint64
	meta  []uint32 // 0 = empty; low 31 bits = refcount; metaRef = clock bit
	vals  []uint64 // nil unless the table carries values
	shift uint8    // 64 - log2(len(keys))
	n     int      // occupied slots
	hand  int      // clock hand
}

const (
	metaRef       uint32 = 1 << 31
	metaCount     uint32 = metaRef - 1
	minTableSlots        = 256
)

// newBlockTable allocates an empty table.
func newBlockTable(withVals bool) blockTable {
	var t blockTable
	t.alloc(minTableSlots, withVals)
	return t
}

func (t *blockTable) alloc(slots int, withVals bool) {
	t.keys = make([]uint64, slots)
	t.meta = make([]uint32, slots)
	if withVals {
		t.vals = make([]uint64, slots)
	} else {
		t.vals = nil
	}
	t.shift = uint8(64 - bits.TrailingZeros(uint(slots)))
	t.n, t.hand = 0, 0
}

// home is the preferred slot of k (Fibonacci hashing, so low-entropy keys
// such as small test integers still spread).
func (t *blockTable) home(k uint64) int {
	return int((k * 0x9E3779B97F4A7C15) >> t.shift)
}

// find returns k's slot, or -1.
func (t *blockTable) find(k uint64) int {
	mask := len(t.keys) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		if t.meta[i] == 0 {
			return -1
		}
		if t.keys[i] == k {
			return i
		}
	}
}

// count is the reference count at slot i.
func (t *blockTable) count(i int) uint32 { return t.meta[i] & metaCount }

// inc adds one reference to k (inserting it with value v if absent) and
// marks it recently stored. It returns k's slot and whether k was new. The
// caller enforces the block cap before inserting new keys.
func (t *blockTable) inc(k, v uint64) (int, bool) {
	if (t.n+1)*5 > len(t.keys)*4 {
		t.grow()
	}
	mask := len(t.keys) - 1
	i := t.home(k)
	for ; t.meta[i] != 0; i = (i + 1) & mask {
		if t.keys[i] == k {
			if c := t.meta[i] & metaCount; c < metaCount {
				t.meta[i] = (c + 1) | metaRef
			}
			return i, false
		}
	}
	t.keys[i], t.meta[i] = k, 1|metaRef
	if t.vals != nil {
		t.vals[i] = v
	}
	t.n++
	return i, true
}

// dec drops by references from slot i, deleting the key when none remain.
// It reports whether the key was deleted.
func (t *blockTable) dec(i int, by uint32) bool {
	c := t.meta[i] & metaCount
	if by < c {
		t.meta[i] = (c - by) | (t.meta[i] & metaRef)
		return false
	}
	t.deleteAt(i)
	return true
}

// deleteAt empties slot i, shifting later entries of its probe run back so
// lookups never need tombstones.
func (t *blockTable) deleteAt(i int) {
	mask := len(t.keys) - 1
	j := i
	for {
		j = (j + 1) & mask
		if t.meta[j] == 0 {
			break
		}
		h := t.home(t.keys[j])
		// Entry j stays if its home lies cyclically in (i, j].
		if (i <= j && i < h && h <= j) || (i > j && (i < h || h <= j)) {
			continue
		}
		t.keys[i], t.meta[i] = t.keys[j], t.meta[j]
		if t.vals != nil {
			t.vals[i] = t.vals[j]
		}
		i = j
	}
	t.keys[i], t.meta[i] = 0, 0
	if t.vals != nil {
		t.vals[i] = 0
	}
	t.n--
}

// evict removes one key chosen by the clock and returns it with its count
// and value. ok is false only for an empty table.
func (t *blockTable) evict() (k uint64, c uint32, v uint64, ok bool) {
	if t.n == 0 {
		return 0, 0, 0, false
	}
	mask := len(t.keys) - 1
	for {
		i := t.hand
		if m := t.meta[i]; m != 0 {
			if m&metaRef != 0 {
				t.meta[i] = m &^ metaRef
			} else {
				k, c = t.keys[i], m&metaCount
				if t.vals != nil {
					v = t.vals[i]
				}
				t.deleteAt(i) // the hand stays: a shifted entry may now sit here
				return k, c, v, true
			}
		}
		t.hand = (i + 1) & mask
	}
}

// grow doubles the slot count and reinserts every key.
func (t *blockTable) grow() {
	oldKeys, oldMeta, oldVals := t.keys, t.meta, t.vals
	t.alloc(2*len(oldKeys), oldVals != nil)
	mask := len(t.keys) - 1
	for j, m := range oldMeta {
		if m == 0 {
			continue
		}
		i := t.home(oldKeys[j])
		for t.meta[i] != 0 {
			i = (i + 1) & mask
		}
		t.keys[i], t.meta[i] = oldKeys[j], m
		if oldVals != nil {
			t.vals[i] = oldVals[j]
		}
		t.n++
	}
}

// reset empties the table, shrinking it back to the minimum size (a
// cleared publisher refills gradually; holding a million-slot table for an
// empty mirror would waste the memory the cap exists to bound).
func (t *blockTable) reset() {
	t.alloc(minTableSlots, t.vals != nil)
}

// appendKeys appends up to limit keys after skipping offset present keys,
// in slot order, with the total.
func (t *blockTable) appendKeys(dst []uint64, offset, limit int) []uint64 {
	for i, m := range t.meta {
		if m == 0 {
			continue
		}
		if offset > 0 {
			offset--
			continue
		}
		if limit <= 0 {
			break
		}
		dst = append(dst, t.keys[i])
		limit--
	}
	return dst
}

// memBytes is the table's slot memory.
func (t *blockTable) memBytes() int {
	return 12*len(t.keys) + 8*len(t.vals)
}

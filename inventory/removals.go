package inventory

// removalLogSize is how many of the latest removals a mirror remembers
// (32 KiB of keys). Cache truth asks about removals applied after a routing
// decision, up to a quarter of a second after the engine answered; an
// engine evicting faster than that fills the ring, and a question about
// removals it no longer holds gets "incomplete".
const removalLogSize = 4096

// removalLog is a ring of the scorable keys the latest GPU removals took out
// of the mirror, numbered by a count that only grows (a resync or a clear
// does not reset it). A key is logged when its last reference goes.
type removalLog struct {
	keys []uint64 // allocated at the first removal
	n    uint64   // removals logged so far
}

func (l *removalLog) add(k uint64) {
	if l.keys == nil {
		l.keys = make([]uint64, removalLogSize)
	}
	l.keys[l.n%removalLogSize] = k
	l.n++
}

// since reports whether a key of keys was logged after the first since
// removals, and whether the ring still holds every removal after since.
func (l *removalLog) since(since uint64, keys []uint64) (found, complete bool) {
	if since >= l.n {
		return false, true
	}
	from := since
	complete = l.n-since <= removalLogSize
	if !complete {
		from = l.n - removalLogSize
	}
	for i := from; i < l.n; i++ {
		k := l.keys[i%removalLogSize]
		for _, want := range keys {
			if k == want {
				return true, complete
			}
		}
	}
	return false, complete
}

// Removals is how many scorable keys GPU removals have taken out of the
// mirror so far: a mark to ask RemovedSince about later.
func (m *Mirror) Removals() uint64 { return m.removed.n }

// RemovedSince reports whether a GPU removal applied after mark (a Removals
// value) took one of keys (scorable keys, as in a Score chain) out of the
// mirror, and whether the mirror still remembers every removal since mark.
// Cache truth uses it to tell an over-prediction that raced an eviction
// (the engine had dropped a block whose BlockRemoved was still on the way
// when llb decided) from one that is wrong.
func (m *Mirror) RemovedSince(mark uint64, keys []uint64) (found, complete bool) {
	return m.removed.since(mark, keys)
}

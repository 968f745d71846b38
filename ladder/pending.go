package ladder

import "time"

// Pending placements: the headroom law's memory of where a prefix key was
// sent last. A request's blocks reach llb's inventory only when the engine
// has computed them and its KV events arrive — a prefill later. Until then
// a second request with the same prefix finds no overlap anywhere; without
// this memory it would fall to the rule's selector (round robin) and copy
// the prefix onto another endpoint. With it, the second request follows the
// first one, where the blocks are about to appear (llm-d's speculative
// index entries and Dynamo's predicted blocks serve the same purpose).

const (
	// PendingTTL is how long a placement is remembered: long enough to
	// cover a prefill and the KV events' delivery, short enough that a
	// stale entry (the blocks evicted since) soon stops steering. llm-d's
	// speculative entries live 2 s as well.
	PendingTTL = 2 * time.Second
	// pendingSlots is the table size; a key takes slot key mod pendingSlots
	// and a colliding key simply replaces it (the table is a hint).
	pendingSlots = 1024
)

type pendingEntry struct {
	key uint64
	at  time.Time
	ep  int8
	set bool
}

// pendingTable is a direct-mapped, fixed-size table of recent placements
// keyed by prefix hash. It never allocates. Owned by its Router.
type pendingTable struct {
	slots [pendingSlots]pendingEntry
}

// note records that key was sent to ep at now.
func (t *pendingTable) note(now time.Time, key uint64, ep int) {
	if ep < 0 || ep >= MaxEndpoints {
		return
	}
	t.slots[key%pendingSlots] = pendingEntry{key: key, at: now, ep: int8(ep), set: true}
}

// lookup returns where key was sent within PendingTTL before now.
func (t *pendingTable) lookup(now time.Time, key uint64) (int, bool) {
	e := &t.slots[key%pendingSlots]
	if !e.set || e.key != key || now.Sub(e.at) > PendingTTL || now.Before(e.at) {
		return -1, false
	}
	return int(e.ep), true
}

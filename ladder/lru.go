package ladder

import (
	"strings"
	"time"
)

// lruTable is a string-keyed table with a sliding TTL and an LRU size cap,
// the storage of session shards and the persist selector. Not safe for
// concurrent use: it belongs to one owner.
//
// Invariant: the list runs from head (most recently used) to tail (least),
// and every entry's last access is no later than its predecessor's, so the
// expired entries are always a suffix of the list.
type lruTable[V any] struct {
	m          map[string]*lruEntry[V]
	head, tail *lruEntry[V]
	free       *lruEntry[V] // recycled entries, linked through next
	cap        int
	ttl        time.Duration
}

type lruEntry[V any] struct {
	key        string
	val        V
	last       time.Time
	prev, next *lruEntry[V]
}

func newLRUTable[V any](capacity int, ttl time.Duration) lruTable[V] {
	if capacity < 1 {
		capacity = 1
	}
	return lruTable[V]{m: make(map[string]*lruEntry[V]), cap: capacity, ttl: ttl}
}

// expired reports an entry idle for longer than the TTL; a table without a
// TTL (0) expires nothing.
func (t *lruTable[V]) expired(e *lruEntry[V], now time.Time) bool {
	return t.ttl > 0 && now.Sub(e.last) > t.ttl
}

// get returns the live value for key and refreshes its access time; an
// expired entry is removed and reported missing.
func (t *lruTable[V]) get(now time.Time, key string) (V, bool) {
	e, ok := t.m[key]
	if !ok {
		var zero V
		return zero, false
	}
	if t.expired(e, now) {
		t.remove(e)
		var zero V
		return zero, false
	}
	e.last = now
	t.moveFront(e)
	return e.val, true
}

// put inserts or replaces key, evicting the least recently used entry when
// the table is full. It reports the evicted key count (0 or 1).
func (t *lruTable[V]) put(now time.Time, key string, v V) int {
	if e, ok := t.m[key]; ok {
		e.val, e.last = v, now
		t.moveFront(e)
		return 0
	}
	evicted := 0
	if len(t.m) >= t.cap && t.tail != nil {
		t.remove(t.tail)
		evicted = 1
	}
	e := t.free
	if e != nil {
		t.free = e.next
		e.next = nil
	} else {
		e = new(lruEntry[V])
	}
	e.key, e.val, e.last = strings.Clone(key), v, now
	t.m[e.key] = e
	t.pushFront(e)
	return evicted
}

func (t *lruTable[V]) evict(key string) bool {
	e, ok := t.m[key]
	if !ok {
		return false
	}
	t.remove(e)
	return true
}

// evictIf removes every entry whose value matches and returns the count.
func (t *lruTable[V]) evictIf(match func(V) bool) int {
	n := 0
	for e := t.head; e != nil; {
		next := e.next
		if match(e.val) {
			t.remove(e)
			n++
		}
		e = next
	}
	return n
}

// sweep removes the expired suffix and returns how many entries it dropped.
func (t *lruTable[V]) sweep(now time.Time) int {
	n := 0
	for t.tail != nil && t.expired(t.tail, now) {
		t.remove(t.tail)
		n++
	}
	return n
}

func (t *lruTable[V]) len() int { return len(t.m) }

func (t *lruTable[V]) pushFront(e *lruEntry[V]) {
	e.prev, e.next = nil, t.head
	if t.head != nil {
		t.head.prev = e
	}
	t.head = e
	if t.tail == nil {
		t.tail = e
	}
}

func (t *lruTable[V]) unlink(e *lruEntry[V]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (t *lruTable[V]) moveFront(e *lruEntry[V]) {
	if t.head == e {
		return
	}
	t.unlink(e)
	t.pushFront(e)
}

func (t *lruTable[V]) remove(e *lruEntry[V]) {
	t.unlink(e)
	delete(t.m, e.key)
	var zero V
	e.key, e.val = "", zero
	e.next = t.free
	t.free = e
}

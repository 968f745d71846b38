package ladder

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"sort"
)

// Tier 1: LoxiLB's radix trie of routed prompt prefixes (bytes, no
// tokenization). An entry maps a prompt prefix to the endpoint that last
// served it; Match returns the deepest entry on the prompt's path and how
// much of the prompt it covers.
//
// Memory: edge labels are windows (offset, length) into shared, reference-
// counted buffers. An insert copies only the suffix the trie does not hold
// yet; splitting an edge shares the buffer between both halves; merging two
// edges writes one exact copy. Bytes() counts every live buffer in full, so
// the byte cap bounds the memory actually retained, not just label lengths.

const (
	// DefaultTrieMaxEntries is LoxiLB's trie cap (pd_trie_evict_lru 8192).
	DefaultTrieMaxEntries = 8192
	// DefaultTrieMaxBytes caps the label buffers a trie retains.
	DefaultTrieMaxBytes = 64 << 20
)

// TrieConfig bounds a Trie.
type TrieConfig struct {
	// MaxEntries caps prefix→endpoint entries; the least recently inserted
	// entry is evicted first. 0 means DefaultTrieMaxEntries.
	MaxEntries int
	// MaxBytes caps retained label bytes; 0 means DefaultTrieMaxBytes. A
	// prompt longer than MaxBytes is not inserted.
	MaxBytes int
}

type trieBuf struct {
	data []byte
	refs int32
}

type trieNode struct {
	buf      *trieBuf
	off, n   int32
	children []*trieNode // sorted by first label byte
	parent   *trieNode
	ep       int32 // -1: structural node, no entry
	// LRU links among entry nodes (ep >= 0); head is most recent.
	prev, next *trieNode
}

func (n *trieNode) label() []byte {
	if n.buf == nil {
		return nil
	}
	return n.buf.data[n.off : n.off+n.n]
}

func (n *trieNode) first() byte { return n.buf.data[n.off] }

func (n *trieNode) childIndex(b byte) (int, bool) {
	c := n.children
	if len(c) <= 8 {
		for i, ch := range c {
			f := ch.first()
			if f == b {
				return i, true
			}
			if f > b {
				return i, false
			}
		}
		return len(c), false
	}
	i := sort.Search(len(c), func(i int) bool { return c[i].first() >= b })
	return i, i < len(c) && c[i].first() == b
}

func (n *trieNode) child(b byte) *trieNode {
	if i, ok := n.childIndex(b); ok {
		return n.children[i]
	}
	return nil
}

func (n *trieNode) addChild(ch *trieNode) {
	i, _ := n.childIndex(ch.first())
	n.children = append(n.children, nil)
	copy(n.children[i+1:], n.children[i:])
	n.children[i] = ch
	ch.parent = n
}

func (n *trieNode) removeChild(ch *trieNode) {
	for i, c := range n.children {
		if c == ch {
			copy(n.children[i:], n.children[i+1:])
			n.children[len(n.children)-1] = nil
			n.children = n.children[:len(n.children)-1]
			return
		}
	}
}

func (n *trieNode) replaceChild(old, nu *trieNode) {
	for i, c := range n.children {
		if c == old {
			n.children[i] = nu
			nu.parent = n
			return
		}
	}
}

// Trie is the Tier-1 prefix trie of one service. Owned by the service's
// router; not safe for concurrent use.
type Trie struct {
	root       trieNode
	maxEntries int
	maxBytes   int64
	entries    int
	nodes      int
	bytes      int64
	head, tail *trieNode
}

// NewTrie returns an empty trie bounded by cfg (zero fields take defaults).
func NewTrie(cfg TrieConfig) *Trie {
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultTrieMaxEntries
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultTrieMaxBytes
	}
	t := &Trie{maxEntries: cfg.MaxEntries, maxBytes: int64(cfg.MaxBytes)}
	t.root.ep = -1
	return t
}

// Len returns the number of prefix→endpoint entries.
func (t *Trie) Len() int { return t.entries }

// Nodes returns the number of nodes, root excluded.
func (t *Trie) Nodes() int { return t.nodes }

// Bytes returns the label-buffer bytes retained.
func (t *Trie) Bytes() int64 { return t.bytes }

// Match walks prompt down the trie and returns the endpoint of the deepest
// entry whose whole path matches a prefix of prompt, and that path's length
// in bytes (the matched span). ok is false when no entry matches. It neither
// allocates nor changes the trie.
func (t *Trie) Match(prompt []byte) (ep int, matched int, ok bool) {
	cur := &t.root
	pos := 0
	ep = -1
	for pos < len(prompt) {
		ch := cur.child(prompt[pos])
		if ch == nil {
			break
		}
		lab := ch.label()
		m := commonPrefix(lab, prompt[pos:])
		if m < len(lab) {
			break // the prompt diverges (or ends) inside this edge
		}
		pos += m
		cur = ch
		if cur.ep >= 0 {
			ep, matched = int(cur.ep), pos
		}
	}
	return ep, matched, ep >= 0
}

// Insert records that prompt was routed to endpoint ep, making it the most
// recent entry, then evicts least-recent entries until both caps hold. When
// an insert splits an edge and continues past the split, the new branch
// point inherits the split entry's endpoint (the shared prefix is already
// cached there), as LoxiLB's pd_trie_insert does. It reports false (and
// changes nothing) for an empty prompt, a negative ep, or a prompt longer
// than the byte cap.
func (t *Trie) Insert(prompt []byte, ep int) bool {
	if len(prompt) == 0 || ep < 0 || int64(len(prompt)) > t.maxBytes || ep > 1<<30 {
		return false
	}
	cur := &t.root
	pos := 0
	var target *trieNode
	for target == nil {
		if pos == len(prompt) {
			target = cur
			break
		}
		ch := cur.child(prompt[pos])
		if ch == nil {
			target = t.newLeaf(prompt[pos:])
			cur.addChild(target)
			break
		}
		lab := ch.label()
		m := commonPrefix(lab, prompt[pos:])
		if m == len(lab) {
			pos += m
			cur = ch
			continue
		}
		// Split ch after m bytes: mid takes the shared head, ch keeps the tail.
		mid := &trieNode{buf: ch.buf, off: ch.off, n: int32(m), ep: -1}
		ch.buf.refs++
		t.nodes++
		ch.off += int32(m)
		ch.n -= int32(m)
		cur.replaceChild(ch, mid)
		mid.children = []*trieNode{ch}
		ch.parent = mid
		pos += m
		if pos == len(prompt) {
			target = mid
			break
		}
		target = t.newLeaf(prompt[pos:])
		mid.addChild(target)
		if ch.ep >= 0 {
			mid.ep = ch.ep
			t.entries++
			t.lruInsertBefore(mid, ch)
		}
	}
	if target.ep < 0 {
		t.entries++
	} else {
		t.lruUnlink(target)
	}
	target.ep = int32(ep)
	t.lruPushFront(target)
	t.enforceCaps(target)
	return true
}

// RemoveEndpoint drops every entry that points at ep (its breaker tripped or
// it left the rule) and returns the count.
func (t *Trie) RemoveEndpoint(ep int) int {
	var victims []*trieNode
	for n := t.head; n != nil; n = n.next {
		if int(n.ep) == ep {
			victims = append(victims, n)
		}
	}
	for _, n := range victims {
		t.evictEntry(n)
	}
	return len(victims)
}

func (t *Trie) newLeaf(suffix []byte) *trieNode {
	b := &trieBuf{data: append([]byte(nil), suffix...), refs: 1}
	t.bytes += int64(len(b.data))
	t.nodes++
	return &trieNode{buf: b, n: int32(len(b.data)), ep: -1}
}

func (t *Trie) enforceCaps(keep *trieNode) {
	for t.entries > t.maxEntries || t.bytes > t.maxBytes {
		victim := t.tail
		if victim == nil || victim == keep {
			if t.bytes > t.maxBytes && keep != nil {
				t.compactPath(keep)
			}
			return
		}
		t.evictEntry(victim)
	}
}

// evictEntry clears n's entry and prunes the structure it no longer needs.
func (t *Trie) evictEntry(n *trieNode) {
	t.lruUnlink(n)
	n.ep = -1
	t.entries--
	for n != &t.root && n.ep < 0 {
		switch len(n.children) {
		case 0:
			p := n.parent
			p.removeChild(n)
			t.release(n)
			n = p
			continue
		case 1:
			t.mergeWithChild(n)
		}
		return
	}
}

// mergeWithChild folds structural node n (no entry, one child) into its child.
func (t *Trie) mergeWithChild(n *trieNode) {
	ch := n.children[0]
	lab := make([]byte, 0, int(n.n)+int(ch.n))
	lab = append(lab, n.label()...)
	lab = append(lab, ch.label()...)
	t.releaseBuf(ch.buf)
	ch.buf = &trieBuf{data: lab, refs: 1}
	ch.off, ch.n = 0, int32(len(lab))
	t.bytes += int64(len(lab))
	n.parent.replaceChild(n, ch)
	n.children = nil
	t.release(n)
}

// compactPath rewrites the labels from n up to the root into exact buffers,
// so that a path sharing large old buffers stops retaining them.
func (t *Trie) compactPath(n *trieNode) {
	for ; n != nil && n != &t.root; n = n.parent {
		if n.buf.refs == 1 && int(n.n) == len(n.buf.data) {
			continue
		}
		lab := append([]byte(nil), n.label()...)
		t.releaseBuf(n.buf)
		n.buf = &trieBuf{data: lab, refs: 1}
		n.off = 0
		t.bytes += int64(len(lab))
	}
}

func (t *Trie) release(n *trieNode) {
	t.releaseBuf(n.buf)
	n.buf = nil
	n.parent = nil
	t.nodes--
}

func (t *Trie) releaseBuf(b *trieBuf) {
	b.refs--
	if b.refs == 0 {
		t.bytes -= int64(len(b.data))
		b.data = nil
	}
}

func (t *Trie) lruPushFront(n *trieNode) {
	n.prev, n.next = nil, t.head
	if t.head != nil {
		t.head.prev = n
	}
	t.head = n
	if t.tail == nil {
		t.tail = n
	}
}

// lruInsertBefore links n just ahead of (more recent than) at, which must be
// linked: n gets the same recency as the entry it was split from.
func (t *Trie) lruInsertBefore(n, at *trieNode) {
	n.next, n.prev = at, at.prev
	if at.prev != nil {
		at.prev.next = n
	} else {
		t.head = n
	}
	at.prev = n
}

func (t *Trie) lruUnlink(n *trieNode) {
	if n.prev != nil {
		n.prev.next = n.next
	} else if t.head == n {
		t.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else if t.tail == n {
		t.tail = n.prev
	}
	n.prev, n.next = nil, nil
}

// commonPrefix returns the length of the longest common prefix of a and b.
// Equal 512-byte chunks are skipped with bytes.Equal (vectorised memequal);
// the mismatching chunk is scanned eight bytes at a time.
func commonPrefix(a, b []byte) int {
	const chunk = 512
	n := min(len(a), len(b))
	i := 0
	for i+chunk <= n && bytes.Equal(a[i:i+chunk], b[i:i+chunk]) {
		i += chunk
	}
	for ; i+8 <= n; i += 8 {
		if x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:]); x != 0 {
			return i + bits.TrailingZeros64(x)/8
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

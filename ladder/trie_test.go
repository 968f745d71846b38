package ladder

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestTrie_MatchReturnsDeepestEntryAndSpan(t *testing.T) {
	tr := NewTrie(TrieConfig{})
	tr.Insert([]byte("system: be brief. user: hi"), 0)
	tr.Insert([]byte("system: be brief. user: what is go"), 1)
	tests := []struct {
		give        string
		wantEP      int
		wantMatched int
		wantOK      bool
	}{
		{"system: be brief. user: hi", 0, 26, true},
		{"system: be brief. user: hi there", 0, 26, true},
		{"system: be brief. user: what is go?", 1, 34, true},
		// Diverges after the split point: the branch point inherited ep 0.
		{"system: be brief. user: x", 0, 24, true},
		{"system: be", -1, 0, false}, // ends inside the first edge
		{"other", -1, 0, false},
		{"", -1, 0, false},
	}
	for _, tt := range tests {
		ep, matched, ok := tr.Match([]byte(tt.give))
		if ep != tt.wantEP || matched != tt.wantMatched || ok != tt.wantOK {
			t.Errorf("Match(%q) = (%d,%d,%v); want (%d,%d,%v)", tt.give, ep, matched, ok, tt.wantEP, tt.wantMatched, tt.wantOK)
		}
	}
}

func TestTrie_InsertOverwritesEndpoint(t *testing.T) {
	tr := NewTrie(TrieConfig{})
	tr.Insert([]byte("abc"), 0)
	tr.Insert([]byte("abc"), 3)
	if ep, _, _ := tr.Match([]byte("abcd")); ep != 3 || tr.Len() != 1 {
		t.Fatalf("ep %d len %d; want 3, 1", ep, tr.Len())
	}
}

func TestTrie_RejectsEmptyNegativeAndOversize(t *testing.T) {
	tr := NewTrie(TrieConfig{MaxBytes: 8})
	for _, tt := range []struct {
		prompt string
		ep     int
	}{{"", 0}, {"abc", -1}, {"123456789", 0}} {
		if tr.Insert([]byte(tt.prompt), tt.ep) {
			t.Errorf("Insert(%q,%d) = true; want false", tt.prompt, tt.ep)
		}
	}
	if tr.Len() != 0 || tr.Bytes() != 0 {
		t.Fatalf("len %d bytes %d; want empty", tr.Len(), tr.Bytes())
	}
}

func TestTrie_EvictsLeastRecentEntryAtEntryCap(t *testing.T) {
	tr := NewTrie(TrieConfig{MaxEntries: 2})
	tr.Insert([]byte("aaa"), 0)
	tr.Insert([]byte("bbb"), 1)
	tr.Insert([]byte("aaa"), 0) // refresh
	tr.Insert([]byte("ccc"), 2) // evicts bbb
	if _, _, ok := tr.Match([]byte("bbb")); ok {
		t.Fatal("bbb survived; want it evicted as least recent")
	}
	for _, p := range []string{"aaa", "ccc"} {
		if _, _, ok := tr.Match([]byte(p)); !ok {
			t.Fatalf("%s was evicted; want kept", p)
		}
	}
	if tr.Len() != 2 {
		t.Fatalf("len %d; want 2", tr.Len())
	}
}

func TestTrie_ByteCapBoundsRetainedMemory(t *testing.T) {
	tr := NewTrie(TrieConfig{MaxBytes: 1000})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		p := make([]byte, 50+rng.IntN(400))
		for j := range p {
			p[j] = byte('a' + rng.IntN(3))
		}
		tr.Insert(p, i%4)
		if tr.Bytes() > 1000 {
			t.Fatalf("after insert %d: %d bytes retained; cap 1000", i, tr.Bytes())
		}
		checkTrieInvariants(t, tr)
	}
}

func TestTrie_RemoveEndpointDropsOnlyItsEntriesAndPrunes(t *testing.T) {
	tr := NewTrie(TrieConfig{})
	tr.Insert([]byte("prefix-one"), 1)
	tr.Insert([]byte("prefix-two"), 2)
	tr.Insert([]byte("prefix-three"), 1)
	if n := tr.RemoveEndpoint(1); n < 2 {
		t.Fatalf("removed %d; want at least 2", n)
	}
	if ep, _, ok := tr.Match([]byte("prefix-two")); !ok || ep != 2 {
		t.Fatalf("prefix-two → (%d,%v); want (2,true)", ep, ok)
	}
	if ep, _, ok := tr.Match([]byte("prefix-one")); ok && ep == 1 {
		t.Fatal("an entry for the removed endpoint survived")
	}
	checkTrieInvariants(t, tr)
	tr.RemoveEndpoint(2)
	if tr.Len() != 0 || tr.Nodes() != 0 || tr.Bytes() != 0 {
		t.Fatalf("len %d nodes %d bytes %d; want an empty trie", tr.Len(), tr.Nodes(), tr.Bytes())
	}
}

// The reference is the list of inserted (key, ep) pairs: the trie's match
// must cover at least the longest inserted key prefixing the query, must end
// on an inserted key or a branch point inside one, and an exact key must
// answer with the endpoint inserted last for it.
func TestTrie_DifferentialAgainstNaiveLongestPrefix(t *testing.T) {
	tr := NewTrie(TrieConfig{})
	rng := rand.New(rand.NewPCG(3, 4))
	type entry struct {
		key string
		ep  int
	}
	var inserted []entry
	gen := func() string {
		var b strings.Builder
		for j := 0; j < 1+rng.IntN(12); j++ {
			b.WriteByte(byte('a' + rng.IntN(3)))
		}
		return b.String()
	}
	for i := 0; i < 300; i++ {
		k := gen()
		ep := rng.IntN(5)
		tr.Insert([]byte(k), ep)
		inserted = append(inserted, entry{k, ep})
		q := gen()
		// Reference: the longest inserted key that prefixes q bounds the match
		// from below; the trie may also match a shorter branch point.
		best := -1
		for _, e := range inserted {
			if strings.HasPrefix(q, e.key) && len(e.key) > best {
				best = len(e.key)
			}
		}
		gotEP, matched, ok := tr.Match([]byte(q))
		if best >= 0 && (!ok || matched < best) {
			t.Fatalf("query %q: trie matched %d (ok %v); an inserted key covers %d", q, matched, ok, best)
		}
		if ok {
			span := q[:matched]
			onKey, lastEP := false, -1
			for _, e := range inserted {
				if strings.HasPrefix(e.key, span) {
					onKey = true
				}
				if e.key == span {
					lastEP = e.ep
				}
			}
			if !onKey {
				t.Fatalf("query %q: matched span %q is not within any inserted key", q, span)
			}
			if lastEP >= 0 && gotEP != lastEP {
				t.Fatalf("query %q: exact key %q answered ep %d; last inserted %d", q, span, gotEP, lastEP)
			}
		}
		checkTrieInvariants(t, tr)
	}
}

func TestTrie_MatchDoesNotAllocate(t *testing.T) {
	tr := NewTrie(TrieConfig{})
	p := bytes.Repeat([]byte("token "), 5000)
	tr.Insert(p[:20000], 1)
	if n := testing.AllocsPerRun(100, func() { tr.Match(p) }); n != 0 {
		t.Fatalf("Match allocates %v times; want 0", n)
	}
}

func TestCommonPrefix(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "abd", 2}, {"abcdefghij", "abcdefghij", 10},
		{"abcdefghijk", "abcdefghXjk", 8}, {"abcdefgh12345678z", "abcdefgh12345678", 16},
		{strings.Repeat("x", 2048), strings.Repeat("x", 2048), 2048},
		{strings.Repeat("x", 512) + "a", strings.Repeat("x", 512) + "b", 512},
		{strings.Repeat("x", 1000) + "a" + strings.Repeat("y", 600), strings.Repeat("x", 1000) + "b" + strings.Repeat("y", 600), 1000},
		{strings.Repeat("x", 1500), strings.Repeat("x", 700), 700},
	} {
		if got := commonPrefix([]byte(tt.a), []byte(tt.b)); got != tt.want {
			t.Errorf("commonPrefix(%q,%q) = %d; want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// checkTrieInvariants verifies the structure and the counters.
func checkTrieInvariants(t testing.TB, tr *Trie) {
	t.Helper()
	entries, nodes := 0, 0
	bufs := map[*trieBuf]int32{}
	var walk func(n *trieNode, depth int)
	walk = func(n *trieNode, depth int) {
		for i, ch := range n.children {
			nodes++
			if ch.parent != n {
				t.Fatalf("node at depth %d has a wrong parent", depth)
			}
			if ch.n <= 0 {
				t.Fatalf("empty label at depth %d", depth)
			}
			if i > 0 && n.children[i-1].first() >= ch.first() {
				t.Fatalf("children not sorted by first byte at depth %d", depth)
			}
			bufs[ch.buf]++
			if ch.ep >= 0 {
				entries++
			} else if len(ch.children) < 2 {
				t.Fatalf("structural node with %d children at depth %d", len(ch.children), depth)
			}
			walk(ch, depth+1)
		}
	}
	walk(&tr.root, 0)
	var bytesLive int64
	for b, refs := range bufs {
		if b.refs != refs {
			t.Fatalf("buffer refs %d; %d nodes use it", b.refs, refs)
		}
		bytesLive += int64(len(b.data))
	}
	lru := 0
	for n := tr.head; n != nil; n = n.next {
		lru++
		if n.ep < 0 {
			t.Fatal("LRU holds a node without an entry")
		}
	}
	if entries != tr.Len() || lru != entries || nodes != tr.Nodes() || bytesLive != tr.Bytes() {
		t.Fatalf("counted entries %d lru %d nodes %d bytes %d; trie says %d/%d/%d",
			entries, lru, nodes, bytesLive, tr.Len(), tr.Nodes(), tr.Bytes())
	}
}

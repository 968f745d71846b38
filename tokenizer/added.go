package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens in text, leftmost-longest, as
// tokenizers' AddedVocabulary does with its Aho-Corasick automaton.
type addedMatcher struct {
	first [256]bool   // bytes that start some pattern
	nodes []addedNode // a byte trie; node 0 is the root
}

type addedNode struct {
	next map[byte]int32
	tok  int32 // index into toks + 1; 0 = no token ends here
}

// addedMatch is a token found at [start, end) (after lstrip/rstrip).
type addedMatch struct {
	start, end int
	tok        *addedToken
}

// newAddedMatcher builds the matcher over patterns (pattern i is token
// toks[i]'s content, normalized for the normalized set).
func newAddedMatcher(patterns []string) *addedMatcher {
	m := &addedMatcher{nodes: []addedNode{{}}}
	for i, p := range patterns {
		if p == "" {
			continue
		}
		m.first[p[0]] = true
		n := int32(0)
		for j := 0; j < len(p); j++ {
			nx, ok := m.nodes[n].next[p[j]]
			if !ok {
				if m.nodes[n].next == nil {
					m.nodes[n].next = make(map[byte]int32, 1)
				}
				nx = int32(len(m.nodes))
				m.nodes[n].next[p[j]] = nx
				m.nodes = append(m.nodes, addedNode{})
			}
			n = nx
		}
		if m.nodes[n].tok == 0 {
			m.nodes[n].tok = int32(i) + 1
		}
	}
	return m
}

// longestAt returns the index (+1) and length of the longest pattern at
// s[i:], or 0, 0.
func (m *addedMatcher) longestAt(s string, i int) (int32, int) {
	n, best, bestLen := int32(0), int32(0), 0
	for j := i; j < len(s); j++ {
		nx, ok := m.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = nx
		if t := m.nodes[n].tok; t != 0 {
			best, bestLen = t, j+1-i
		}
	}
	return best, bestLen
}

// split calls gap for every stretch of text between matches and tok for
// every match, in order. toks are the tokens behind the patterns; skip
// says which tokens to leave in the text (split_special_tokens).
func (m *addedMatcher) split(s string, toks []*addedToken, skipSpecial bool, gap func(start, end int), tok func(*addedToken)) {
	if m == nil || len(m.nodes) == 1 {
		if s != "" {
			gap(0, len(s))
		}
		return
	}
	offset := 0 // end of the last emitted piece
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		t, n := m.longestAt(s, i)
		if t == 0 {
			i++
			continue
		}
		at := toks[t-1]
		start, stop := i, i+n
		if (skipSpecial && at.Special) || (at.SingleWord && !singleWord(s, start, stop)) || start < offset {
			i++
			continue
		}
		if at.LStrip {
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), offset)
		}
		if at.RStrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
		}
		if start > offset {
			gap(offset, start)
		}
		tok(at)
		offset = stop
		i += n
	}
	if offset < len(s) {
		gap(offset, len(s))
	}
}

// singleWord reports whether [start, stop) is not glued to a word
// character on either side.
func singleWord(s string, start, stop int) bool {
	isWord := func(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }
	if start > 0 {
		if r, _ := utf8.DecodeLastRuneInString(s[:start]); isWord(r) {
			return false
		}
	}
	if stop < len(s) {
		if r, _ := utf8.DecodeRuneInString(s[stop:]); isWord(r) {
			return false
		}
	}
	return true
}

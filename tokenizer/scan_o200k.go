package tokenizer

// The o200k family of split patterns (tiktoken's o200k_base: gpt-oss; and
// Mistral's Tekken, Nemo): case-aware words. A word is an optional lead
// character, then either upper-case letters followed by lower-case ones
// (first branch) or upper-case letters alone (second), with an optional
// contraction glued on (o200k only):
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// The two letter classes overlap (Lm, Lo and marks are in both), which is
// where a backtracking engine spends its time; o200kScanner resolves the
// overlap in one pass (upperLower), so every position costs O(word).

const (
	// patO200k is gpt-oss's pattern (o200k_base: 1–3 digits, contractions).
	patO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patTekken is Mistral Nemo's (Tekken: single digits, no contractions).
	patTekken = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// Letter classes of the first two branches.
const (
	clUpper = clLu | clLmo | clM // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	clLower = clLl | clLmo | clM // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
)

// o200kScanner is patO200k (maxDigits 3, contractions) and patTekken
// (maxDigits 1, none).
type o200kScanner struct {
	maxDigits    int
	contractions bool
}

func (o o200kScanner) matchAt(s string, i int) int {
	c, w := classAt(s, i)
	lead := c&(clNL|clL|clN) == 0 // [^\r\n\p{L}\p{N}]
	// First branch, with the lead character, then without.
	if lead && i+w < len(s) {
		if end := upperLower(s, i+w); end > 0 {
			return o.contraction(s, end) - i
		}
	}
	if end := upperLower(s, i); end > 0 {
		return o.contraction(s, end) - i
	}
	// Second branch: [U]+[L]* (no backtracking: the lower run may be empty).
	if lead && i+w < len(s) {
		if c2, w2 := classAt(s, i+w); c2&clUpper != 0 {
			return o.contraction(s, runWhile(s, runWhile(s, i+w+w2, clUpper), clLower)) - i
		}
	}
	if c&clUpper != 0 {
		return o.contraction(s, runWhile(s, runWhile(s, i+w, clUpper), clLower)) - i
	}
	// \p{N}{1,maxDigits}
	if c&clN != 0 {
		j := i + w
		for k := 1; k < o.maxDigits && j < len(s); k++ {
			c2, w2 := classAt(s, j)
			if c2&clN == 0 {
				break
			}
			j += w2
		}
		return j - i
	}
	if n := punctRun(s, i, c, w, clSpace|clL|clN, 0, "\r\n/"); n > 0 {
		return n
	}
	return spaceTail(s, i, true)
}

// upperLower matches [U]*[L]+ at s[j] as a backtracking engine would and
// returns the end of the match, or 0. U* first takes the whole run of
// upper-class runes; if a lower-class rune follows, L+ takes the run of
// them. Otherwise U* gives runes back from the end until L+ can start:
// at the last rune of the run that is also lower-class (Lm, Lo or a mark),
// and L+ ends right after it (what follows it in the run is Lu or Lt).
func upperLower(s string, j int) int {
	k, lastLower := j, -1
	for k < len(s) {
		c, w := classAt(s, k)
		if c&clUpper == 0 {
			break
		}
		if c&clLower != 0 {
			lastLower = k + w
		}
		k += w
	}
	if k < len(s) {
		if c, w := classAt(s, k); c&clLower != 0 {
			return runWhile(s, k+w, clLower)
		}
	}
	if lastLower > 0 {
		return lastLower
	}
	return 0
}

// contraction extends a word ending at end by an optional contraction.
func (o o200kScanner) contraction(s string, end int) int {
	if o.contractions && end < len(s) {
		return end + contraction(s, end, true)
	}
	return end
}

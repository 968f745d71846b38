package tokenizer

import (
	"slices"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Unicode normalization as Python's unicodedata and the Rust tokenizers
// do it. golang.org/x/text/unicode/norm applies the Stream-Safe Text
// Format (UAX #15): after 30 non-starters in a row it inserts U+034F and
// restarts the canonical ordering, which the references never do ("e" +
// 2000 × U+0301 would gain 66 characters and its marks would be ordered
// per block of 30). Text already normalized (norm's quick check, which
// fails on such a run) is returned as is; any other text goes through
// normalizeFull, the UAX #15 algorithm without that limit, on norm's
// Unicode 15.0 data.

// unicodeNorm is NFC, NFD, NFKC or NFKD.
type unicodeNorm struct{ form norm.Form }

func (n unicodeNorm) normalize(s string) string {
	if n.form.IsNormalString(s) {
		return s
	}
	return normalizeFull(s, n.form)
}

// normalizeFull is UAX #15 without the stream-safe limit.
func normalizeFull(s string, f norm.Form) string {
	compat := f == norm.NFKC || f == norm.NFKD
	dec := decompose(s, compat)
	canonicalOrder(dec)
	if f == norm.NFC || f == norm.NFKC {
		dec = compose(dec)
	}
	out := make([]byte, 0, len(s))
	for _, c := range dec {
		out = utf8.AppendRune(out, c.r)
	}
	return string(out)
}

// ccRune is a rune with its canonical combining class.
type ccRune struct {
	r  rune
	cc uint8
}

// Hangul syllable arithmetic (Unicode §3.12).
const (
	hangulS0, hangulL0, hangulV0, hangulT0 = 0xAC00, 0x1100, 0x1161, 0x11A7
	hangulLN, hangulVN, hangulTN           = 19, 21, 28
	hangulNN                               = hangulVN * hangulTN
	hangulSN                               = hangulLN * hangulNN
)

// decompose is the full canonical (or compatibility) decomposition of s.
func decompose(s string, compat bool) []ccRune {
	f := norm.NFD
	if compat {
		f = norm.NFKD
	}
	out := make([]ccRune, 0, len(s))
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r >= hangulS0 && r < hangulS0+hangulSN {
			si := r - hangulS0
			out = append(out, ccRune{r: hangulL0 + si/hangulNN}, ccRune{r: hangulV0 + si%hangulNN/hangulTN})
			if t := si % hangulTN; t != 0 {
				out = append(out, ccRune{r: hangulT0 + t})
			}
			i += w
			continue
		}
		p := f.PropertiesString(s[i:])
		if d := p.Decomposition(); d != nil {
			for j := 0; j < len(d); {
				dr, dw := utf8.DecodeRune(d[j:])
				out = append(out, ccRune{r: dr, cc: norm.NFD.PropertiesString(string(d[j : j+dw])).CCC()})
				j += dw
			}
		} else {
			out = append(out, ccRune{r: r, cc: p.CCC()})
		}
		i += w
	}
	return out
}

// canonicalOrder sorts every run of non-starters by combining class,
// stably (the Canonical Ordering Algorithm).
func canonicalOrder(cs []ccRune) {
	for i := 0; i < len(cs); {
		if cs[i].cc == 0 {
			i++
			continue
		}
		j := i
		for j < len(cs) && cs[j].cc != 0 {
			j++
		}
		slices.SortStableFunc(cs[i:j], func(a, b ccRune) int { return int(a.cc) - int(b.cc) })
		i = j
	}
}

// compose is the Canonical Composition Algorithm over a canonically
// ordered decomposition.
func compose(cs []ccRune) []ccRune {
	out := cs[:0]
	starter := -1 // index in out of the last starter
	lastCC := -1  // class of the last rune kept after the starter; -1: none
	for _, c := range cs {
		if starter >= 0 && (lastCC == -1 || (lastCC != 0 && lastCC < int(c.cc))) {
			if p, ok := composePair(out[starter].r, c.r); ok {
				out[starter].r = p
				continue
			}
		}
		if c.cc == 0 {
			starter, lastCC = len(out), -1
		} else {
			lastCC = int(c.cc)
		}
		out = append(out, c)
	}
	return out
}

// composePair is the primary composite of a and b, if any.
func composePair(a, b rune) (rune, bool) {
	switch {
	case a >= hangulL0 && a < hangulL0+hangulLN && b >= hangulV0 && b < hangulV0+hangulVN:
		return hangulS0 + ((a-hangulL0)*hangulVN+(b-hangulV0))*hangulTN, true
	case a >= hangulS0 && a < hangulS0+hangulSN && (a-hangulS0)%hangulTN == 0 && b > hangulT0 && b < hangulT0+hangulTN:
		return a + (b - hangulT0), true
	}
	c, ok := compositions()[[2]rune{a, b}]
	return c, ok
}

var (
	compositionsOnce sync.Once
	compositionsMap  map[[2]rune]rune
)

// compositions maps each primary composite's canonical pair to it,
// derived from norm's tables: every code point in NFC whose canonical
// decomposition is longer than one rune composes from its NFC-composed
// prefix and the rune it ends with, checked against norm.NFC on the
// three-rune string (short runs are where norm is exact). Built on first
// use (about 50 ms).
func compositions() map[[2]rune]rune {
	compositionsOnce.Do(func() {
		m := make(map[[2]rune]rune, 1024)
		var buf [utf8.UTFMax]byte
		for r := rune(0); r <= utf8.MaxRune; r++ {
			if r >= 0xD800 && r <= 0xDFFF || r >= hangulS0 && r < hangulS0+hangulSN {
				continue
			}
			n := utf8.EncodeRune(buf[:], r)
			p := norm.NFD.Properties(buf[:n])
			d := p.Decomposition()
			if d == nil || utf8.RuneCount(d) < 2 || !norm.NFC.IsNormal(buf[:n]) {
				continue
			}
			last, lw := utf8.DecodeLastRune(d)
			head := norm.NFC.Bytes(d[:len(d)-lw])
			a, aw := utf8.DecodeRune(head)
			if aw != len(head) {
				continue
			}
			if norm.NFC.String(string(a)+string(last)) == string(r) {
				m[[2]rune{a, last}] = r
			}
		}
		compositionsMap = m
	})
	return compositionsMap
}

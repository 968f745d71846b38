package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of the split patterns, as the Rust engine (Oniguruma)
// defines them: \s is the Unicode White_Space property, \p{X} the general
// category. ASCII runs through a table.
const (
	clL     uint8 = 1 << iota // \p{L}
	clN                       // \p{N}
	clSpace                   // \s
	clP                       // \p{P}
	clS                       // \p{S}
	clM                       // \p{M}
	clNL                      // \r or \n
)

var asciiClass = func() [128]uint8 {
	var t [128]uint8
	for r := rune(0); r < 128; r++ {
		t[r] = slowClass(r)
	}
	return t
}()

func slowClass(r rune) uint8 {
	var c uint8
	switch {
	case unicode.IsLetter(r):
		c |= clL
	case unicode.IsNumber(r):
		c |= clN
	case unicode.IsPunct(r):
		c |= clP
	case unicode.IsSymbol(r):
		c |= clS
	case unicode.IsMark(r):
		c |= clM
	}
	if unicode.IsSpace(r) {
		c |= clSpace
	}
	if r == '\r' || r == '\n' {
		c |= clNL
	}
	return c
}

// classAt decodes the rune at s[i] and returns its classes and width.
// Invalid UTF-8 (which JSON input never has) is one byte of class S.
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && w == 1 {
		return clS, 1
	}
	return slowClass(r), w
}

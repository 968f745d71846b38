package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of the split patterns, as the Rust engine (Oniguruma)
// defines them: \s is the Unicode White_Space property, \p{X} the general
// category. ASCII runs through a table.
const (
	clL     class = 1 << iota // \p{L}
	clN                       // \p{N}
	clSpace                   // \s
	clP                       // \p{P}
	clS                       // \p{S}
	clM                       // \p{M}
	clNL                      // \r or \n
	clLu                      // \p{Lu} or \p{Lt} (o200k's upper-case letters)
	clLl                      // \p{Ll}
	clLmo                     // \p{Lm} or \p{Lo}
)

// class is a set of the character classes above.
type class uint16

var asciiClass = func() [128]class {
	var t [128]class
	for r := rune(0); r < 128; r++ {
		t[r] = slowClass(r)
	}
	return t
}()

func slowClass(r rune) class {
	var c class
	switch {
	case unicode.IsLetter(r):
		c |= clL
		switch {
		case unicode.Is(unicode.Ll, r):
			c |= clLl
		case unicode.Is(unicode.Lu, r) || unicode.Is(unicode.Lt, r):
			c |= clLu
		default:
			c |= clLmo
		}
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
func classAt(s string, i int) (class, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && w == 1 {
		return clS, 1
	}
	return slowClass(r), w
}

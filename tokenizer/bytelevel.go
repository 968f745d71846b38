package tokenizer

import "unicode/utf8"

// byteToRune is GPT-2's byte-to-unicode table: printable Latin-1 bytes map
// to themselves, the other 68 bytes to U+0100 onwards in byte order. A
// byte-level vocabulary spells every token in these runes.
var byteToRune = func() [256]rune {
	var t [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}()

// runeToByte inverts byteToRune; -1 for runes outside the alphabet.
func runeToByte(r rune) int {
	switch {
	case r < 0:
		return -1
	case r < 256 && byteToRune[r] == r:
		return int(r)
	case r >= 256 && r < 256+68:
		for b := 0; b < 256; b++ {
			if byteToRune[b] == r {
				return b
			}
		}
	}
	return -1
}

// unByteLevel turns a byte-level token spelling back into the raw bytes it
// stands for; ok is false when a rune is outside the byte alphabet (such a
// token can only be an added token, never a BPE result).
func unByteLevel(tok string) (string, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b := runeToByte(r)
		if b < 0 {
			return "", false
		}
		out = append(out, byte(b))
	}
	return string(out), true
}

// byteLevel maps raw bytes to their byte-level spelling.
func byteLevel(raw string) string {
	out := make([]byte, 0, len(raw)*2)
	for i := 0; i < len(raw); i++ {
		out = utf8.AppendRune(out, byteToRune[raw[i]])
	}
	return string(out)
}

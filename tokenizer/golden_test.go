package tokenizer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llbproject/llb/tokenizer"
)

// The golden tokenizers under testdata/golden are small tokenizer.json
// files derived from Apache-2.0 ones (Qwen3's vocabulary cut to its first
// merges, dressed in the Qwen3, Llama 3 and DeepSeek V3 pipelines, and
// Mistral 7B's sentencepiece BPE cut the same way; see
// testdata/golden/README.md). Their golden ids were written by transformers.js
// (make tokenizer-parity with LLB_TOKENIZER_PARITY_UPDATE=1), so make test
// checks the whole pipeline against the reference without node.

// goldenCase is one line of a golden file.
type goldenCase struct {
	Text             string   `json:"text"`
	AddSpecialTokens bool     `json:"add_special_tokens"`
	IDs              []uint32 `json:"ids"`
}

// goldenNames are the directories under testdata/golden.
var goldenNames = []string{"qwen3-mini", "llama3-style-mini", "deepseek-style-mini", "mistral-mini", "gemma-mini", "o200k-mini", "tekken-mini"}

func TestGolden_IdsMatchReference(t *testing.T) {
	for _, name := range goldenNames {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", "golden", name)
			tok, err := tokenizer.LoadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cases []goldenCase
			if err := json.Unmarshal(raw, &cases); err != nil {
				t.Fatal(err)
			}
			if len(cases) < 100 {
				t.Fatalf("%d golden cases; want at least 100", len(cases))
			}
			bad := 0
			for _, c := range cases {
				if got := tok.Encode(c.Text, c.AddSpecialTokens, nil); !slices.Equal(got, c.IDs) {
					bad++
					if bad <= 5 {
						t.Errorf("%q (add_special_tokens=%v):\n got %v\nwant %v", c.Text, c.AddSpecialTokens, got, c.IDs)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d cases differ", bad, len(cases))
			}
		})
	}
}

func readGoldens(t *testing.T, path string) []chatGolden {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []chatGolden
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGolden_ChatRendersMatchPython checks Qwen3's template on the chat
// corpus against Python jinja2's renders (written by make
// tokenizer-parity), errors included.
func TestGolden_ChatRendersMatchPython(t *testing.T) {
	tok, err := tokenizer.LoadDir(filepath.Join("testdata", "golden", "qwen3-mini"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tokenizer.ChatPath(tok); got != "local:qwen3" {
		t.Errorf("ChatPath = %q; want local:qwen3", got)
	}
	gs := readGoldens(t, filepath.Join("testdata", "golden", "qwen3-mini", "chat_golden.json"))
	if len(gs) < 100 {
		t.Fatalf("%d golden chats; want ≥ 100", len(gs))
	}
	for i, g := range gs {
		got, err := tok.RenderChat("", g.Case.request(), parityNow)
		switch {
		case g.Text == nil && err == nil:
			t.Errorf("chat %d: rendered %q; Python failed with %s", i, truncate(got, 200), g.Error)
		case g.Text != nil && err != nil:
			t.Errorf("chat %d: %v; Python rendered %q", i, err, truncate(*g.Text, 200))
		case g.Text != nil && got != *g.Text:
			at := firstDiffAt(got, *g.Text)
			t.Errorf("chat %d differs at byte %d:\n  go: %q\n  py: %q", i, at, window(got, at), window(*g.Text, at))
		}
	}
}

// TestGolden_JinjaProbesMatchPython checks the engine's feature probes
// against Python jinja2's outputs (written by make tokenizer-parity).
func TestGolden_JinjaProbesMatchPython(t *testing.T) {
	gs := readGoldens(t, filepath.Join("testdata", "golden", "jinja_probes.json"))
	if len(gs) < 50 {
		t.Fatalf("%d probes; want ≥ 50", len(gs))
	}
	for _, g := range gs {
		got, err := tokenizer.RenderProbe(g.Probe, g.Vars, parityNow)
		switch {
		case g.Text == nil && err == nil:
			t.Errorf("%q: rendered %q; Python failed with %s", g.Probe, got, g.Error)
		case g.Text != nil && err != nil:
			t.Errorf("%q: %v; Python rendered %q", g.Probe, err, *g.Text)
		case g.Text != nil && got != *g.Text:
			t.Errorf("%q:\n  go: %q\n  py: %q", g.Probe, got, *g.Text)
		}
	}
}

// TestGolden_PublishedTemplatesMatchPython checks every published template
// under testdata/templates on part of the chat corpus against Python
// jinja2's renders (written by make tokenizer-parity), errors included.
func TestGolden_PublishedTemplatesMatchPython(t *testing.T) {
	tj, err := os.ReadFile(filepath.Join("testdata", "golden", "qwen3-mini", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range templateGoldenNames {
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("testdata", "templates", name+".jinja"))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join("testdata", "golden", "templates", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var g templateGolden
			if err := json.Unmarshal(raw, &g); err != nil {
				t.Fatal(err)
			}
			cfg := map[string]any{"chat_template": string(src)}
			for k, v := range g.Specials {
				cfg[k] = v
			}
			cj, _ := json.Marshal(cfg)
			tok, err := tokenizer.Load(tj, cj)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(tokenizer.ChatPath(tok), "local:") {
				t.Errorf("ChatPath = %q; want the template rendered in process", tokenizer.ChatPath(tok))
			}
			rendered := 0
			for i, c := range g.Chats {
				got, err := tok.RenderChat("", c.Case.request(), parityNow)
				switch {
				case c.Text == nil && err == nil:
					t.Errorf("chat %d: rendered %q; Python failed with %s", i, truncate(got, 200), c.Error)
				case c.Text != nil && err != nil:
					t.Errorf("chat %d: %v; Python rendered %q", i, err, truncate(*c.Text, 200))
				case c.Text != nil && got != *c.Text:
					at := firstDiffAt(got, *c.Text)
					t.Errorf("chat %d differs at byte %d:\n  go: %q\n  py: %q", i, at, window(got, at), window(*c.Text, at))
				case c.Text != nil:
					rendered++
				}
			}
			if rendered < len(g.Chats)/2 {
				t.Errorf("%d of %d golden chats render; want most of them", rendered, len(g.Chats))
			}
		})
	}
}

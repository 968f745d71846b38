package tokenizer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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
var goldenNames = []string{"qwen3-mini", "llama3-style-mini", "deepseek-style-mini", "mistral-mini"}

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

package tokenizer_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/llbproject/llb/tokenizer"
)

// FuzzEncode: any text encodes without panicking, deterministically, and
// special tokens only ever add the post-processor's ids around it.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "hello world", "<|im_start|>user\nhi<|im_end|>", "  \n\n\t x", "日本語 😀 e\u0301", "'S 'll 123456", "\xff\xfe"} {
		f.Add(s)
	}
	toks := map[string]*tokenizer.Encoder{}
	for _, name := range goldenNames {
		tok, err := tokenizer.LoadDir(filepath.Join("testdata", "golden", name))
		if err != nil {
			f.Fatal(err)
		}
		toks[name] = tok
	}
	f.Fuzz(func(t *testing.T, text string) {
		for name, tok := range toks {
			plain := tok.Encode(text, false, nil)
			if again := tok.Encode(text, false, nil); !slices.Equal(plain, again) {
				t.Fatalf("%s: %q encodes differently twice", name, text)
			}
			with := tok.Encode(text, true, nil)
			if len(with) < len(plain) {
				t.Fatalf("%s: %q: %d ids with special tokens, %d without", name, text, len(with), len(plain))
			}
		}
	})
}

package inventory

import (
	"testing"

	"pgregory.net/rapid"
)

func TestTokenHasher_PromptSideEqualsEventSide(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bs := rapid.IntRange(1, 32).Draw(t, "block_size")
		toks := rapid.SliceOfN(tokenGen(), 0, 6*bs+bs-1).Draw(t, "tokens")
		ek := extraKeysGen(len(toks)+1).Draw(t, "extra")
		th, err := NewTokenHasher(bs)
		if err != nil {
			t.Fatal(err)
		}
		prompt := th.AppendBlockKeys(nil, toks, ek)
		n := len(toks) / bs
		extras := make([]any, n)
		for i := range extras {
			if tup := ek.BlockTuple(i, bs); tup != nil {
				extras[i] = tup
			}
		}
		// An event may carry the whole run or split it; both must agree.
		split := 0
		if n > 0 {
			split = rapid.IntRange(0, n).Draw(t, "split")
		}
		head, err := th.AppendRunKeys(nil, th.TokenRoot(), toks[:split*bs], extras[:split])
		if err != nil {
			t.Fatal(err)
		}
		parent := th.TokenRoot()
		if split > 0 {
			parent = head[split-1]
		}
		all, err := th.AppendRunKeys(head, parent, toks[split*bs:n*bs], extras[split:])
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != len(prompt) {
			t.Fatalf("got %d event keys; want %d", len(all), len(prompt))
		}
		for i := range prompt {
			if all[i] != prompt[i] {
				t.Fatalf("block %d: event key %d; prompt key %d", i, all[i], prompt[i])
			}
		}
	})
}

func TestTokenHasher_KeysDependOnTokensParentAndExtras(t *testing.T) {
	th, err := NewTokenHasher(4)
	if err != nil {
		t.Fatal(err)
	}
	base := th.AppendBlockKeys(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, ExtraKeys{})
	tests := []struct {
		name  string
		give  []uint64
		block int // the first block whose key must differ from base
	}{
		{"token change in block 1", th.AppendBlockKeys(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 9}, ExtraKeys{}), 1},
		{"token change in block 0 propagates", th.AppendBlockKeys(nil, []uint32{0, 2, 3, 4, 5, 6, 7, 8}, ExtraKeys{}), 0},
		{"lora on every block", th.AppendBlockKeys(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, ExtraKeys{LoRAName: "x"}), 0},
		{"salt on block 0 propagates", th.AppendBlockKeys(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, ExtraKeys{CacheSalt: "s"}), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range base {
				same := tt.give[i] == base[i]
				if i < tt.block && !same {
					t.Errorf("block %d key changed; want unchanged", i)
				}
				if i >= tt.block && same {
					t.Errorf("block %d key unchanged; want changed", i)
				}
			}
		})
	}
}

func TestTokenHasher_IsAChainHasher(t *testing.T) {
	th, err := NewTokenHasher(16)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHasher(AlgoSHA256CBOR, 16, "0")
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []ChainHasher{th, h} {
		if ch.BlockSize() != 16 {
			t.Fatalf("block size %d; want 16", ch.BlockSize())
		}
		if got := ch.AppendBlockKeys(nil, make([]uint32, 40), ExtraKeys{}); len(got) != 2 {
			t.Fatalf("got %d keys; want 2", len(got))
		}
	}
}

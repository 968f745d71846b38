package inventory

import (
	"fmt"
	"testing"
)

// BenchmarkChainHash measures the prompt-side chain (target: a 32k-token
// prompt, 2048 blocks of 16, in well under 1 ms, 0 allocs).
func BenchmarkChainHash(b *testing.B) {
	th, err := NewTokenHasher(16)
	if err != nil {
		b.Fatal(err)
	}
	for _, tokens := range []int{2048, 32768} {
		toks := make([]uint32, tokens)
		for i := range toks {
			toks[i] = uint32(i * 7919 % 152000)
		}
		dst := make([]uint64, 0, tokens/16)
		hashers := []struct {
			name string
			ch   ChainHasher
		}{
			{"sha256_cbor", mustHasher(b, AlgoSHA256CBOR)},
			{"xxhash_cbor", mustHasher(b, AlgoXXHashCBOR)},
			{"token_keyed", th},
		}
		for _, hh := range hashers {
			b.Run(fmt.Sprintf("%s/tokens=%d", hh.name, tokens), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(4 * tokens))
				for b.Loop() {
					dst = hh.ch.AppendBlockKeys(dst[:0], toks, ExtraKeys{})
				}
			})
		}
	}
}

func mustHasher(b *testing.B, algo Algo) *Hasher {
	b.Helper()
	h, err := NewHasher(algo, 16, "0")
	if err != nil {
		b.Fatal(err)
	}
	return h
}

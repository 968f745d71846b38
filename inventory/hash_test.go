package inventory

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"testing"
)

// extraForCase maps a vector case to the request-level ExtraKeys that
// produce its per-block tuples (the prompt-side path).
func extraForCase(t *testing.T, name string) ExtraKeys {
	t.Helper()
	switch {
	case strings.Contains(name, "LoRA") && strings.Contains(name, "cache_salt"):
		return ExtraKeys{LoRAName: "my-lora", CacheSalt: "salt-1"}
	case strings.Contains(name, "LoRA"):
		return ExtraKeys{LoRAName: "my-lora"}
	case strings.Contains(name, "cache_salt"):
		return ExtraKeys{CacheSalt: "salt-1"}
	case strings.Contains(name, "image item"):
		return ExtraKeys{MM: []MMItem{{Identifier: "mmhash0", Offset: 4, Length: 20}}}
	}
	return ExtraKeys{}
}

func TestHasher_ReproducesEverySpecVector(t *testing.T) {
	v := loadSpecVectors(t)
	cases := 0
	for _, sv := range v.Vectors {
		for _, c := range sv.Cases {
			if c.Algo == "sha256" {
				// vLLM's pickle-based default is Python-specific; token-keyed
				// mode serves it. It carries no CBOR, so nothing to check here.
				continue
			}
			cases++
			t.Run(sv.Seed+"/"+c.Name, func(t *testing.T) {
				if c.Algo != string(AlgoSHA256CBOR) {
					t.Fatalf("unexpected algo %q in vectors", c.Algo)
				}
				h, err := NewHasher(AlgoSHA256CBOR, c.BlockSize, sv.Seed)
				if err != nil {
					t.Fatal(err)
				}
				if got := h.NoneHash().String(); got != sv.NoneHash {
					t.Fatalf("NONE_HASH %s; want %s", got, sv.NoneHash)
				}
				if got := hex8(appendCBORText(nil, sv.Seed)); got != sv.NoneCBOR {
					t.Fatalf("NONE_HASH input %s; want %s", got, sv.NoneCBOR)
				}
				ek := extraForCase(t, c.Name)
				var evExtras []any
				if c.ExtraKeys != nil {
					for _, raw := range c.ExtraKeys {
						evExtras = append(evExtras, jsonToTuple(t, raw))
					}
				}

				// The exact CBOR bytes of every block, from the primitives
				// the chain loop uses.
				parent := h.NoneHash()
				for i, b := range c.Blocks {
					buf := []byte{cborArray | 3}
					buf = appendCBORHead(buf, cborBytes, uint64(parent.Len()))
					buf = append(buf, parent.b[:parent.Len()]...)
					buf = appendCBORTokens(buf, c.Tokens[i*c.BlockSize:(i+1)*c.BlockSize])
					buf = ek.appendBlockTuple(buf, i, i*c.BlockSize, c.BlockSize)
					if got := hex8(buf); got != b.CBOR {
						t.Fatalf("block %d cbor\n got %s\nwant %s", i, got, b.CBOR)
					}
					d := sha256.Sum256(buf)
					parent, _ = DigestFromBytes(d[:])
				}

				keys := h.AppendBlockKeys(nil, c.Tokens, ek)
				digs, err := h.AppendDigests(nil, Digest{}, 0, c.Tokens, ek)
				if err != nil {
					t.Fatal(err)
				}
				run, err := h.AppendRunDigests(nil, Digest{}, c.Tokens[:len(c.Blocks)*c.BlockSize], evExtras)
				if err != nil {
					t.Fatal(err)
				}
				if len(keys) != len(c.Blocks) || len(digs) != len(c.Blocks) || len(run) != len(c.Blocks) {
					t.Fatalf("got %d keys, %d digests, %d run digests; want %d blocks", len(keys), len(digs), len(run), len(c.Blocks))
				}
				for i, b := range c.Blocks {
					if digs[i].String() != b.Digest {
						t.Errorf("block %d digest %s; want %s", i, digs[i], b.Digest)
					}
					if run[i].String() != b.Digest {
						t.Errorf("block %d event-extras digest %s; want %s", i, run[i], b.Digest)
					}
					if keys[i] != b.Uint64 || digs[i].Key() != b.Uint64 {
						t.Errorf("block %d key %d (digest key %d); want %d", i, keys[i], digs[i].Key(), b.Uint64)
					}
				}
			})
		}
	}
	if cases < 24 {
		t.Fatalf("checked %d sha256_cbor cases; the vectors file should hold 3 seeds x 8 cases", cases)
	}
}

// hex8 is hex.EncodeToString without another import in every test.
func hex8(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}

// TestHasher_MatchesThirdPartyKnownAnswers checks xxhash_cbor (and the
// zero-parent sha256_cbor path) against the known answers published in
// loxilb-io/loxilb-inference-gateway cicd/common/kv_hash/fixtures/
// kv_hash_vectors.json (cbor2 + vLLM v0.17.0 code).
func TestHasher_MatchesThirdPartyKnownAnswers(t *testing.T) {
	blk0 := []uint32{101, 202, 303, 404, 505, 606, 707, 808, 909, 1010, 1111, 1212, 1313, 1414, 1515, 1616}
	blk1 := []uint32{1717, 1818, 1919, 2020, 2121, 2222, 2323, 2424, 2525, 2626, 2727, 2828, 2929, 3030, 3131, 3232}
	qwen0 := []uint32{785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 44801, 2266, 25, 8287, 1411, 27217}
	qwen1 := []uint32{1161, 11567, 9477, 1687, 11756, 2252, 4640, 19120, 9500, 27711, 40538, 3891, 15045, 78, 4568, 64}
	tests := []struct {
		name       string
		algo       Algo
		parent     string // "" = NONE_HASH for seed "0"
		give       []uint32
		wantDigest []string
		wantKey    []uint64
	}{
		{"sha256 zero parent", AlgoSHA256CBOR, strings.Repeat("00", 32), append(append([]uint32{}, blk0...), blk1...),
			[]string{"8c0a1c7a0ea0f3ed0c543c28859440fae8821a38a9e83fb3c971ffe3d56197ea", "da3fc2812685b7d6c6533bed5cdc08f7d5374524535773fa91dd4016fdd8b6ce"},
			[]uint64{14515664427994421226, 10510627572844902094}},
		{"xxhash zero parent", AlgoXXHashCBOR, strings.Repeat("00", 16), append(append([]uint32{}, blk0...), blk1...),
			[]string{"23eb9b97b0e70381f7d1d4aa948e3d29", "2e6915e6f8a9e2e0e7aea075f8c570c5"},
			[]uint64{17857287826602605865, 16694457297254314181}},
		{"sha256 seed 0", AlgoSHA256CBOR, "", append(append([]uint32{}, blk0...), blk1...),
			[]string{"d450abdaf2c9ebdd0e0cbfbc4e24a5c07ff71dcab37be7426d4fa0e5fdb93342", "0d95d2dc02f528b32afbd33ebffedd911ed1978087b0a01679b4ddd62261c5db"},
			[]uint64{7876691182959014722, 8769878286166771163}},
		{"xxhash seed 0", AlgoXXHashCBOR, "", append(append([]uint32{}, blk0...), blk1...),
			[]string{"363a30eaa81cfc9f9992a6dfe619bda1", "60bf650ad0efa0dc7147140a2e85add6"},
			[]uint64{11066090714971094433, 8162514883595054550}},
		{"sha256 seed 0 qwen2.5 tokens", AlgoSHA256CBOR, "", append(append([]uint32{}, qwen0...), qwen1...),
			[]string{"caba889d3604b3df8dcdd10e42088879dbda2a1da4d19650da393e3b3c4a3207", "2793adec91bdc57e9fb06c5b8271ecfbe933691c1d547990b48007a01bb9a609"},
			[]uint64{15724667998076285447, 13006404108087305737}},
		{"xxhash seed 0 qwen2.5 tokens", AlgoXXHashCBOR, "", append(append([]uint32{}, qwen0...), qwen1...),
			[]string{"56f372e4cb22425f4773cdca742d4779", "10a8fb9eaa665f0812676eb31a7adff9"},
			[]uint64{5148685068430821241, 1326150330806362105}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := NewHasher(tt.algo, 16, "0")
			if err != nil {
				t.Fatal(err)
			}
			if tt.algo == AlgoXXHashCBOR && h.NoneHash().String() != "1ebe36576dcb573f26b99533a20aaeca" {
				t.Fatalf("xxhash NONE_HASH %s; want 1ebe36576dcb573f26b99533a20aaeca", h.NoneHash())
			}
			var parent Digest
			if tt.parent != "" {
				if parent, err = ParseDigestHex(tt.parent); err != nil {
					t.Fatal(err)
				}
			}
			got, err := h.AppendDigests(nil, parent, 0, tt.give, ExtraKeys{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range tt.wantDigest {
				if got[i].String() != tt.wantDigest[i] || got[i].Key() != tt.wantKey[i] {
					t.Errorf("block %d: got %s (%d); want %s (%d)", i, got[i], got[i].Key(), tt.wantDigest[i], tt.wantKey[i])
				}
			}
		})
	}
}

func TestHasher_IgnoresTrailingPartialBlock(t *testing.T) {
	h, err := NewHasher(AlgoSHA256CBOR, 16, "0")
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]uint32, 50)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	full := h.AppendBlockKeys(nil, toks[:48], ExtraKeys{})
	got := h.AppendBlockKeys(nil, toks, ExtraKeys{})
	if len(got) != 3 || len(full) != 3 {
		t.Fatalf("got %d keys; want 3", len(got))
	}
	for i := range got {
		if got[i] != full[i] {
			t.Fatalf("key %d %d; want %d", i, got[i], full[i])
		}
	}
	if got := h.AppendBlockKeys(nil, toks[:15], ExtraKeys{}); len(got) != 0 {
		t.Fatalf("got %d keys for 15 tokens; want 0", len(got))
	}
}

func TestHasher_ChainsFromArbitraryParent(t *testing.T) {
	for _, algo := range []Algo{AlgoSHA256CBOR, AlgoXXHashCBOR} {
		t.Run(string(algo), func(t *testing.T) {
			h, err := NewHasher(algo, 4, "12345")
			if err != nil {
				t.Fatal(err)
			}
			toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
			ek := ExtraKeys{LoRAName: "a", CacheSalt: "s", MM: []MMItem{{"m", 2, 7}}}
			all, err := h.AppendDigests(nil, Digest{}, 0, toks, ek)
			if err != nil {
				t.Fatal(err)
			}
			tail, err := h.AppendDigests(nil, all[1], 2, toks[8:], ek)
			if err != nil {
				t.Fatal(err)
			}
			if len(tail) != 2 || tail[0] != all[2] || tail[1] != all[3] {
				t.Fatalf("tail %v; want %v", tail, all[2:])
			}
		})
	}
}

func TestHasher_RejectsBadArguments(t *testing.T) {
	tests := []struct {
		name string
		give func() error
		want error
	}{
		{"unknown algo", func() error { _, err := NewHasher("sha256", 16, "0"); return err }, ErrConfig},
		{"zero block size", func() error { _, err := NewHasher(AlgoSHA256CBOR, 0, "0"); return err }, ErrConfig},
		{"huge block size", func() error { _, err := NewHasher(AlgoSHA256CBOR, MaxBlockSize+1, "0"); return err }, ErrConfig},
		{"parent of wrong size", func() error {
			h, _ := NewHasher(AlgoXXHashCBOR, 16, "0")
			p, _ := DigestFromBytes(make([]byte, 32))
			_, err := h.AppendDigests(nil, p, 0, make([]uint32, 16), ExtraKeys{})
			return err
		}, ErrConfig},
		{"run not whole blocks", func() error {
			h, _ := NewHasher(AlgoSHA256CBOR, 16, "0")
			_, err := h.AppendRunDigests(nil, Digest{}, make([]uint32, 17), nil)
			return err
		}, ErrMalformed},
		{"extras count differs from blocks", func() error {
			h, _ := NewHasher(AlgoSHA256CBOR, 16, "0")
			_, err := h.AppendRunDigests(nil, Digest{}, make([]uint32, 32), []any{nil})
			return err
		}, ErrMalformed},
		{"unencodable extra", func() error {
			h, _ := NewHasher(AlgoSHA256CBOR, 16, "0")
			_, err := h.AppendRunDigests(nil, Digest{}, make([]uint32, 16), []any{[]any{make(chan int)}})
			return err
		}, ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give(); !errors.Is(err, tt.want) {
				t.Fatalf("got %v; want %v", err, tt.want)
			}
		})
	}
}

func TestHasher_AppendBlockKeysAllocatesNothingWithCapacity(t *testing.T) {
	h, err := NewHasher(AlgoSHA256CBOR, 16, "0")
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]uint32, 32768)
	for i := range toks {
		toks[i] = uint32(i * 7919 % 152000)
	}
	dst := make([]uint64, 0, 2048)
	ek := ExtraKeys{LoRAName: "lora", CacheSalt: "salt"}
	h.AppendBlockKeys(dst, toks, ek) // warm the scratch pool
	allocs := testing.AllocsPerRun(20, func() {
		dst = h.AppendBlockKeys(dst[:0], toks, ek)
	})
	if allocs > 0 {
		t.Fatalf("got %.1f allocs per 32k-token chain; want 0", allocs)
	}
	if len(dst) != 2048 {
		t.Fatalf("got %d keys; want 2048", len(dst))
	}
}

func TestDigest_KeyIsLastEightBytesBigEndian(t *testing.T) {
	tests := []struct {
		give string
		want uint64
	}{
		{"202da172482d928bbc42ab25b0151e2b895f13f41002e27b2ceabcfae6d332ea", 3236607068019569386},
		{"23eb9b97b0e70381f7d1d4aa948e3d29", 17857287826602605865},
		{"0102", 0x0102},
	}
	for _, tt := range tests {
		d, err := ParseDigestHex(tt.give)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Key(); got != tt.want {
			t.Errorf("Key(%s) = %d; want %d", tt.give, got, tt.want)
		}
		if !bytes.Equal(d.Bytes(), mustHex(t, tt.give)) {
			t.Errorf("Bytes(%s) round trip failed", tt.give)
		}
	}
}

func TestNewChainHasher_BuildsTheChainTheContractNames(t *testing.T) {
	toks := make([]uint32, 40)
	for i := range toks {
		toks[i] = uint32(i)
	}
	sha16, _ := NewHasher(AlgoSHA256CBOR, 16, "s")
	xx8, _ := NewHasher(AlgoXXHashCBOR, 8, "")
	own4, _ := NewTokenHasher(4)
	tests := []struct {
		name       string
		algo, seed string
		blockSize  int
		tokenKeyed bool
		want       ChainHasher
	}{
		{"sha256_cbor", "sha256_cbor", "s", 16, false, sha16},
		{"xxhash_cbor", "xxhash_cbor", "", 8, false, xx8},
		{"token keyed ignores the algorithm", "ignored", "", 4, true, own4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := NewChainHasher(tt.algo, tt.blockSize, tt.seed, tt.tokenKeyed)
			if err != nil {
				t.Fatal(err)
			}
			got, want := h.AppendBlockKeys(nil, toks, ExtraKeys{}), tt.want.AppendBlockKeys(nil, toks, ExtraKeys{})
			if len(got) == 0 || !slices.Equal(got, want) {
				t.Errorf("keys %v; want %v", got, want)
			}
		})
	}
	if _, err := NewChainHasher("sha256", 16, "", false); !errors.Is(err, ErrConfig) {
		t.Errorf("pickle algo: %v; want ErrConfig", err)
	}
}

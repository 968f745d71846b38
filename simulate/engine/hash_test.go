package engine

import (
	"errors"
	"slices"
	"testing"

	"github.com/llbproject/llb/inventory"
)

func seq(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

func keysOf(ds []inventory.Digest) []uint64 {
	out := make([]uint64, len(ds))
	for i, d := range ds {
		out[i] = d.Key()
	}
	return out
}

func TestHasher_KeysMatchContractVectors(t *testing.T) {
	tests := []struct {
		name string
		give HashConfig
		want []uint64
	}{
		// vllm-contract.md §3.1
		{"sha256_cbor seed 0", HashConfig{Algo: HashSHA256CBOR, Seed: "0"},
			[]uint64{3236607068019569386, 2758186210834249151, 5191110061519319221}},
		{"sha256_cbor seed 12345", HashConfig{Algo: HashSHA256CBOR, Seed: "12345"},
			[]uint64{7946494704765058032, 12145793040335043204, 12205898305926617717}},
		// vllm-contract.md §3.3 (llm-d-inference-sim keys)
		{"fnv seed 0", HashConfig{Algo: HashFNV, Seed: "0", Model: "sim-model"},
			[]uint64{1410432770539804164, 10909412993074311261, 12268715544724185990}},
		{"fnv seed 12345", HashConfig{Algo: HashFNV, Seed: "12345", Model: "sim-model"},
			[]uint64{17050019272668291033, 9391283473132126116, 17989052196862485425}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := NewHasher(tt.give, 16)
			if err != nil {
				t.Fatal(err)
			}
			// 50 tokens: the 2 of the partial block get no digest.
			ds, err := h.AppendDigests(nil, seq(1, 50), inventory.ExtraKeys{})
			if err != nil {
				t.Fatal(err)
			}
			if got := keysOf(ds); !slices.Equal(got, tt.want) {
				t.Fatalf("keys %v; want %v", got, tt.want)
			}
		})
	}
}

func TestHasher_CBORAlgosAgreeWithInventory(t *testing.T) {
	extra := inventory.ExtraKeys{LoRAName: "my-lora", CacheSalt: "s"}
	for _, algo := range []HashAlgo{HashSHA256CBOR, HashXXHashCBOR} {
		t.Run(string(algo), func(t *testing.T) {
			h, err := NewHasher(HashConfig{Algo: algo, Seed: "7"}, 16)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := inventory.NewHasher(inventory.Algo(algo), 16, "7")
			if err != nil {
				t.Fatal(err)
			}
			ds, err := h.AppendDigests(nil, seq(100, 80), extra)
			if err != nil {
				t.Fatal(err)
			}
			want := ref.AppendBlockKeys(nil, seq(100, 80), extra)
			if got := keysOf(ds); !slices.Equal(got, want) {
				t.Fatalf("keys %v; want inventory's %v", got, want)
			}
		})
	}
}

func TestHasher_NoneHashOverrideChangesEveryKey(t *testing.T) {
	seeded, err := NewHasher(HashConfig{Algo: HashSHA256CBOR, Seed: "0"}, 16)
	if err != nil {
		t.Fatal(err)
	}
	random := make([]byte, 32)
	random[0] = 0xAB
	unset, err := NewHasher(HashConfig{Algo: HashSHA256CBOR, Seed: "0", NoneHash: random}, 16)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := seeded.AppendDigests(nil, seq(1, 48), inventory.ExtraKeys{})
	b, _ := unset.AppendDigests(nil, seq(1, 48), inventory.ExtraKeys{})
	for i := range a {
		if a[i].Key() == b[i].Key() {
			t.Fatalf("block %d key equal with and without the NONE_HASH override", i)
		}
	}
}

func TestNewHasher_RejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		give HashConfig
		bs   int
	}{
		{"unknown algo", HashConfig{Algo: "sha256"}, 16},
		{"none hash wrong size", HashConfig{Algo: HashSHA256CBOR, NoneHash: []byte{1, 2}}, 16},
		{"zero block size", HashConfig{Algo: HashFNV}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewHasher(tt.give, tt.bs); !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v; want ErrConfig", err)
			}
		})
	}
}

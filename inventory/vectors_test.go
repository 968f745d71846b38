package inventory

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// specVectorsRel is where the shared spec lives relative to an ancestor of
// the package directory (/work/main/inventory -> /work/shared/...).
const specVectorsRel = "shared/spec/vectors/vllm-hash-vectors.json"

// specFile finds the shared spec vectors by walking up from the package
// directory; LLB_SPEC_VECTORS overrides. A missing file fails the test: the
// vectors are the contract, never optional.
func specFile(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LLB_SPEC_VECTORS"); p != "" {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	for {
		p := filepath.Join(dir, specVectorsRel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("%s not found above the package directory; set LLB_SPEC_VECTORS", specVectorsRel)
		}
		dir = parent
	}
}

// specVectors mirrors vllm-hash-vectors.json.
type specVectors struct {
	Vectors []struct {
		Seed     string `json:"seed"`
		NoneHash string `json:"none_hash_sha256_cbor"`
		NoneCBOR string `json:"none_hash_cbor_input"`
		Cases    []struct {
			Name      string            `json:"name"`
			Algo      string            `json:"algo"`
			BlockSize int               `json:"block_size"`
			Tokens    []uint32          `json:"tokens"`
			ExtraKeys []json.RawMessage `json:"extra_keys"`
			Blocks    []struct {
				Index  int    `json:"index"`
				CBOR   string `json:"cbor"`
				Digest string `json:"digest"`
				Uint64 uint64 `json:"uint64"`
			} `json:"blocks"`
		} `json:"cases"`
	} `json:"vectors"`
	LLMDFNV  []uint64          `json:"llmd_fnv_tokens_1_48_seed0_sim_model"`
	Payloads map[string]string `json:"payloads_hex"`
}

// loadSpecVectors parses the shared vectors file.
func loadSpecVectors(t *testing.T) specVectors {
	t.Helper()
	raw, err := os.ReadFile(specFile(t))
	if err != nil {
		t.Fatalf("read vectors: %v", err)
	}
	var v specVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("parse vectors: %v", err)
	}
	if len(v.Vectors) == 0 {
		t.Fatal("vectors file holds no vectors")
	}
	return v
}

// mustHex decodes hex or fails the test.
func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("hex %q: %v", s, err)
	}
	return b
}

// jsonToTuple converts a JSON extra-key tuple (null, or an array of strings,
// integers and nested arrays) to the generic values a decoded event carries.
func jsonToTuple(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("extra keys %s: %v", raw, err)
	}
	return fromJSON(t, v)
}

// fromJSON maps json.Number to int64 and []any recursively.
func fromJSON(t *testing.T, v any) any {
	t.Helper()
	switch x := v.(type) {
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			t.Fatalf("non-integer number %s in extra keys", x)
		}
		return n
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = fromJSON(t, x[i])
		}
		return out
	default:
		return v
	}
}

package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/fxamacker/cbor/v2"
	"github.com/zeebo/xxh3"

	"github.com/llbproject/llb/inventory"
)

// HashAlgo names the prefix-cache hash the engine keys its blocks with.
type HashAlgo string

// Hash algorithms. The CBOR ones are vLLM's contract, computed by
// inventory.Hasher, so llb recomputes the same keys; HashFNV is the llm-d /
// llm-d-inference-sim key chain, which llb's exact mode deliberately does
// not match (for testing the token-keyed mode and the hash-contract guard).
const (
	// HashSHA256CBOR is vLLM's sha256_cbor.
	HashSHA256CBOR HashAlgo = "sha256_cbor"
	// HashXXHashCBOR is vLLM's xxhash_cbor.
	HashXXHashCBOR HashAlgo = "xxhash_cbor"
	// HashFNV is llm-d-inference-sim's chain (vllm-contract.md §3.3):
	// root = FNV64a(cbor([FNV64a(seed), nil, model])),
	// key_i = FNV64a(cbor([key_{i-1}, tokens_i, extra_i])).
	HashFNV HashAlgo = "fnv"
	// HashSGLang is SGLang's page hash (inventory.SGLangHasher): a block's
	// key is the first 8 bytes of its SHA-256 page digest. SGLang keeps a
	// request's LoRA and cache_salt out of the hash and apart in its radix
	// tree; the simulator chains such prompts from a digest of its own
	// instead (so they share no blocks with plain prompts, as in SGLang,
	// and no key llb could derive).
	HashSGLang HashAlgo = "sha256_sglang"
	// HashTRTLLM stands in for TensorRT-LLM's internal block hash, a 64-bit
	// value that is no stable format (llb never recomputes it, it re-keys
	// the tokens): xxh3 over the parent key, the block's tokens and its
	// extra keys.
	HashTRTLLM HashAlgo = "trtllm"
)

// HashConfig is the hash contract of an engine.
type HashConfig struct {
	// Algo is the algorithm. Default sha256_cbor.
	Algo HashAlgo
	// Seed is PYTHONHASHSEED as a string ("" is a valid seed). Ignored
	// when NoneHash is set.
	Seed string
	// NoneHash, when set, replaces NONE_HASH (the parent of block 0): vLLM
	// with PYTHONHASHSEED unset draws 32 random bytes, so the caller passes
	// random bytes here to reproduce that mismatch. Its length must be the
	// algorithm's digest size (32 sha256_cbor, 16 xxhash_cbor, 8 fnv).
	NoneHash []byte
	// Model is the model name; only the fnv root depends on it.
	Model string
}

// digestSize is the digest length of algo in bytes.
func (a HashAlgo) digestSize() int {
	switch a {
	case HashXXHashCBOR:
		return 16
	case HashFNV, HashSGLang, HashTRTLLM:
		return 8 // the engine keeps the published 64-bit key
	}
	return 32
}

// validate reports a bad algorithm or NONE_HASH override.
func (c HashConfig) validate() error {
	switch c.Algo {
	case HashSHA256CBOR, HashXXHashCBOR, HashFNV, HashSGLang, HashTRTLLM:
	default:
		return fmt.Errorf("hash algo %q (want %s, %s, %s, %s or %s)", c.Algo, HashSHA256CBOR, HashXXHashCBOR, HashFNV, HashSGLang, HashTRTLLM)
	}
	if c.NoneHash != nil && len(c.NoneHash) != c.Algo.digestSize() {
		return fmt.Errorf("none hash of %d bytes for %s (want %d)", len(c.NoneHash), c.Algo, c.Algo.digestSize())
	}
	return nil
}

// Hasher computes the block digests of a prompt under a HashConfig. It is
// immutable and safe for concurrent use, so request goroutines can hash in
// parallel and hand the digests to the engine (Request.Digests).
type Hasher struct {
	algo      HashAlgo
	blockSize int
	vllm      *inventory.Hasher       // CBOR algorithms
	sglang    *inventory.SGLangHasher // sha256_sglang
	root      inventory.Digest        // parent of block 0 (zero: the vllm hasher's own NONE_HASH)
	enc       cbor.EncMode            // fnv
}

// NewHasher builds a Hasher for blocks of blockSize tokens.
func NewHasher(cfg HashConfig, blockSize int) (*Hasher, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("hasher: %w: %w", ErrConfig, err)
	}
	if blockSize < 1 || blockSize > inventory.MaxBlockSize {
		return nil, fmt.Errorf("hasher: block size %d (want 1..%d): %w", blockSize, inventory.MaxBlockSize, ErrConfig)
	}
	h := &Hasher{algo: cfg.Algo, blockSize: blockSize}
	if cfg.NoneHash != nil {
		d, err := inventory.DigestFromBytes(cfg.NoneHash)
		if err != nil {
			return nil, fmt.Errorf("hasher: none hash: %w: %w", ErrConfig, err)
		}
		h.root = d
	}
	switch cfg.Algo {
	case HashSGLang:
		sg, err := inventory.NewSGLangHasher(blockSize)
		if err != nil {
			return nil, fmt.Errorf("hasher: %w: %w", ErrConfig, err)
		}
		h.sglang = sg
		return h, nil
	case HashTRTLLM:
		return h, nil
	}
	if cfg.Algo == HashFNV {
		enc, err := cbor.CanonicalEncOptions().EncMode()
		if err != nil {
			return nil, fmt.Errorf("hasher: cbor mode: %w", err)
		}
		h.enc = enc
		if h.root.IsZero() {
			init := fnv64a(binaryString(cfg.Seed))
			raw, err := enc.Marshal([]any{init, nil, cfg.Model})
			if err != nil {
				return nil, fmt.Errorf("hasher: fnv root: %w", err)
			}
			h.root = keyDigest(fnv64a(raw))
		}
		return h, nil
	}
	v, err := inventory.NewHasher(inventory.Algo(cfg.Algo), blockSize, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("hasher: %w: %w", ErrConfig, err)
	}
	h.vllm = v
	return h, nil
}

// Algo is the hash algorithm.
func (h *Hasher) Algo() HashAlgo { return h.algo }

// BlockSize is tokens per block.
func (h *Hasher) BlockSize() int { return h.blockSize }

// AppendDigests appends the digests of the full blocks of tokens (a partial
// trailing block gets none), chained from NONE_HASH.
func (h *Hasher) AppendDigests(dst []inventory.Digest, tokens []uint32, extra inventory.ExtraKeys) ([]inventory.Digest, error) {
	if h.vllm != nil {
		out, err := h.vllm.AppendDigests(dst, h.root, 0, tokens, extra)
		if err != nil {
			return dst, fmt.Errorf("block digests: %w", err)
		}
		return out, nil
	}
	switch h.algo {
	case HashSGLang:
		return h.sglangDigests(dst, tokens, extra)
	case HashTRTLLM:
		return h.trtllmDigests(dst, tokens, extra), nil
	}
	parent := h.root.Key()
	n := len(tokens) / h.blockSize
	for i := 0; i < n; i++ {
		var ex any
		if t := extra.BlockTuple(i, h.blockSize); t != nil {
			ex = t
		}
		raw, err := h.enc.Marshal([]any{parent, tokens[i*h.blockSize : (i+1)*h.blockSize], ex})
		if err != nil {
			return dst, fmt.Errorf("fnv block %d: %w", i, err)
		}
		parent = fnv64a(raw)
		dst = append(dst, keyDigest(parent))
	}
	return dst, nil
}

// sglangDigests keys the full pages of tokens as SGLang publishes them.
func (h *Hasher) sglangDigests(dst []inventory.Digest, tokens []uint32, extra inventory.ExtraKeys) ([]inventory.Digest, error) {
	var parent inventory.Digest
	if !extra.IsZero() || !h.root.IsZero() {
		s := sha256.New()
		s.Write([]byte("llbsim/sglang-extra-key\x00"))
		s.Write(h.root.Bytes())
		fmt.Fprintf(s, "%s\x00%s\x00%v", extra.LoRAName, extra.CacheSalt, extra.MM)
		parent, _ = inventory.DigestFromBytes(s.Sum(nil)) // 32 bytes is always valid
	}
	digs, err := h.sglang.AppendRunDigests(nil, parent, tokens[:len(tokens)/h.blockSize*h.blockSize], nil)
	if err != nil {
		return dst, fmt.Errorf("sglang pages: %w", err)
	}
	for _, d := range digs {
		dst = append(dst, keyDigest(inventory.SGLangKey(d)))
	}
	return dst, nil
}

// trtllmDigests is the stand-in TensorRT-LLM block chain.
func (h *Hasher) trtllmDigests(dst []inventory.Digest, tokens []uint32, extra inventory.ExtraKeys) []inventory.Digest {
	parent := h.root.Key()
	bs := h.blockSize
	buf := make([]byte, 0, 8+4*bs+64)
	for i := 0; i < len(tokens)/bs; i++ {
		buf = binary.LittleEndian.AppendUint64(buf[:0], parent)
		for _, t := range tokens[i*bs : (i+1)*bs] {
			buf = binary.LittleEndian.AppendUint32(buf, t)
		}
		if i == 0 {
			buf = fmt.Appendf(buf, "\x00%s\x00%s", extra.LoRAName, extra.CacheSalt)
		}
		for _, it := range extra.MM {
			if it.Offset < (i+1)*bs && it.Offset+it.Length > i*bs {
				buf = fmt.Appendf(buf, "\x00%s@%d", it.Identifier, it.Offset)
			}
		}
		parent = xxh3.HashSeed(buf, 0x7472746c6c6d) // "trtllm"
		dst = append(dst, keyDigest(parent))
	}
	return dst
}

// fnv64a is FNV-1a 64 of b.
func fnv64a(b []byte) uint64 {
	f := fnv.New64a()
	_, _ = f.Write(b) // hash.Hash never fails
	return f.Sum64()
}

// binaryString is the UTF-8 bytes of s.
func binaryString(s string) []byte { return []byte(s) }

// keyDigest is the 8-byte big-endian digest of an fnv key, so Key() gives
// the key back.
func keyDigest(k uint64) inventory.Digest {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], k)
	d, _ := inventory.DigestFromBytes(b[:]) // 8 bytes is always valid
	return d
}

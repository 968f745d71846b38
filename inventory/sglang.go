package inventory

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"
)

// AlgoSHA256SGLang is SGLang's page hash (kvHashAlgo "sha256_sglang").
const AlgoSHA256SGLang Algo = "sha256_sglang"

// SGLangHasher recomputes the page hashes SGLang's radix cache publishes in
// its KV events (python/sglang/srt/mem_cache: get_hash_str and
// hash_str_to_int64, now the native hash_binding.cpp with the same bytes):
//
//	d_0 = SHA-256(le32(t_0) ‖ … ‖ le32(t_{P-1}))        no parent, no seed
//	d_i = SHA-256(d_{i-1} ‖ le32(t_{iP}) ‖ …)            the raw 32-byte digest
//	key = first 8 digest bytes, big-endian (a signed int64 on the wire)
//
// one key per page of P = --page-size tokens. The key is the opposite end of
// the digest from vLLM's (last 8 bytes); a negative int64 on the wire is the
// same 64 bits as the key. The vectors in testdata/vectors were computed with
// SGLang's own functions.
//
// SGLang keeps a request's extra_key (LoRA, cache_salt) out of the page hash
// and separates such requests in its radix tree instead: a salted or LoRA
// prompt never reuses the cache unsalted prompts built, although their page
// keys are equal. AppendBlockKeys therefore chains a prompt with non-zero
// ExtraKeys from a namespace digest no engine key derives from, so it
// matches nothing (a true miss), and the mirror skips runs SGLang marks with
// a cache_salt. Safe for concurrent use; no allocations when dst has
// capacity.
type SGLangHasher struct {
	pageSize int
	scratch  sync.Pool // *[]byte, one page of little-endian tokens plus a parent
}

// NewSGLangHasher builds the hasher for pages of pageSize tokens.
func NewSGLangHasher(pageSize int) (*SGLangHasher, error) {
	if pageSize < 1 || pageSize > MaxBlockSize {
		return nil, fmt.Errorf("page size %d (want 1..%d): %w", pageSize, MaxBlockSize, ErrConfig)
	}
	h := &SGLangHasher{pageSize: pageSize}
	h.scratch.New = func() any {
		b := make([]byte, 0, 32+4*pageSize)
		return &b
	}
	return h, nil
}

// BlockSize is the page size in tokens.
func (h *SGLangHasher) BlockSize() int { return h.pageSize }

// Algo is AlgoSHA256SGLang.
func (h *SGLangHasher) Algo() Algo { return AlgoSHA256SGLang }

// sglangNamespace is the parent of page 0 for prompts with extra keys: the
// digest of an llb-specific string, so no engine page key follows from it
// short of a SHA-256 collision.
func sglangNamespace(extra ExtraKeys) Digest {
	s := sha256.New()
	s.Write([]byte("llb/sglang-namespace\x00"))
	s.Write([]byte(extra.LoRAName))
	s.Write([]byte{0})
	s.Write([]byte(extra.CacheSalt))
	for _, it := range extra.MM {
		fmt.Fprintf(s, "\x00%s@%d+%d", it.Identifier, it.Offset, it.Length)
	}
	var d Digest
	copy(d.b[:], s.Sum(nil))
	d.n = 32
	return d
}

// AppendBlockKeys appends the keys of the full pages of tokens. It
// implements ChainHasher.
func (h *SGLangHasher) AppendBlockKeys(dst []uint64, tokens []uint32, extra ExtraKeys) []uint64 {
	var parent Digest
	if !extra.IsZero() {
		parent = sglangNamespace(extra)
	}
	dst, _ = h.chain(dst, nil, parent, tokens, false)
	return dst
}

// AppendRunDigests appends the digests of a stored run of whole pages chained
// from parent (the zero Digest: the run starts at token 0). SGLang's events
// carry no extra keys; extras is ignored.
func (h *SGLangHasher) AppendRunDigests(dst []Digest, parent Digest, tokens []uint32, _ []any) ([]Digest, error) {
	if len(tokens)%h.pageSize != 0 {
		return dst, fmt.Errorf("run of %d tokens is not whole pages of %d: %w", len(tokens), h.pageSize, ErrMalformed)
	}
	if !parent.IsZero() && parent.Len() != 32 {
		return dst, fmt.Errorf("parent digest of %d bytes (want 32): %w", parent.Len(), ErrConfig)
	}
	_, dst = h.chain(nil, dst, parent, tokens, true)
	return dst, nil
}

// chain hashes every full page of tokens from parent, appending keys or
// digests.
func (h *SGLangHasher) chain(keys []uint64, digs []Digest, parent Digest, tokens []uint32, wantDigests bool) ([]uint64, []Digest) {
	ps := h.pageSize
	n := len(tokens) / ps
	if n == 0 {
		return keys, digs
	}
	bp := h.scratch.Get().(*[]byte)
	defer h.scratch.Put(bp)
	cur := parent
	for i := 0; i < n; i++ {
		buf := (*bp)[:0]
		if !cur.IsZero() {
			buf = append(buf, cur.b[:32]...)
		}
		for _, t := range tokens[i*ps : (i+1)*ps] {
			buf = binary.LittleEndian.AppendUint32(buf, t)
		}
		cur.b = sha256.Sum256(buf)
		cur.n = 32
		*bp = buf
		if wantDigests {
			digs = append(digs, cur)
		} else {
			keys = append(keys, SGLangKey(cur))
		}
	}
	return keys, digs
}

// SGLangKey is the key SGLang publishes for a page digest: its first 8 bytes
// big-endian (hash_str_to_int64's value as 64 bits).
func SGLangKey(d Digest) uint64 { return binary.BigEndian.Uint64(d.b[:8]) }

// eventKey, digestSize, needsExtraKeys and contractFix make SGLangHasher an
// engineKeys.
func (h *SGLangHasher) eventKey(d Digest) uint64 { return SGLangKey(d) }
func (h *SGLangHasher) digestSize() int          { return 32 }
func (h *SGLangHasher) needsExtraKeys() bool     { return false }
func (h *SGLangHasher) contractFix() string {
	return "check that the rule's kvBlockSize is SGLang's --page-size (read it from /get_server_info) and that the engine is SGLang"
}

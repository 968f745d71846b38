package inventory

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// Algo names one of vLLM's prefix-caching hash algorithms
// (--prefix-caching-hash-algo). Only the CBOR variants are reproducible
// outside Python; the pickle variants ("sha256", "xxhash") are served by the
// token-keyed mode instead.
type Algo string

// Algorithms llb can recompute exactly.
const (
	// AlgoSHA256CBOR is sha256(canonical CBOR); 32-byte digests.
	AlgoSHA256CBOR Algo = "sha256_cbor"
	// AlgoXXHashCBOR is xxh3_128(canonical CBOR); 16-byte digests.
	AlgoXXHashCBOR Algo = "xxhash_cbor"
	// AlgoBlockHashTRTLLM names TensorRT-LLM's contract as LoxiLB does
	// (kvHashAlgo "blockhash_trtllm"): its block hashes are no stable wire
	// format, so llb keys TensorRT-LLM blocks with its own chain over the
	// token lists the events carry (token-keyed mode, TokenHasher).
	AlgoBlockHashTRTLLM Algo = "blockhash_trtllm"
)

// ParseAlgo validates an algorithm name as given in a rule's kvHashAlgo.
func ParseAlgo(s string) (Algo, error) {
	switch Algo(s) {
	case AlgoSHA256CBOR, AlgoXXHashCBOR:
		return Algo(s), nil
	}
	return "", fmt.Errorf("hash algo %q (want %q or %q): %w", s, AlgoSHA256CBOR, AlgoXXHashCBOR, ErrConfig)
}

// DigestSize is the digest length in bytes: 32 for sha256_cbor, 16 for
// xxhash_cbor.
func (a Algo) DigestSize() int {
	if a == AlgoXXHashCBOR {
		return 16
	}
	return 32
}

// MaxDigestSize is the largest digest any supported algorithm produces.
const MaxDigestSize = 32

// Digest is a full block digest as vLLM chains it: 32 bytes (sha256) or 16
// bytes (xxh3-128). The zero Digest means "no parent" and hashes as NONE_HASH.
// Digest is a comparable value type.
type Digest struct {
	n uint8
	b [MaxDigestSize]byte
}

// DigestFromBytes copies a digest of 1 to 32 bytes.
func DigestFromBytes(b []byte) (Digest, error) {
	var d Digest
	if len(b) == 0 || len(b) > MaxDigestSize {
		return d, fmt.Errorf("digest of %d bytes (want 1..%d): %w", len(b), MaxDigestSize, ErrMalformed)
	}
	d.n = uint8(len(b))
	copy(d.b[:], b)
	return d, nil
}

// ParseDigestHex decodes a hex digest (as printed by String).
func ParseDigestHex(s string) (Digest, error) {
	raw, err := hex.DecodeString(s)
	if err != nil {
		return Digest{}, fmt.Errorf("digest hex %q: %w: %w", s, ErrMalformed, err)
	}
	return DigestFromBytes(raw)
}

// Bytes returns the digest bytes (nil for the zero Digest). The slice aliases
// a copy, so callers may keep it.
func (d Digest) Bytes() []byte {
	if d.n == 0 {
		return nil
	}
	out := make([]byte, d.n)
	copy(out, d.b[:d.n])
	return out
}

// Len is the digest length in bytes (0 for the zero Digest).
func (d Digest) Len() int { return int(d.n) }

// IsZero reports whether d is the zero Digest ("no parent").
func (d Digest) IsZero() bool { return d.n == 0 }

// Key is the 64-bit event key vLLM publishes for this digest: the last 8
// bytes read big-endian (int.from_bytes(digest, "big") & (2**64-1)). Digests
// shorter than 8 bytes are left-padded with zeros, as Python's int would be.
func (d Digest) Key() uint64 {
	return KeyFromBytes(d.b[:d.n])
}

// String is the lower-case hex of the digest bytes.
func (d Digest) String() string { return hex.EncodeToString(d.b[:d.n]) }

// KeyFromBytes returns the event key of a digest given as bytes: the last 8
// bytes big-endian; shorter inputs are zero-extended on the left.
func KeyFromBytes(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b[len(b)-8:])
	}
	var k uint64
	for _, c := range b {
		k = k<<8 | uint64(c)
	}
	return k
}

package inventory

import (
	"crypto/sha256"
	"fmt"
	"sync"

	"github.com/zeebo/xxh3"
)

// ChainHasher turns a prompt's tokens into the chain of 64-bit block keys a
// Mirror is indexed by. It is what the runtime holds per rule: a *Hasher when
// the rule names kvHashAlgo (exact mode, keys equal vLLM's event keys) or a
// *TokenHasher (token-keyed mode, keys are llb's own). Implementations are
// safe for concurrent use and allocate nothing when dst has capacity.
type ChainHasher interface {
	// AppendBlockKeys appends one key per FULL block of tokens (a trailing
	// partial block gets none) to dst and returns the extended slice.
	AppendBlockKeys(dst []uint64, tokens []uint32, extra ExtraKeys) []uint64
	// BlockSize is the number of tokens per block.
	BlockSize() int
}

// MaxBlockSize bounds kvBlockSize; vLLM uses 16 by default and up to 256.
const MaxBlockSize = 4096

// Hasher recomputes vLLM's prefix-cache block hashes for sha256_cbor and
// xxhash_cbor (vllm-contract.md §2):
//
//	h_0 = H(cbor([NONE_HASH, [t_0..t_{B-1}], extra_0]))
//	h_i = H(cbor([h_{i-1},  [t_{iB}..],      extra_i]))
//	NONE_HASH = H(cbor(seed string))
//
// chained on the full digest; the event key of a block is the last 8 digest
// bytes, big-endian. The CBOR of the fixed 3-array is hand-encoded into a
// pooled buffer (proved byte-identical to fxamacker's canonical mode by the
// tests), so a 2048-block prompt costs 2048 digest computations and no
// allocations. A Hasher is immutable and safe for concurrent use.
type Hasher struct {
	algo      Algo
	blockSize int
	root      Digest
	vals      cborValueEncoder
	scratch   sync.Pool // *[]byte, capacity for one encoded block
}

// engineKeys is a ChainHasher in exact mode: its keys are the ones the
// engine publishes, so a mirror holds the event keys and re-hashes stored
// runs to check the contract. vLLM's CBOR chains (*Hasher) and SGLang's
// page hash (*SGLangHasher) are engineKeys.
type engineKeys interface {
	ChainHasher
	// Algo names the contract.
	Algo() Algo
	// AppendRunDigests re-hashes a stored run (whole blocks) from its
	// parent's digest (the zero Digest: the run starts at token 0) with the
	// event's extra keys.
	AppendRunDigests(dst []Digest, parent Digest, tokens []uint32, extras []any) ([]Digest, error)
	// eventKey is the key the engine publishes for a digest.
	eventKey(d Digest) uint64
	// digestSize is the full digest length in bytes.
	digestSize() int
	// needsExtraKeys reports whether a run can be re-hashed only when its
	// event carries extra_keys (vLLM folds them into every hash).
	needsExtraKeys() bool
	// contractFix is the sentence telling an operator what to set when
	// stored runs re-hash to other keys.
	contractFix() string
}

// NewChainHasher builds the chain a rule's KV contract describes: a
// *TokenHasher when tokenKeyed or for TensorRT-LLM's "blockhash_trtllm"
// (llb's own keys; seed is unused), an *SGLangHasher for "sha256_sglang",
// else a *Hasher recomputing vLLM's digests with algo and seed. The rule
// package has already checked every value, so an error here is a bug in
// the caller.
func NewChainHasher(algo string, blockSize int, seed string, tokenKeyed bool) (ChainHasher, error) {
	switch {
	case tokenKeyed || Algo(algo) == AlgoBlockHashTRTLLM:
		return NewTokenHasher(blockSize)
	case Algo(algo) == AlgoSHA256SGLang:
		return NewSGLangHasher(blockSize)
	}
	return NewHasher(Algo(algo), blockSize, seed)
}

// NewHasher builds a Hasher. seed is vLLM's PYTHONHASHSEED as a string (from
// the rule or LLB_KV_NONE_HASH_SEED); "" is a valid seed, distinct from
// "unset" (an unset seed makes vLLM's hashes unreproducible — use the
// token-keyed mode then).
func NewHasher(algo Algo, blockSize int, seed string) (*Hasher, error) {
	if _, err := ParseAlgo(string(algo)); err != nil {
		return nil, err
	}
	if blockSize < 1 || blockSize > MaxBlockSize {
		return nil, fmt.Errorf("block size %d (want 1..%d): %w", blockSize, MaxBlockSize, ErrConfig)
	}
	vals, err := newCBORValueEncoder()
	if err != nil {
		return nil, err
	}
	h := &Hasher{algo: algo, blockSize: blockSize, vals: vals}
	h.scratch.New = func() any {
		b := make([]byte, 0, 64+5*blockSize+64)
		return &b
	}
	h.root = h.sum(appendCBORText(nil, seed))
	return h, nil
}

// Algo is the algorithm the Hasher reproduces.
func (h *Hasher) Algo() Algo { return h.algo }

// eventKey, digestSize, needsExtraKeys and contractFix make Hasher an
// engineKeys.
func (h *Hasher) eventKey(d Digest) uint64 { return d.Key() }
func (h *Hasher) digestSize() int          { return h.algo.DigestSize() }
func (h *Hasher) needsExtraKeys() bool     { return true }
func (h *Hasher) contractFix() string {
	return fmt.Sprintf("run the engine with --prefix-caching-hash-algo %s and PYTHONHASHSEED equal to the rule's seed, or use token-keyed mode", h.algo)
}

// BlockSize is the number of tokens per block.
func (h *Hasher) BlockSize() int { return h.blockSize }

// NoneHash is NONE_HASH, the implicit parent of block 0.
func (h *Hasher) NoneHash() Digest { return h.root }

// sum digests buf with the Hasher's algorithm.
func (h *Hasher) sum(buf []byte) Digest {
	var d Digest
	if h.algo == AlgoXXHashCBOR {
		b := xxh3.Hash128(buf).Bytes()
		d.n = 16
		copy(d.b[:], b[:])
		return d
	}
	d.b = sha256.Sum256(buf)
	d.n = 32
	return d
}

// AppendBlockKeys appends the event keys of the full blocks of tokens,
// starting from NONE_HASH at block 0. It implements ChainHasher.
func (h *Hasher) AppendBlockKeys(dst []uint64, tokens []uint32, extra ExtraKeys) []uint64 {
	dst, _, _ = h.chainFrom(dst, nil, h.root, 0, tokens, &extra, nil, false, false)
	return dst
}

// AppendDigests appends the full digests of the full blocks of tokens,
// chained from parent (the zero Digest means NONE_HASH). firstBlock is the
// absolute index of the first block (it decides where cache_salt and
// multimodal offsets apply). parent, when set, must have the algorithm's
// digest size.
func (h *Hasher) AppendDigests(dst []Digest, parent Digest, firstBlock int, tokens []uint32, extra ExtraKeys) ([]Digest, error) {
	if parent.IsZero() {
		parent = h.root
	}
	if parent.Len() != h.algo.DigestSize() {
		return dst, fmt.Errorf("parent digest of %d bytes for %s (want %d): %w", parent.Len(), h.algo, h.algo.DigestSize(), ErrConfig)
	}
	if firstBlock < 0 {
		return dst, fmt.Errorf("first block %d (want >= 0): %w", firstBlock, ErrConfig)
	}
	_, dst, err := h.chainFrom(nil, dst, parent, firstBlock, tokens, &extra, nil, false, true)
	return dst, err
}

// AppendRunDigests appends the digests of a stored run as a BlockStored event
// describes it: tokens hold whole blocks, extras (nil, or one entry per block,
// each nil or a tuple []any) are the event's extra_keys. It is how the
// contract self-check re-hashes what the engine published.
func (h *Hasher) AppendRunDigests(dst []Digest, parent Digest, tokens []uint32, extras []any) ([]Digest, error) {
	if parent.IsZero() {
		parent = h.root
	}
	if parent.Len() != h.algo.DigestSize() {
		return dst, fmt.Errorf("parent digest of %d bytes for %s (want %d): %w", parent.Len(), h.algo, h.algo.DigestSize(), ErrConfig)
	}
	if len(tokens)%h.blockSize != 0 {
		return dst, fmt.Errorf("run of %d tokens is not whole blocks of %d: %w", len(tokens), h.blockSize, ErrMalformed)
	}
	if extras != nil && len(extras) != len(tokens)/h.blockSize {
		return dst, fmt.Errorf("%d extra-key entries for %d blocks: %w", len(extras), len(tokens)/h.blockSize, ErrMalformed)
	}
	_, dst, err := h.chainFrom(nil, dst, parent, 0, tokens, nil, extras, true, true)
	return dst, err
}

// chainFrom hashes every full block of tokens from parent. Digests go to digs
// when wantDigests, keys to keys otherwise. Extras come from ek, or from ev
// when useEv (event-carried tuples, nil meaning all None).
func (h *Hasher) chainFrom(keys []uint64, digs []Digest, parent Digest, firstBlock int, tokens []uint32, ek *ExtraKeys, ev []any, useEv, wantDigests bool) ([]uint64, []Digest, error) {
	bs := h.blockSize
	n := len(tokens) / bs
	if n == 0 {
		return keys, digs, nil
	}
	bp := h.scratch.Get().(*[]byte)
	defer h.scratch.Put(bp)
	buf := (*bp)[:0]
	dsz := h.algo.DigestSize()
	buf = append(buf, cborArray|3)
	buf = appendCBORHead(buf, cborBytes, uint64(dsz))
	pOff := len(buf)
	buf = append(buf, parent.b[:dsz]...)
	prefix := len(buf)
	cur := parent
	var err error
	for i := 0; i < n; i++ {
		buf = buf[:prefix]
		copy(buf[pOff:prefix], cur.b[:dsz])
		start := i * bs
		buf = appendCBORTokens(buf, tokens[start:start+bs])
		switch {
		case useEv && ev != nil:
			if buf, err = h.vals.appendValue(buf, ev[i], 0); err != nil {
				*bp = buf
				return keys, digs, fmt.Errorf("block %d extra keys: %w", i, err)
			}
		case useEv:
			buf = append(buf, cborNull)
		default:
			buf = ek.appendBlockTuple(buf, firstBlock+i, (firstBlock+i)*bs, bs)
		}
		cur = h.sum(buf)
		if wantDigests {
			digs = append(digs, cur)
		} else {
			keys = append(keys, cur.Key())
		}
	}
	*bp = buf
	return keys, digs, nil
}

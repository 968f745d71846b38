package inventory

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/zeebo/xxh3"
)

// TokenHasher computes llb's own block keys for token-keyed mode: a 64-bit
// chain over token ids that does not depend on the engine's hash algorithm,
// PYTHONHASHSEED or digest format (the llm-d design since Dec 2025):
//
//	k_{-1} = TokenRoot
//	k_i    = xxh3_64( le64(k_{i-1}) ‖ le32(t_{iB}) … le32(t_{iB+B-1}) ‖ cbor(extra_i|null) )
//
// The same chain is computed on the prompt side (AppendBlockKeys) and over
// the token_ids/extra_keys a BlockStored event carries (AppendRunKeys), so the
// two agree whenever the engine cached exactly these tokens with these extra
// keys. Safe for concurrent use; no allocations when dst has capacity.
type TokenHasher struct {
	blockSize int
	vals      cborValueEncoder
	scratch   sync.Pool // *[]byte
}

// tokenRootInput is hashed to give the implicit parent key of block 0 in
// token-keyed mode; changing it changes every own key (a format version).
const tokenRootInput = "llb/token-keyed/v1"

// TokenRoot returns the implicit parent key of block 0.
func (t *TokenHasher) TokenRoot() uint64 { return xxh3.HashString(tokenRootInput) }

// NewTokenHasher builds a TokenHasher for blocks of blockSize tokens.
func NewTokenHasher(blockSize int) (*TokenHasher, error) {
	if blockSize < 1 || blockSize > MaxBlockSize {
		return nil, fmt.Errorf("block size %d (want 1..%d): %w", blockSize, MaxBlockSize, ErrConfig)
	}
	vals, err := newCBORValueEncoder()
	if err != nil {
		return nil, err
	}
	t := &TokenHasher{blockSize: blockSize, vals: vals}
	t.scratch.New = func() any {
		b := make([]byte, 0, 8+4*blockSize+64)
		return &b
	}
	return t, nil
}

// BlockSize is the number of tokens per block.
func (t *TokenHasher) BlockSize() int { return t.blockSize }

// AppendBlockKeys appends the own keys of the full blocks of tokens, chained
// from TokenRoot. It implements ChainHasher.
func (t *TokenHasher) AppendBlockKeys(dst []uint64, tokens []uint32, extra ExtraKeys) []uint64 {
	dst, _ = t.chain(dst, t.TokenRoot(), tokens, &extra, nil, false)
	return dst
}

// AppendRunKeys appends the own keys of a stored run chained from parent (an
// own key; TokenRoot for a run that starts at token 0). extras is the event's
// extra_keys: nil, or one entry per block (nil or a tuple).
func (t *TokenHasher) AppendRunKeys(dst []uint64, parent uint64, tokens []uint32, extras []any) ([]uint64, error) {
	if len(tokens)%t.blockSize != 0 {
		return dst, fmt.Errorf("run of %d tokens is not whole blocks of %d: %w", len(tokens), t.blockSize, ErrMalformed)
	}
	if extras != nil && len(extras) != len(tokens)/t.blockSize {
		return dst, fmt.Errorf("%d extra-key entries for %d blocks: %w", len(extras), len(tokens)/t.blockSize, ErrMalformed)
	}
	return t.chain(dst, parent, tokens, nil, extras, true)
}

// chain hashes every full block of tokens from parent.
func (t *TokenHasher) chain(dst []uint64, parent uint64, tokens []uint32, ek *ExtraKeys, ev []any, useEv bool) ([]uint64, error) {
	bs := t.blockSize
	n := len(tokens) / bs
	if n == 0 {
		return dst, nil
	}
	bp := t.scratch.Get().(*[]byte)
	defer t.scratch.Put(bp)
	buf := (*bp)[:0]
	cur := parent
	var err error
	for i := 0; i < n; i++ {
		buf = binary.LittleEndian.AppendUint64(buf[:0], cur)
		for _, tok := range tokens[i*bs : (i+1)*bs] {
			buf = binary.LittleEndian.AppendUint32(buf, tok)
		}
		switch {
		case useEv && ev != nil:
			if buf, err = t.vals.appendValue(buf, ev[i], 0); err != nil {
				*bp = buf
				return dst, fmt.Errorf("block %d extra keys: %w", i, err)
			}
		case useEv:
			buf = append(buf, cborNull)
		default:
			buf = ek.appendBlockTuple(buf, i, i*bs, bs)
		}
		cur = xxh3.Hash(buf)
		dst = append(dst, cur)
	}
	*bp = buf
	return dst, nil
}

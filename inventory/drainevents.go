package inventory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/zeebo/xxh3"
)

// TensorRT-LLM's KV events as trtllm-serve's POST /kv_cache_events returns
// them: a JSON array of tensorrt_llm._utils.KVCacheEventSerializer objects,
//
//	{"event_id": N, "window_size": W, ["attention_dp_rank": R,]
//	 "data": {"type": "created", "num_blocks_per_cache_level": [...]}
//	       | {"type": "stored", "parent_hash": H|null, "blocks": [
//	            {"type": "stored_block", "block_hash": H,
//	             "tokens": [{"type": "unique_token", "token_id": T, "token_extra_id": E}, ...],
//	             "cache_level": L, "priority": P}, ...]}
//	       | {"type": "removed", "block_hashes": [H, ...]}
//	       | {"type": "updated", "block_hash": H, "cache_level": {...}, "priority": {...}}}
//
// event_id counts per attention-DP rank. The engine's block hashes are no
// stable format (an internal 64-bit value, or a hex digest in newer
// builds): llb keys the blocks with its own chain over their tokens
// (token-keyed mode) and keeps the engine hashes only as handles for
// parents and removals. Unknown fields are ignored, as in every decoder here.

// trtEvent is one serialized event.
type trtEvent struct {
	EventID         json.Number `json:"event_id"`
	WindowSize      *int64      `json:"window_size"`
	AttentionDPRank *int64      `json:"attention_dp_rank"`
	Data            trtData     `json:"data"`
}

// trtIdentity is what places an event in a sequence.
type trtIdentity struct {
	EventID         json.Number `json:"event_id"`
	AttentionDPRank *int64      `json:"attention_dp_rank"`
}

// trtData is an event's payload; which fields are set depends on Type.
type trtData struct {
	Type        string        `json:"type"`
	ParentHash  trtHashJSON   `json:"parent_hash"`
	Blocks      []trtBlock    `json:"blocks"`
	BlockHashes []trtHashJSON `json:"block_hashes"`
}

// trtBlock is one stored block.
type trtBlock struct {
	BlockHash trtHashJSON `json:"block_hash"`
	Tokens    []trtToken  `json:"tokens"`
	CacheSalt trtPresent  `json:"cache_salt"`
	MMKeys    trtPresent  `json:"mm_keys"`
}

// trtHashJSON is an engine block hash as decoded (trtHash): set when the
// value was a hash, bad when it was anything else but null. It never
// fails a decode, so a bad hash costs its event alone.
type trtHashJSON struct {
	v        uint64
	set, bad bool
}

// UnmarshalJSON implements json.Unmarshaler.
func (h *trtHashJSON) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*h = trtHashJSON{}
		return nil
	}
	v, ok := trtHash(b)
	*h = trtHashJSON{v: v, set: ok, bad: !ok}
	return nil
}

// trtPresent records whether an optional member is set to something
// other than null or an empty value, without keeping it.
type trtPresent bool

// UnmarshalJSON implements json.Unmarshaler.
func (p *trtPresent) UnmarshalJSON(b []byte) error {
	*p = trtPresent(!isNullish(b))
	return nil
}

// trtToken is one unique_token.
type trtToken struct {
	TokenID      trtTokenID `json:"token_id"`
	TokenExtraID int64      `json:"token_extra_id"`
}

// trtTokenID is a token id that knows whether it was sent: a token
// without one (or with null) is malformed, not token 0.
type trtTokenID struct {
	v   int64
	set bool
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *trtTokenID) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*t = trtTokenID{}
		return nil
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return fmt.Errorf("token_id %s: %w", b, ErrMalformed)
	}
	*t = trtTokenID{v: v, set: true}
	return nil
}

// id returns the token id as the prompt chain keys it, or false when it
// is missing or out of range.
func (t trtTokenID) id() (uint32, bool) {
	if !t.set || t.v < 0 || t.v > 1<<32-1 {
		return 0, false
	}
	return uint32(t.v), true
}

// TensorRT-LLM event types (data.type).
const (
	trtCreated = "created"
	trtStored  = "stored"
	trtRemoved = "removed"
	trtUpdated = "updated"
)

// trtHash reads an engine block hash: a JSON integer (unsigned, or a
// signed value of the same 64 bits) or a string (a hex digest in newer
// builds, reduced to a 64-bit handle). ok is false for null or anything
// else.
func trtHash(raw []byte) (uint64, bool) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return 0, false
	case raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil || s == "" {
			return 0, false
		}
		return xxh3.HashString(s), true
	}
	if u, err := strconv.ParseUint(string(raw), 10, 64); err == nil {
		return u, true
	}
	if i, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return uint64(i), true
	}
	return 0, false
}

// isNull reports whether a JSON value is null.
func isNull(raw []byte) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// isNullish reports whether an optional JSON field is absent, null or empty
// ("", [], {}).
func isNullish(raw []byte) bool {
	switch string(bytes.TrimSpace(raw)) {
	case "", "null", `""`, "[]", "{}":
		return true
	}
	return false
}

// trtRun is the part of a stored event llb can key: the leading full,
// text-only blocks, their engine hashes and tokens, or why the rest was cut.
type trtRun struct {
	hashes []uint64
	tokens []uint32
	// blockSize is the token count of the run's blocks: the rule's, or a
	// larger (or, for a cut inside the run, smaller) engine block size that
	// raises the contract guard.
	blockSize int
	// cut, when not numIgnore, is why blocks after the run were dropped;
	// cutBlocks is how many.
	cut       IgnoreReason
	cutBlocks int
	cutCause  string
}

// noCut marks a run kept whole.
const noCut = NumIgnoreReasons

// trtStoredRun extracts the keyable run of a stored event for blocks of bs
// tokens. A block of another size ends the run: fewer tokens is the partial
// tail (the engine's last block of a prompt; it cannot be matched block by
// block), more tokens — or fewer before the last block — is an engine whose
// tokens_per_block is not kvBlockSize, reported as a run of that block size
// so the mirror raises the contract guard. A block with multimodal tokens or
// a cache_salt ends it too: llb's prompt chain cannot reproduce them.
func trtStoredRun(blocks []trtBlock, bs int, dst *trtRun) error {
	*dst = trtRun{hashes: dst.hashes[:0], tokens: dst.tokens[:0], blockSize: bs, cut: noCut}
	for i := range blocks {
		b := &blocks[i]
		h, ok := b.BlockHash.v, b.BlockHash.set
		if !ok {
			return fmt.Errorf("stored block %d: block_hash is not an integer or a string: %w", i, ErrMalformed)
		}
		n := len(b.Tokens)
		switch {
		case n != bs && (n > bs || i < len(blocks)-1):
			if i == 0 {
				// Wrong block size from the first block: hand the mirror
				// one block of the engine's size so its contract check
				// trips and names the setting.
				dst.blockSize = n
				dst.hashes = append(dst.hashes, h)
				for _, t := range b.Tokens {
					id, _ := t.TokenID.id() // the contract check needs the count, not the ids
					dst.tokens = append(dst.tokens, id)
				}
				dst.cut, dst.cutBlocks = IgnoreBlockSize, len(blocks)-1
				dst.cutCause = fmt.Sprintf("TensorRT-LLM stores blocks of %d tokens but the rule's kvBlockSize is %d; set kvBlockSize to the engine's tokens_per_block", n, bs)
				return nil
			}
			dst.cut, dst.cutBlocks = IgnoreBlockSize, len(blocks)-i
			dst.cutCause = fmt.Sprintf("TensorRT-LLM stores blocks of %d tokens but the rule's kvBlockSize is %d; set kvBlockSize to the engine's tokens_per_block", n, bs)
			return nil
		case n != bs:
			dst.cut, dst.cutBlocks = IgnoreBlockSize, 1
			dst.cutCause = fmt.Sprintf("a partial block of %d tokens (kvBlockSize %d) ends a stored run: the prompt's tail cannot be matched block by block", n, bs)
			return nil
		case bool(b.CacheSalt):
			dst.cut, dst.cutBlocks = IgnoreCacheSalt, len(blocks)-i
			dst.cutCause = "TensorRT-LLM cached the blocks for a request with a cache_salt; llb's prompt chain does not include it"
			return nil
		case bool(b.MMKeys) || hasExtraTokens(b.Tokens):
			dst.cut, dst.cutBlocks = IgnoreMultimodal, len(blocks)-i
			dst.cutCause = "a stored block holds multimodal tokens (token_extra_id or mm_keys) llb's prompt chain cannot reproduce"
			return nil
		}
		for _, t := range b.Tokens {
			id, ok := t.TokenID.id()
			if !ok {
				return fmt.Errorf("stored block %d: a token without a token id in 0..2^32-1 (%d, sent %t): %w", i, t.TokenID.v, t.TokenID.set, ErrMalformed)
			}
			dst.tokens = append(dst.tokens, id)
		}
		dst.hashes = append(dst.hashes, h)
	}
	return nil
}

// hasExtraTokens reports a multimodal token (token_extra_id != 0).
func hasExtraTokens(ts []trtToken) bool {
	for _, t := range ts {
		if t.TokenExtraID != 0 {
			return true
		}
	}
	return false
}

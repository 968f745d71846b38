package engine

import (
	"time"

	"github.com/llbproject/llb/inventory"
)

// Ticket identifies a submitted request inside one Engine. Tickets increase
// with submission order and are never reused.
type Ticket uint64

// Request is one sequence to serve: a prompt's tokens and how many tokens to
// generate (the simulator always generates exactly MaxTokens, as with
// ignore_eos). The engine keeps Tokens and Digests without copying: the
// caller must not change them after Submit.
type Request struct {
	// ID is the engine-level request id (vLLM's "cmpl-<X-Request-Id>-0");
	// a prefill leg returns it as remote_request_id.
	ID string
	// Tokens is the prompt (at least one token).
	Tokens []uint32
	// MaxTokens is the number of tokens to generate (>= 1).
	MaxTokens int
	// Extra are the hash extra keys (LoRA name, cache_salt, mm items).
	Extra inventory.ExtraKeys
	// LoRAID is the LoRA int id published as lora_id (0 = none).
	LoRAID int
	// Digests are the block digests of Tokens under the engine's Hasher,
	// one per full block. Nil: the engine computes them. A caller hashing
	// in parallel passes them in; a wrong count is ErrInvalidRequest.
	Digests []inventory.Digest
	// RemoteDecode is do_remote_decode: this is a P/D prefill leg. Honoured
	// only when the role serves remote decode.
	RemoteDecode bool
	// RemotePrefill, when set, says the prompt KV was pulled from a prefill
	// worker (the caller did the pull): the engine skips prefill and
	// charges the transfer time instead. Honoured only when the role
	// accepts remote prefill.
	RemotePrefill *RemotePrefill
}

// RemotePrefill describes KV blocks a decode leg pulled.
type RemotePrefill struct {
	// Blocks is the number of blocks pulled.
	Blocks int
}

// RemoteParams is what a prefill leg returns as kv_transfer_params.
type RemoteParams struct {
	// EngineID is remote_engine_id.
	EngineID string
	// RequestID is remote_request_id (the leg's Request.ID).
	RequestID string
	// BlockIDs are the physical ids of the leased full prompt blocks
	// (remote_block_ids), empty when the prompt is shorter than a block.
	BlockIDs []int
	// NumTokens is remote_num_tokens, the prompt length.
	NumTokens int
}

// FinishReason is why a request stopped.
type FinishReason uint8

// Finish reasons.
const (
	// FinishNone: still running.
	FinishNone FinishReason = iota
	// FinishLength: MaxTokens were generated ("length").
	FinishLength
	// FinishAbort: cancelled by the caller ("abort").
	FinishAbort
)

// String is the OpenAI finish_reason spelling ("" while running).
func (f FinishReason) String() string {
	switch f {
	case FinishLength:
		return "length"
	case FinishAbort:
		return "abort"
	}
	return ""
}

// Progress is a request's state after a change; Advance returns one per
// changed request.
type Progress struct {
	// Ticket names the request.
	Ticket Ticket
	// Admitted is set once the request left the waiting queue.
	Admitted bool
	// AdmittedAt is when it was admitted (zero while waiting).
	AdmittedAt time.Time
	// CachedTokens are the prompt tokens served from the prefix cache.
	CachedTokens int
	// Generated is how many output tokens exist so far.
	Generated int
	// FirstTokenAt is when the first output token was produced (zero
	// before).
	FirstTokenAt time.Time
	// Done is set when the request finished or was aborted.
	Done bool
	// DoneAt is when it finished.
	DoneAt time.Time
	// Finish is why it stopped (FinishNone while running).
	Finish FinishReason
	// Remote is set on a finished prefill leg that leased its blocks.
	Remote *RemoteParams
	// PulledRemote is set when the request ran as a decode leg on pulled
	// blocks.
	PulledRemote bool
}

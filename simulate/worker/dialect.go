package worker

import (
	"fmt"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/engine"
)

// Dialect is the serving engine a worker speaks as. It decides the block
// hash, how KV events leave the worker, the P/D protocol and how strictly
// requests are parsed:
//
//	           hash            KV events                        P/D                               unknown fields
//	vllm       sha256_cbor …   ZMQ PUB, vLLM msgpack (one run    NIXL kv_transfer_params,          ignored
//	                           per event)                        prefill then decode
//	sglang     sha256_sglang   ZMQ PUB at KVPort (+ rank), one   bootstrap_host/port/room, sent    ignored
//	                           BlockStored per page, signed      to both at once; the prefill
//	                           int64 hashes, attn_dp_rank        waits for the decode to join
//	trtllm     engine-internal no publisher: a ring drained by   disaggregated_params context_only  400
//	                           POST /kv_cache_events (JSON,      then generation_only with the
//	                           token lists, event_id)            context answer's params
type Dialect string

// Dialects.
const (
	// DialectVLLM is vLLM's OpenAI server (the default).
	DialectVLLM Dialect = "vllm"
	// DialectSGLang is SGLang's server.
	DialectSGLang Dialect = "sglang"
	// DialectTRTLLM is TensorRT-LLM's trtllm-serve.
	DialectTRTLLM Dialect = "trtllm"
)

// ParseDialect validates a dialect name ("" is vllm).
func ParseDialect(s string) (Dialect, error) {
	switch Dialect(s) {
	case "", DialectVLLM:
		return DialectVLLM, nil
	case DialectSGLang, DialectTRTLLM:
		return Dialect(s), nil
	}
	return "", fmt.Errorf("engine %q (want vllm, sglang or trtllm): %w", s, ErrConfig)
}

// hashAlgo is the block hash a dialect's engine keys its cache with; vLLM
// keeps the configured one.
func (d Dialect) hashAlgo(configured engine.HashAlgo) engine.HashAlgo {
	switch d {
	case DialectSGLang:
		return engine.HashSGLang
	case DialectTRTLLM:
		return engine.HashTRTLLM
	}
	return configured
}

// eventSink takes one engine step's KV events (the driver's output).
type eventSink interface {
	Publish(now time.Time, events []inventory.Event) error
}

// sglangSink republishes an engine step's events as SGLang's radix cache
// does (radix_cache.py _record_store_event): one BlockStored per page,
// parent_block_hash the page before it (None under the root), lora_id None,
// and its host tier named CPU_PINNED. The publisher encodes them in
// SGLang's layout.
type sglangSink struct {
	pub     eventSink
	scratch []inventory.Event
}

// Publish implements eventSink.
func (s *sglangSink) Publish(now time.Time, events []inventory.Event) error {
	out := s.scratch[:0]
	for i := range events {
		ev := events[i]
		if ev.Medium == inventory.MediumCPU {
			ev.Medium = inventory.MediumCPUPinned
		}
		ev.HasGroupIdx, ev.HasSpecKind, ev.HasExtraKeys, ev.ExtraKeys, ev.HasLoRAName = false, false, false, nil, false
		ev.HasLoRAID = false
		if ev.Kind != inventory.EventBlockStored || len(ev.BlockHashes) <= 1 {
			out = append(out, ev)
			continue
		}
		bs := ev.BlockSize
		for j := range ev.BlockHashes {
			page := ev
			page.BlockHashes = ev.BlockHashes[j : j+1 : j+1]
			page.BlockDigests = nil
			if len(ev.TokenIDs) == len(ev.BlockHashes)*bs {
				page.TokenIDs = ev.TokenIDs[j*bs : (j+1)*bs : (j+1)*bs]
			} else {
				page.TokenIDs = nil
			}
			if j > 0 {
				page.Parent, page.HasParent = ev.BlockHashes[j-1], true
			}
			out = append(out, page)
		}
	}
	s.scratch = out
	err := s.pub.Publish(now, out)
	clear(out)
	return err
}

// Package inventory is the vLLM side of llb: it mirrors each prefill
// endpoint's prefix cache from vLLM's KV-event stream and recomputes the block
// keys vLLM would compute for a prompt, so Tier 1.5 can score endpoints by
// the cached prefix they really hold.
package inventory

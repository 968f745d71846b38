package ladder

// The placement key: what the headroom law's pending placements and
// footprints are keyed by. The prefix hash (PrefixHash: the first bytes of
// the prompt) names a request's prefix for the CHWBL ring, but where every
// request opens with the same preamble — a chat service's system prompt,
// Mooncake's conversation trace, whose 12 031 requests all start with the
// same 512-token block — it is one key for the whole traffic: every miss
// would follow the last placement and one endpoint's footprint would hold
// every prompt. The key of the prompt's block chain a fixed depth in names
// what follows the preamble (the conversation, the document) while keeping
// requests that share more than that depth (a group's system prompt, a
// conversation's earlier turns) on one key.

// ChainKeyBlocks is the chain position the placement key is taken at:
// 64 blocks, 1 024 tokens at vLLM's 16-token blocks — past a 512-token
// preamble, within a 2 048-token shared system prompt.
const ChainKeyBlocks = 64

// ChainKeyFor returns the placement key of a prompt whose block-key chain
// is chain: its key at ChainKeyBlocks, or its last key when the prompt is
// shorter. false when the chain is empty (no full block, or no chain).
func ChainKeyFor(chain []uint64) (uint64, bool) {
	if len(chain) == 0 {
		return 0, false
	}
	return chain[min(len(chain), ChainKeyBlocks)-1], true
}

// placementKey is the key req's placement is remembered under: its
// ChainKey when the runtime computed one, else its PrefixHash.
func (req *Request) placementKey() (uint64, bool) {
	if req.HasChainKey {
		return req.ChainKey, true
	}
	return req.PrefixHash, req.HasPrefixHash
}

// Package gateway is llb's data plane: one HTTP listener per mode:4 rule
// that parses OpenAI requests, builds the routing input, asks the service's
// router (actors.Router) where to go, and proxies — straight through for a
// single pool, or with vLLM's two-leg NIXL protocol for P/D rules — while
// reporting every leg's outcome back to the router.
//
// # Request path
//
//	Listener ─▶ Handler.ServeHTTP
//	  ├─ readBody (bounded: 413) ─▶ ParseRequest (400 on bad JSON or fields)
//	  ├─ routeInput.build: session key, trie prompt, prefix hash, client keys,
//	  │   and for kvExactMode 1/3 the Tier-1.5 chain (tokenize + hash here,
//	  │   in the request goroutine; failures are guards, never client errors)
//	  ├─ Router.Route ─▶ Decision (unavailable → 429/503/504 via errors.go)
//	  ├─ serveSingle | servePD (retry on another endpoint before the first
//	  │   client byte: connect failures, a dead prefill once)
//	  └─ Report per leg, Finish once per ticket; access log; metrics
//
// # Choices worth knowing
//
//   - Session key: user_id, else OpenAI's "user", overridden by
//     X-Conversation-Id (ladder.SessionKeyFor applies the "auto-" and length
//     rules).
//   - Multi-prompt completions on a P/D rule are not split: the whole request
//     goes to the decision's decode endpoint, which computes the prefill
//     itself (no prefill leg, no kv_transfer_params). Splitting would need
//     fan-out and re-merging of choices and SSE streams; sending one
//     remote_block_ids for several prompts trips vLLM. Tier 1.5 gets the
//     hash_contract guard for such requests (never the concatenation's
//     hash). On single-pool rules multi-prompt requests are forwarded whole
//     and Tier 1 / Tier 1.5 key on the first prompt.
//   - Response headers are held back until the backend's first body byte, so
//     a backend that dies before producing anything yields a JSON 502, and
//     X-Llb-Route is on every response.
//   - Connection-level failures after the first byte abort the client
//     connection (panic(http.ErrAbortHandler)); a stream is never ended as if
//     it were complete.
//   - A client that leaves cancels every upstream leg (request context) and
//     is reported as FailClientGone (no health penalty); it is logged and
//     counted as status 499. A client that stops reading cannot pin a
//     handler: its writes fail at the max stream duration or a shutdown cut.
//   - Tier 1.5 tokenizes through inventory.Tokenizer with the request's own
//     form (completion prompt or chat messages plus template inputs) and
//     hashes with the rule's inventory.ChainHasher; token-id prompts are
//     hashed directly. Multimodal parts and prompt_embeds give the
//     hash_contract guard; mm_processor_kwargs (templates llb cannot
//     reproduce) give the tokenize guard.
//   - Cleartext HTTP/2 is served with prior knowledge through net/http's
//     own Protocols (Go ≥ 1.24); the deprecated HTTP/1.1 "Upgrade: h2c"
//     dance is not offered (the request is served over HTTP/1.1 instead).
//   - Request bodies are validated and decoded with a scanner of our own
//     (jsonscan.go, fuzzed against encoding/json): keys match exactly, the
//     last duplicate wins, and big prompts cost a fraction of what
//     encoding/json would.
package gateway

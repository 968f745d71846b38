// Package gateway is llb's data plane: one HTTP listener per mode:4 rule
// that parses OpenAI requests, builds the routing input, asks the service's
// router (actors.Router) where to go, and proxies — straight through for a
// single pool, or with vLLM's two-leg NIXL protocol for P/D rules — while
// reporting every leg's outcome back to the router.
//
// A Handler serves one compiled rule (*rule.Compiled: every bound and
// default already applied by the rule package) with the daemon's Options;
// package lifecycle creates, replaces and removes handlers and listeners as
// rules change.
//
// # Request path
//
//	Listener: accept, sniff the first bytes of the connection
//	  ├─ "PRI * HTTP/2.0" (h2c) ─▶ net/http server ─▶ Handler.ServeHTTP (nethttp.go)
//	  └─ anything else ─▶ fasthttp server (HTTP/1.1) ─▶ Handler.serveFast
//	        (body read by the server, bounded: 413 / 408 via requestError)
//	Handler.serve(exchange):
//	  ├─ X-Llb-Hop names us: 508 ─▶ ParseRequest (400 on bad JSON or fields)
//	  ├─ routeInput.build: session key, trie prompt, prefix hash, client keys,
//	  │   and for kvExactMode 1/3 the Tier-1.5 chain (tokenize + hash here,
//	  │   in the request goroutine; failures are guards, never client errors)
//	  ├─ Router.Route ─▶ Decision (unavailable → 429/503/504 via errors.go)
//	  ├─ serveSingle | servePD: legs on llb's own upstream pool (upstream.go,
//	  │   leg.go), retried on another endpoint before the first client byte
//	  │   (connect failures, a dead prefill once, a decode silent past its
//	  │   first-byte bound, an endpoint taken out by the EndpointWatch)
//	  └─ relay: the answer is left in the exchange's response; a buffered
//	      body is sent by the server with the head, a streamed one is pulled
//	      by the server from relayStream after the handler returned
//	Report per leg, Finish once per ticket; access log; metrics — when the
//	response is built, or for a stream when the server has written it.
//	With a cached-token prediction (Route.Prediction), the answering leg's
//	bytes pass through usageScanner (usage.go) on their way — the buffered
//	body before its head goes out, each streamed read before its write, the
//	P/D prefill leg's JSON as read — and the engine's
//	usage.prompt_tokens_details.cached_tokens goes back with the leg's
//	Outcome, into X-Llb-Route (kv_predicted, kv_cached) and the access log.
//
// # Why not net/http
//
// With net/http's server and Transport llbd reached a fifth of HAProxy's
// request rate on small completions: per request, two goroutine hand-offs
// in the Transport, ~100 allocations and a header map each way. The data
// plane now uses fasthttp's HTTP/1.1 server (zero allocations per request,
// a goroutine per connection) and a lean upstream client of its own:
//
//   - upstream.go keeps one pool of keep-alive connections per endpoint.
//     A request head is written straight from the client's parsed header
//     (headers.go: hop-by-hop headers dropped, X-Forwarded-*, X-Real-IP and
//     X-Llb-Hop added) and sent with the body in one write; the response
//     head is parsed into the client's response by fasthttp.ResponseHeader;
//     bodyReader frames the body (length, chunked, until close). A stale
//     keep-alive connection (closed by the backend while idle) is caught by
//     a peek before reuse, or retried once on a new connection.
//   - Every bound is a deadline on the upstream connection, armed before a
//     read (leg.go): the max stream duration, the prefill deadline, the
//     decode first-byte bound, timeoutMemberData or the stream idle bound.
//     A read that hits one is classified by which bound was nearest. No
//     timer, goroutine or context per request (a request gets a context of
//     its own only when max_stream_duration is under 10 minutes, so a
//     routing park ends at it too).
//   - A leg is cancelled from outside by putting its connection's deadline
//     in the past (exchange.abort, abortLeg): when the client leaves, when
//     the listener cuts, when the EndpointWatch takes the endpoint out. The
//     connection is then closed, so the backend sees the request go.
//   - A departing HTTP/1.1 client is noticed by a watch that peeks at its
//     socket (MSG_PEEK: nothing is consumed), started only for exchanges
//     still running after 200 ms — inference requests, not the short ones —
//     in a goroutine that ends with the exchange. After a body byte went
//     out a failed write also tells.
//   - Exchanges, parsed requests, buffers and relay state are pooled; per
//     proxied request two allocations remain, both handed to the router
//     (the RouteRequest and the prompt string, whose bytes the rendering
//     shares). Pools keep small things only: a connection keeps a request
//     body buffer up to 64 KiB, a pooled exchange no reference to its last
//     body or prompt, so a burst of large bodies leaves nothing behind
//     (bodybudget.go, memtrim.go).
//   - Process-wide bounds shared by every listener: the request-body budget
//     (bodybudget.go; HTTP/1.1 reserves at the head, found from fasthttp's
//     HeaderReceived hook through headerctx.go; h2c as the body arrives)
//     and the client connection limit (connlimit.go, at accept).
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
//     X-Llb-Route is on every response. A response body with a
//     Content-Length up to 1 MiB (and not SSE) is read whole and sent with
//     its head; SSE and bodies of unknown length are streamed, each upstream
//     read one chunk flushed at once (an SSE event reaches the client as it
//     arrives; no goroutine per stream or token). An HTTP/1.0 client, which
//     cannot read chunks, gets a streamed body as it comes, without a
//     length, ended by the connection's close as vLLM's server does (a
//     reset when the upstream broke); fasthttp cannot frame a body so, and
//     the connection is hijacked for it (stream.go).
//     Response trailers are dropped (vLLM sends none).
//   - Connection-level failures after the first byte abort the client
//     connection (the server closes it without ending the chunked body); a
//     stream is never ended as if it were complete.
//   - A client that leaves cancels every upstream leg and is reported as
//     FailClientGone (no health penalty); it is logged and counted as
//     status 499. A client that stops reading pins a connection for the
//     send bound at most (Options.ClientSendTimeout, 60 s; sendbound.go):
//     a write that the client takes no byte of for that long fails, the
//     client connection (an h2c stream) is cut, a stream's upstream leg
//     ends with it, and llb_client_send_timeouts_total counts it. The
//     max stream duration and a shutdown cut bound the writes too. An h2c
//     connection carries at most 100 streams at once.
//   - Requests the server cannot read are answered by the listener
//     (requestError) with the same JSON errors and the connection closed: a
//     body over the rule's limit 413, a body (or head) slower than its bound
//     408, a head over 16 KiB 431, malformed HTTP 400. A request with both
//     Transfer-Encoding and Content-Length is answered, then its connection
//     closed (RFC 9112 §6.1), so a request pipelined behind it is never
//     served; an HTTP/1.0 request with Transfer-Encoding is refused; a
//     request line naming another HTTP version gets 505. Requests are routed
//     on their path as sent ("//v1/models" is not "/v1/models"). A target an
//     HTTP/1.1 request line cannot carry (a space or control byte, a byte
//     above 0x7E, a #fragment) is refused 400 bad_request on both front
//     ends (target.go): it would otherwise go upstream as sent.
//   - A client taken for gone (it may only have shut its write side) gets
//     its connection closed, never an answer for a request nobody served.
//   - Tier 1.5 tokenizes through inventory.Tokenizer with the request's own
//     form (completion prompt or chat messages plus template inputs) and
//     hashes with the rule's inventory.ChainHasher; token-id prompts are
//     hashed directly. Multimodal parts and prompt_embeds give the
//     hash_contract guard; mm_processor_kwargs (templates llb cannot
//     reproduce) give the tokenize guard.
//   - Cleartext HTTP/2 is served with prior knowledge: the listener hands
//     connections that open with the HTTP/2 preface to net/http's server
//     (fasthttp has no HTTP/2), whose requests are copied into the same
//     exchange shape. The deprecated HTTP/1.1 "Upgrade: h2c" dance is not
//     offered (the request is served over HTTP/1.1 instead).
//   - Request bodies are validated and decoded with a scanner of our own
//     (jsonscan.go, fuzzed against encoding/json): keys match exactly, the
//     last duplicate wins, and big prompts cost a fraction of what
//     encoding/json would.
package gateway

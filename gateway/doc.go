// Package gateway is llb's data plane: one HTTP listener per VIP:port of
// mode:4 rules (several rules may share one, RuleTable picking each
// request's rule by host, path and model) that parses OpenAI requests,
// builds the routing input, asks the rule's router (actors.Router) where
// each request goes and proxies it — straight
// through for a single pool, in the engine's P/D protocol for a P/D pair —
// reporting the first byte, every leg and the end through the ticket the
// router handed back (actors.Ticket).
//
// A Handler serves one compiled rule (*rule.Compiled: every bound and
// default already applied by the rule package) with the daemon's Options;
// package lifecycle creates, replaces and removes handlers and listeners as
// rules change.
//
// # A request's walk
//
// One file per step, in the order a request meets them, all in its
// client connection's goroutine:
//
//   - listener.go accepts on the VIP:port within the process's connection
//     limit (connlimit.go; the open-file limit it derives from in
//     nofile_unix.go, nofile_other.go) and sniffs the first bytes: the
//     HTTP/2 preface goes to the h2c front end (nethttp.go, its server's
//     error lines rate-limited by serverlog.go), anything else to
//     fasthttp's HTTP/1.1 server, which reads the head and the body within
//     the rule's limit and the process's body budget (bodybudget.go,
//     reserved at the head through headerctx.go; body.go bounds the time
//     a body may take). ruletable.go picks the request's rule among those
//     sharing the listener, by host, path and model.
//   - conn.go serves each HTTP/1.1 request of its client connection
//     (serveFast) and has the socket watched for the client leaving
//     (departures_linux.go, one epoll watcher for the process;
//     departures_other.go where it is not wired).
//   - exchange.go holds the request's state from its first byte to the end
//     of its response: the client's request and response, the
//     cancellation its legs obey, the attempt in progress, the record the
//     access log reads.
//   - handler.go is the front door: a request that looped back through
//     X-Llb-Hop (headers.go), to a paused rule, in an HTTP version llb does
//     not speak or with a target it cannot forward (target.go) is answered
//     at once; the request's tenant and class are settled (tenancy.go) and
//     its TTFT objective read (objective.go); the rest is dispatched by
//     method and path through the API table (apis.go: every route of
//     vLLM's server llb proxies). An inference API parses the body
//     (request.go, the prompt and chat messages in prompt.go, both on the
//     scanner of jsonscan.go; the Responses and Anthropic Messages APIs
//     become vLLM's chat messages in api_responses.go and api_messages.go,
//     audio forms are read in api_audio.go) and builds the routing input
//     (route_input.go; Tier 1.5 tokenizes and hashes the prompt in
//     kvinput.go). A Responses answer's id is pinned to its endpoint as it
//     passes (respstore.go).
//   - attempt.go is the attempt loop: Router.Route, the plan the decision
//     calls for, and a new route avoiding an endpoint that never answered
//     (or died mid-answer), while the client has no byte.
//   - pd.go runs a P/D pair in the rule's engine dialect (pdDialect):
//     pd_nixl.go is vLLM's NIXL two-leg protocol and pd_trtllm.go
//     TensorRT-LLM's context leg then generation leg, both run by
//     pd_sequential.go (one leg after the other); pd_sglang.go is SGLang's
//     concurrent dual dispatch through a bootstrap room (its prefill leg
//     runs beside the answering leg, in a goroutine of its own, and is
//     settled before the ticket is concluded). The legs' bodies are the client's
//     with top-level members rewritten (jsonobj.go).
//   - relay.go runs the leg that answers the client and relays its answer:
//     a small body with its head, anything else streamed by stream.go
//     after the handler returned, every client write under the send bound
//     (sendbound.go).
//   - migrate.go continues a stream whose worker died, froze or dropped
//     the connection on another endpoint, spliced into the client's stream
//     (ssetrack.go follows its events), from inside the stream's relay.
//   - leg.go is one upstream request and its deadlines, on the keep-alive
//     connections of upstream.go; legwatch.go cancels the legs of an
//     endpoint the router takes out of service; liveness.go tells the
//     endpoint's probes (built in probe.go) what its legs' bytes showed.
//   - usage.go reads the engine's cached tokens from the answering leg's
//     bytes on their way (cache truth).
//   - errors.go renders the client errors llb answers itself.
//   - accesslog.go writes X-Llb-Route, the access log line and the
//     request's metrics (metrics.go, the per-tenant ones in
//     tenantmetrics.go) when the exchange ends; memtrim.go and wavetrim.go
//     give a burst's memory back once it is over.
//
// The handler runs with the daemon's Options (config.go). A new API is an
// entry of the API table; a new engine's P/D protocol is a pdDialect of
// its own file, beside vLLM's.
//
// # Why fasthttp and an upstream client of its own
//
// net/http's server and Transport cost, per request, two goroutine
// hand-offs in the Transport, ~100 allocations and a header map each way:
// on small completions that holds llbd to a fifth of HAProxy's request
// rate (docs/performance.md). So the data plane runs on fasthttp's
// HTTP/1.1 server (zero allocations per request, a goroutine per
// connection) and a lean upstream client of its own:
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
//     routing park ends at it too; an SGLang P/D pair runs its prefill leg
//     in a goroutine, as the protocol needs both legs at once).
//   - A leg is cancelled from outside by putting its connection's deadline
//     in the past (exchange.abort, abortLeg): when the client leaves, when
//     the listener cuts, when the EndpointWatch takes the endpoint out. The
//     connection is then closed, so the backend sees the request go.
//   - A departing HTTP/1.1 client is noticed by the process's departure
//     watcher: one epoll instance and one goroutine, with which a
//     connection is registered (one-shot: input, hang-up, error) for
//     exchanges still running after 200 ms — inference requests, not the
//     short ones — until the exchange ends; when it fires, a peek
//     (MSG_PEEK: nothing is consumed) tells a departure from a pipelined
//     request. After a body byte went out a failed write also tells.
//   - Exchanges, parsed requests, buffers and relay state are pooled; per
//     proxied request three allocations remain, two handed to the router
//     (the RouteRequest and the prompt string, whose bytes the rendering
//     shares) and fasthttp's one-byte read of a keep-alive request's
//     first byte (ReduceMemoryUsage). Pools keep small things only: a
//     connection keeps a request body buffer up to 64 KiB, a pooled
//     exchange no reference to its last body or prompt, so a burst of
//     large bodies leaves nothing behind (bodybudget.go, memtrim.go).
//   - Buffers only while data waits: a stream between two events holds no
//     read buffer (the server's, ReduceMemoryUsage; the upstream
//     connection's, upConn.waitReadable) and no relay buffer (taken from
//     the pool per chunk in flight); an idle pooled upstream connection
//     and a keep-alive client connection hold none either, nor does a leg
//     waiting for its response head. A request's first bytes and a
//     response head are read in the system call that finds them
//     (clientConn.readFirst, upConn.readEarly: a pooled buffer taken for
//     the read, given back if nothing came), so a short request pays no
//     extra call for it; a request up to 4 KiB of body is written to its
//     endpoint inside the wait for its answer (upConn.sendEarly), so no
//     read finds nothing between the two. What a stream
//     keeps is the server's 4 KiB write buffer, its exchange and request
//     context, and one goroutine, the connection's (the departure watch is
//     a registration, not a goroutine). After a wave of connections the
//     memory goes back to the OS
//     (wavetrim.go).
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
//   - Connection-level failures after the first byte migrate a stream to
//     another endpoint (migrate.go) when the request can be continued and
//     its rule's migrationLimit allows; otherwise they abort the client
//     connection (the server closes it without ending the chunked body). A
//     stream is never ended as if it were complete: llb writes [DONE]
//     itself only for a stream whose finish_reason went out.
//   - A client that leaves cancels every upstream leg and is reported as
//     FailClientGone (no health penalty); it is logged and counted as
//     status 499. A client that stops reading pins a connection for the
//     send bound at most (Options.ClientSendTimeout, 60 s; sendbound.go):
//     a write that the client takes no byte of for that long fails, the
//     client connection is reset (an h2c stream), a stream's upstream leg
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
//   - Tier 1.5 tokenizes through tokenizer.Tokenizer with the request's own
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

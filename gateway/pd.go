package gateway

import (
	"io"
	"net/http"
	"time"

	"github.com/llbproject/llb/actors"
)

// The P/D two-leg protocol with vLLM's NixlConnector (vllm-contract.md §4):
//
//  1. one X-Request-Id (LoxiLB's ___prefill_addr_…___decode_addr_…___<uuid>___
//     form) on both legs;
//  2. prefill leg: the client body rewritten by PrefillBody, sent to the
//     prefill endpoint; the full JSON answer is awaited under the prefill
//     deadline and bounded (DefaultPrefillResponseLimit; params ≤ 64 KiB);
//  3. decode leg: the ORIGINAL body with kv_transfer_params replaced by the
//     prefill's (removed when it returned none), streamed back as-is.
//
// Failure rules: a prefill that cannot be connected to or breaks before
// answering is retried once on another prefill endpoint (a new route
// avoiding it, a new request id); a prefill deadline is 504
// pd_prefill_timeout; a prefill non-2xx answer is relayed to the client; a
// decode that refuses the connection never saw the request, so the whole
// exchange is retried on a new route avoiding it (the connect-retry
// budget; the unused prefill lease expires on the prefill side) — and so
// is a streamed decode silent past DecodeTimeout, or one whose endpoint the
// router takes out (probe, breaker) before it answered (EndpointWatch); a
// decode that dies after accepting the request, before the client got a
// byte, is 502 pd_decode_backend_died (LoxiLB's rule); after bytes it
// aborts the client connection.

// prefillResult is what the prefill leg produced.
type prefillResult struct {
	status int
	body   []byte // x.preBody
	// truncated is true when the body exceeded DefaultPrefillResponseLimit.
	truncated bool
	ttfb      time.Duration
	// usage is the engine's usage report in the body.
	usage actors.Usage
}

// runPrefill sends the prefill leg and reads its whole (bounded) answer
// into x.pre (head) and x.preBody.
func (h *Handler) runPrefill(x *exchange, lg *leg, body []byte, id string) (prefillResult, error) {
	var pr prefillResult
	x.scratch = x.appendRequestHead(x.scratch[:0], h.addrs[lg.ep], len(body), legSetsRequestID|legSetsJSON, id)
	if err := lg.send(x.scratch, body, &x.preHead); err != nil {
		return pr, err
	}
	pr.ttfb = time.Since(lg.start)
	pr.status = x.preHead.StatusCode()
	var br bodyReader
	br.reset(lg.c.br, &x.preHead, false)
	b := x.preBody[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		lg.armRead()
		n, err := br.Read(b[len(b):min(cap(b), DefaultPrefillResponseLimit+1)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			lg.end(false)
			return pr, err
		}
		if len(b) > DefaultPrefillResponseLimit {
			pr.truncated = true
			break
		}
	}
	lg.end(br.reusable())
	if cap(b) <= maxKeptPrefillBuf {
		x.preBody = b
	}
	if pr.truncated {
		b = b[:DefaultPrefillResponseLimit]
	}
	pr.body = b
	pr.usage = scanUsage(b)
	return pr, nil
}

// maxKeptPrefillBuf bounds the prefill body buffer an exchange keeps for
// the next request.
const maxKeptPrefillBuf = 64 << 10

// servePD runs both legs of one routed P/D attempt, reports each leg and
// finishes the ticket. canRetry allows one re-route after a dead prefill,
// canRetryDecode one after a decode that refused the connection.
func (h *Handler) servePD(x *exchange, req *Request, route actors.Route, canRetry, canRetryDecode bool) attempt {
	t := route.Ticket
	pEP, dEP := route.Decision.Prefill, route.Decision.Decode
	x.prefillEP, x.decodeEP, x.pd = pEP, dEP, true
	prefillBody, err := PrefillBody(req.Body)
	if err != nil { // unreachable: the body parsed as an object
		x.finish(actors.Result{})
		h.fail(x, requestError(http.StatusBadRequest, CodeInvalidJSON, "", "the request body must be a JSON object"))
		return attempt{}
	}
	id := PDRequestID(h.addrs[pEP], h.addrs[dEP])
	x.requestID = id

	// Prefill leg.
	start := time.Now()
	lg := x.newLeg(actors.LegPrefill, pEP, start)
	lg.limit, lg.limitCause = start.Add(h.prefillTimeout), causePrefill
	pr, err := h.runPrefill(x, &lg, prefillBody, id)
	x.prefill = time.Since(start)
	if err != nil {
		fail, cause := lg.failure(err)
		x.ticket.Report(actors.Outcome{Leg: actors.LegPrefill, Status: pr.status, Failure: fail, TTFB: pr.ttfb, Duration: x.prefill})
		x.finish(actors.Result{})
		if cause == causeConnect || cause == causeReset {
			h.met.prefillDied.Inc()
		}
		x.detail = err.Error()
		if (cause == causeConnect || cause == causeReset) && canRetry {
			return attempt{retry: true, failedEP: pEP, prefill: true, err: h.clientErrorFor(cause, actors.LegPrefill, err)}
		}
		h.answerLeg(x, fail, cause, actors.LegPrefill, err)
		return attempt{}
	}
	h.met.prefillDuration.Update(seconds(x.prefill))
	var usage actors.Usage
	if x.observe {
		x.cached, usage = pr.usage, pr.usage
	}
	x.ticket.Report(actors.Outcome{Leg: actors.LegPrefill, Status: pr.status, TTFB: pr.ttfb, Duration: x.prefill, Usage: usage})
	if pr.status/100 != 2 {
		x.finish(actors.Result{})
		h.relayPrefillError(x, &pr)
		return attempt{}
	}

	params, out := ExtractKVParams(pr.body)
	if pr.truncated {
		params, out = nil, KVParamsOversize
	}
	x.kvOut = out
	if out == KVParamsFound {
		h.met.kvParamsFound.Inc()
	} else {
		h.met.kvParamsMissing.Inc()
	}
	decodeBody, err := DecodeBody(req.Body, params)
	if err != nil { // unreachable: the body parsed as an object
		x.finish(actors.Result{})
		h.fail(x, requestError(http.StatusBadRequest, CodeInvalidJSON, "", "the request body must be a JSON object"))
		return attempt{}
	}

	// Decode leg: streamed to the client. A decode that never answered is
	// retried (serveSingle's rule: refused connection, silent past the
	// decode bound, taken out of service); the client has nothing yet. The
	// retry runs a new exchange, prefill included, on a route that avoids
	// this decode endpoint.
	return h.serveSingle(x, decodeBody, t, actors.LegDecode, dEP, canRetryDecode, legSetsRequestID, id)
}

// relayPrefillError sends the prefill's non-2xx answer to the client as the
// client's answer (status, headers and body).
func (h *Handler) relayPrefillError(x *exchange, pr *prefillResult) {
	x.preHead.CopyTo(&x.out.Header)
	x.out.Header.SetNoDefaultContentType(true)
	stripResponseHop(&x.out.Header)
	x.out.SetBody(pr.body)
	h.commit(x)
	x.bytes += int64(len(pr.body))
}

package gateway

import (
	"context"
	"io"
	"net/http"
	"strconv"
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
	header http.Header
	body   []byte
	// truncated is true when the body exceeded DefaultPrefillResponseLimit.
	truncated bool
	ttfb      time.Duration
}

// runPrefill sends the prefill leg and reads its whole (bounded) answer.
func (h *Handler) runPrefill(ctx context.Context, r *http.Request, ep int, hdr http.Header, body []byte) (prefillResult, error) {
	var pr prefillResult
	start := time.Now()
	resp, err := h.rt.RoundTrip(h.newUpstream(ctx, r, ep, hdr, body))
	if err != nil {
		return pr, err
	}
	defer resp.Body.Close()
	pr.ttfb = time.Since(start)
	pr.status, pr.header = resp.StatusCode, resp.Header
	size := 4 << 10
	if resp.ContentLength > 0 && resp.ContentLength <= DefaultPrefillResponseLimit {
		size = int(resp.ContentLength) + 1
	}
	b, err := readAllSized(io.LimitReader(resp.Body, DefaultPrefillResponseLimit+1), size)
	if err != nil {
		return pr, err
	}
	if len(b) > DefaultPrefillResponseLimit {
		b, pr.truncated = b[:DefaultPrefillResponseLimit], true
	}
	pr.body = b
	return pr, nil
}

// servePD runs both legs of one routed P/D attempt, reports each leg and
// finishes the ticket. canRetry allows one re-route after a dead prefill,
// canRetryDecode one after a decode that refused the connection.
func (h *Handler) servePD(ctx context.Context, w http.ResponseWriter, r *http.Request, hdr http.Header, req *Request,
	route actors.Route, canRetry, canRetryDecode bool, x *exchange) attempt {
	t := route.Ticket
	pEP, dEP := route.Decision.Prefill, route.Decision.Decode
	x.prefillEP, x.decodeEP, x.pd = pEP, dEP, true
	prefillBody, err := PrefillBody(req.Body)
	if err != nil { // unreachable: the body parsed as an object
		h.finish(x, t, actors.Result{})
		h.fail(w, x, requestError(http.StatusBadRequest, CodeInvalidJSON, "", "the request body must be a JSON object"))
		return attempt{}
	}
	id := PDRequestID(h.addrs[pEP], h.addrs[dEP])
	x.requestID = id

	// Prefill leg.
	ph := hdr.Clone()
	ph.Set(HeaderRequestID, id)
	ph.Set("Content-Type", "application/json")
	ph.Del("Accept-Encoding") // the gateway must read this JSON itself
	start := time.Now()
	pctx, pcancel := context.WithTimeout(ctx, h.prefillTimeout)
	pr, err := h.runPrefill(pctx, r, pEP, ph, prefillBody)
	x.prefill = time.Since(start)
	if err != nil {
		fail, cause := legFailure(err, r, ctx, pctx, nil)
		pcancel()
		h.router.Report(actors.Outcome{Ticket: t, Leg: actors.LegPrefill, Status: pr.status, Failure: fail, TTFB: pr.ttfb, Duration: x.prefill})
		h.finish(x, t, actors.Result{})
		if cause == causeConnect || cause == causeReset {
			h.met.prefillDied.Inc()
		}
		x.detail = err.Error()
		ce := h.clientErrorFor(cause, actors.LegPrefill, err)
		if (cause == causeConnect || cause == causeReset) && canRetry {
			return attempt{retry: true, failedEP: pEP, prefill: true, err: ce}
		}
		x.failure = fail
		if ce == nil {
			x.clientGone()
		} else {
			h.fail(w, x, ce)
		}
		return attempt{}
	}
	pcancel()
	h.met.prefillDuration.Update(seconds(x.prefill))
	h.router.Report(actors.Outcome{Ticket: t, Leg: actors.LegPrefill, Status: pr.status, TTFB: pr.ttfb, Duration: x.prefill})
	if pr.status/100 != 2 {
		h.finish(x, t, actors.Result{})
		h.relayPrefillError(ctx, w, &pr, x)
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
		h.finish(x, t, actors.Result{})
		h.fail(w, x, requestError(http.StatusBadRequest, CodeInvalidJSON, "", "the request body must be a JSON object"))
		return attempt{}
	}

	// Decode leg: streamed to the client. A decode that never answered is
	// retried (serveSingle's rule: refused connection, silent past the
	// decode bound, taken out of service); the client has nothing yet. The
	// retry runs a new exchange, prefill included, on a route that avoids
	// this decode endpoint.
	dh := hdr
	dh.Set(HeaderRequestID, id)
	return h.serveSingle(ctx, w, r, dh, decodeBody, t, actors.LegDecode, dEP, canRetryDecode, x)
}

// relayPrefillError sends the prefill's non-2xx answer to the client as the
// client's answer (status, content type and body).
func (h *Handler) relayPrefillError(ctx context.Context, w http.ResponseWriter, pr *prefillResult, x *exchange) {
	hdr := w.Header()
	copyResponseHeader(hdr, pr.header)
	hdr.Set("Content-Length", strconv.Itoa(len(pr.body)))
	x.setRouteHeader(hdr, h.clientAddrs)
	w.WriteHeader(pr.status)
	x.status = pr.status
	setWriteDeadline(ctx, w)
	x.ttft = time.Since(x.start)
	n, err := w.Write(pr.body)
	x.bytes += int64(n)
	if err != nil {
		x.failure = actors.FailClientGone
	}
}

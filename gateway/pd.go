package gateway

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/rule"
)

// Prefill/decode disaggregation. A P/D decision names a prefill and a
// decode endpoint; how the two are driven is the engine's protocol, its
// dialect. Each dialect is a small type in a file of its own
// (pd_nixl.go: vLLM's NIXL two-leg protocol; pd_trtllm.go: TensorRT-LLM's
// context_only / generation_only; pd_sglang.go: SGLang's concurrent dual
// dispatch through a bootstrap room) behind pdDialect. What the
// dialects share is here — the prefill leg whose answer llb reads whole,
// its failure rules, the relay of its error answer — and in the attempt
// loop and the legs: the leg that answers the client (relay.go) with its
// retry rules (attempt.go).
//
// Prefill failure rules: a prefill that cannot be connected to or breaks
// before answering is retried once on another prefill endpoint (a new
// route avoiding it); past its deadline it is 504 pd_prefill_timeout; its
// non-2xx answer is relayed to the client.

// pdDialect is one engine's P/D protocol.
type pdDialect interface {
	// serve runs one routed P/D attempt of x: x.decision names the prefill
	// and decode endpoints, x.ticket holds both, x.req is the parsed
	// request. It reports every leg it runs through x.ticket and concludes
	// the ticket, or leaves that to the stream it hands the server; it
	// answers the client or asks for a re-route.
	serve(x *exchange) attempt
}

// dialectFor returns the P/D dialect of rule c's engines: the one that
// serves a decision naming a decode endpoint.
func dialectFor(c *rule.Compiled) pdDialect {
	switch c.Engine {
	case rule.EngineTRTLLM:
		return trtllmPD()
	case rule.EngineSGLang:
		return sglang{port: c.BootstrapPort}
	}
	return nixl()
}

// pdEngineName is the name X-Llb-Route and the access log give rule c's
// P/D dialect: its engine, "" for vLLM's (the default, left unnamed).
func pdEngineName(c *rule.Compiled) string {
	if c.Engine == rule.EngineVLLM {
		return ""
	}
	return c.Engine
}

// prefillAnswer is what a prefill leg answered.
type prefillAnswer struct {
	status int
	body   []byte // the side storage's preBody
	// truncated is true when the body exceeded DefaultPrefillResponseLimit.
	truncated bool
	ttfb      time.Duration
	// usage is the engine's usage report in the body.
	usage actors.Usage
}

// runPrefill runs the prefill leg lg with body under the prefill deadline
// and reports it. ok is true when the prefill answered 2xx: its answer is
// pr, and the ticket goes on to the decode. Otherwise the ticket is
// finished and a is the attempt's end: a re-route after a dead prefill
// (once), or the client's answer — the prefill's own non-2xx answer, or
// the error for how it failed.
func (x *exchange) runPrefill(lg *leg, body []byte) (pr prefillAnswer, a attempt, ok bool) {
	h := x.h
	lg.limit, lg.limitCause = lg.start.Add(h.prefillTimeout), causePrefill
	pr, err := x.readPrefill(lg, body)
	x.prefill = time.Since(lg.start)
	if err != nil {
		fail, cause := lg.failure(err)
		x.ticket.Report(actors.Outcome{Leg: actors.LegPrefill, Status: pr.status, Failure: fail, TTFB: pr.ttfb, Duration: x.prefill})
		x.finish(actors.Result{})
		died := cause == causeConnect || cause == causeReset
		if died {
			h.met.prefillDied.Inc()
		}
		x.detail = err.Error()
		if x.following {
			return pr, attempt{retry: cause.workerFault(), failedEP: lg.ep, prefill: true}, false
		}
		if died && x.prefillRetries > 0 {
			return pr, attempt{retry: true, failedEP: lg.ep, prefill: true, err: x.clientErrorFor(cause, actors.LegPrefill, err)}, false
		}
		x.answerLeg(fail, cause, actors.LegPrefill, err)
		return pr, attempt{}, false
	}
	h.met.prefillDuration.Update(seconds(x.prefill))
	usage := pr.usage
	if x.observe {
		x.cached = pr.usage
	} else {
		usage.Reported, usage.CachedTokens = false, 0 // counted, not compared
	}
	// The prefill leg computes one token: its answer is its first token.
	x.ticket.Report(actors.Outcome{Leg: actors.LegPrefill, Status: pr.status, TTFB: pr.ttfb, Duration: x.prefill, TTFT: x.prefill, Usage: usage})
	if pr.status/100 != 2 {
		x.finish(actors.Result{})
		x.relayPrefillError(&pr)
		return pr, attempt{}, false
	}
	return pr, attempt{}, true
}

// readPrefill sends the prefill leg and reads its whole (bounded) answer
// into the exchange side's preHead (head) and preBody.
func (x *exchange) readPrefill(lg *leg, body []byte) (prefillAnswer, error) {
	x.scratch = x.appendRequestHead(x.scratch[:0], lg, len(body))
	return x.sendPrefill(lg, x.scratch, body)
}

// sendPrefill sends the prefill leg's request (head, then body) and reads
// its whole (bounded) answer into the exchange side's preHead and preBody. It touches
// nothing else of x's but its deadline and abort state, so a pair's
// prefill leg runs it in a goroutine of its own (pd_sglang.go).
func (x *exchange) sendPrefill(lg *leg, head, body []byte) (prefillAnswer, error) {
	var pr prefillAnswer
	sd := x.sides()
	if err := lg.send(head, body, &sd.preHead); err != nil {
		return pr, err
	}
	pr.ttfb = time.Since(lg.start)
	pr.status = sd.preHead.StatusCode()
	var br bodyReader
	br.reset(lg.c, &sd.preHead, false)
	b := sd.preBody[:0]
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
		sd.preBody = b
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

// relayPrefillError sends the prefill's non-2xx answer to the client as the
// client's answer (status, headers and body).
func (x *exchange) relayPrefillError(pr *prefillAnswer) {
	if x.following {
		// The client's answer is under way: the continuation failed.
		x.detail = "the continuation's prefill was answered " + strconv.Itoa(pr.status)
		return
	}
	x.sides().preHead.CopyTo(&x.out.Header)
	x.out.Header.SetNoDefaultContentType(true)
	stripResponseHop(&x.out.Header)
	x.out.SetBody(pr.body)
	x.commit()
	x.bytes += int64(len(pr.body))
}

// notAnObject finishes the ticket and answers 400 for a body a dialect
// could not rewrite (it parsed as a JSON object, so this does not happen).
func (x *exchange) notAnObject() attempt {
	x.finish(actors.Result{})
	x.fail(requestError(http.StatusBadRequest, CodeInvalidJSON, "", "the request body must be a JSON object"))
	return attempt{}
}

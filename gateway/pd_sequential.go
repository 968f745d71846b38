package gateway

import "github.com/llbproject/llb/actors"

// sequential is a P/D protocol whose legs run one after the other — vLLM's
// NIXL (nixl) and TensorRT-LLM's context_only/generation_only (trtllmPD):
// one request id on both legs; the prefill leg's whole JSON answer awaited
// under the prefill deadline and bounded (runPrefill); the parameters it
// returns carried into the decode leg, which answers the client. The
// dialects differ only in how they rewrite the bodies, where the
// parameters sit in the prefill's answer, and whether that answer can
// already be the client's.
type sequential struct {
	// prefillBody rewrites the client body for the prefill leg.
	prefillBody func(body []byte) ([]byte, error)
	// extract finds the parameters the decode leg carries.
	extract func(answer []byte) ([]byte, KVParamsOutcome)
	// finished, when set, reports a prefill answer that already finished
	// the request: it is the client's answer and no decode leg runs.
	finished func(x *exchange, pr *prefillAnswer) bool
	// decodeBody rewrites the client body for the decode leg with the
	// prefill's parameters (nil: none found).
	decodeBody func(body, params []byte) ([]byte, error)
}

// serve implements pdDialect.
func (s sequential) serve(x *exchange) attempt {
	d := &x.decision
	x.prefillEP, x.decodeEP, x.pd = d.Prefill, d.Decode, true
	body := x.req.Body
	prefillBody, err := s.prefillBody(body)
	if err != nil { // unreachable: the body parsed as an object
		return x.notAnObject()
	}
	id := PDRequestID(x.h.addrs[d.Prefill], x.h.addrs[d.Decode])
	x.requestID = id

	pl := x.newLeg(actors.LegPrefill, d.Prefill)
	pl.own, pl.id = legSetsRequestID|legSetsJSON, id
	pr, a, ok := x.runPrefill(&pl, prefillBody)
	if !ok {
		return a
	}
	params, out := s.extract(pr.body)
	if pr.truncated {
		params, out = nil, KVParamsOversize
	}
	x.kvOut = out
	if s.finished != nil && s.finished(x, &pr) {
		return attempt{}
	}
	if out == KVParamsFound {
		x.h.met.kvParamsFound.Inc()
	} else {
		x.h.met.kvParamsMissing.Inc()
	}
	decodeBody, err := s.decodeBody(body, params)
	if err != nil { // unreachable: the body parsed as an object
		return x.notAnObject()
	}
	dl := x.clientLeg(actors.LegDecode, d.Decode)
	dl.own, dl.id = legSetsRequestID, id
	return x.answer(dl, decodeBody)
}

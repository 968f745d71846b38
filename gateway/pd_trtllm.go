package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/llbproject/llb/actors"
)

// TensorRT-LLM's P/D protocol, as trtllm-serve's own disaggregated router
// drives it (tensorrt_llm/serve/openai_disagg_service.py, context first):
//
//  1. context leg: the client body with disaggregated_params
//     {"request_type":"context_only"}, stream false and no stream_options
//     (trtllm-serve refuses stream_options without stream), sent to the
//     prefill (context) endpoint; its whole JSON answer is awaited under
//     the prefill deadline and bounded, as for vLLM (pd.go);
//  2. when that answer already finished the request — its first choice's
//     finish_reason is neither "length" nor "not_finished" (the router's
//     own test), or "length" when the client asked for one token — it is
//     the client's answer: disaggregated_params taken out of its choices,
//     rendered as server-sent events when the client streams;
//  3. generation leg: the client body with disaggregated_params set to the
//     context answer's choices[0].disaggregated_params, member for member
//     and byte for byte but request_type "generation_only", sent to the
//     decode (generation) endpoint and relayed as it comes.
//
// trtllm-serve refuses any field its request model does not declare, so
// the legs carry nothing of the other dialects (no kv_transfer_params, no
// bootstrap_*); a client's own fields are forwarded and its 400 relayed.
// A context answer without usable params (absent, not an object, over
// MaxKVParamsBytes) sends the generation leg the client body without
// disaggregated_params: the generation endpoint then computes the prefill
// itself, as vLLM's decode does without kv_transfer_params.
//
// Failure rules are the P/D ones (pd.go) and the answering leg's
// (attempt.go), as for vLLM.

// trtllmPD is TensorRT-LLM's context_only / generation_only protocol.
func trtllmPD() sequential {
	return sequential{
		prefillBody: ContextOnlyBody,
		extract:     ExtractDisaggParams,
		finished:    finishedInContext,
		decodeBody:  GenerationOnlyBody,
	}
}

// finishedInContext answers the client with a context answer that already
// finished the request. A continuation always goes on to the generation
// leg: the client's stream is under way and is spliced from a leg.
func finishedInContext(x *exchange, pr *prefillAnswer) bool {
	if x.following || !contextFinished(pr.body, &x.req) {
		return false
	}
	x.answerFromContext(pr)
	return true
}

// The request rewriting.

// trtContextParams is the context leg's disaggregated_params.
const trtContextParams = `{"request_type":"context_only"}`

// contextDropped are the client fields the context leg removes or
// overrides: it runs the prefill only, never streamed.
func contextDropped(key string) bool {
	switch key {
	case "disaggregated_params", "stream", "stream_options":
		return true
	}
	return false
}

// ContextOnlyBody rewrites a client body (a valid JSON object) for
// TensorRT-LLM's context leg: disaggregated_params
// {"request_type":"context_only"}, stream false, stream_options removed.
// Every other member is copied byte for byte, in order.
func ContextOnlyBody(body []byte) ([]byte, error) {
	ed := newObjectEditor(len(body) + len(trtContextParams) + 48)
	it := memberIter{doc: body}
	for it.next() {
		if !contextDropped(string(it.m.key)) {
			ed.copyMember(body, &it.m)
		}
	}
	if it.err != nil {
		return nil, it.err
	}
	ed.add("disaggregated_params", []byte(trtContextParams))
	ed.add("stream", []byte("false"))
	return ed.bytes(), nil
}

// GenerationOnlyBody returns the generation leg's body: the client body
// with disaggregated_params replaced by params (the context answer's, as
// GenerationParams rewrites them), or removed when params is nil. When
// there is nothing to change the original slice is returned.
func GenerationOnlyBody(body, params []byte) ([]byte, error) {
	if params == nil {
		v, err := topLevelValue(body, "disaggregated_params")
		if err != nil {
			return nil, err
		}
		if v == nil {
			return body, nil
		}
	}
	ed := newObjectEditor(len(body) + len(params) + 32)
	it := memberIter{doc: body}
	for it.next() {
		if string(it.m.key) != "disaggregated_params" {
			ed.copyMember(body, &it.m)
		}
	}
	if it.err != nil {
		return nil, it.err
	}
	if params != nil {
		ed.add("disaggregated_params", params)
	}
	return ed.bytes(), nil
}

// ExtractDisaggParams returns the context answer's
// choices[0].disaggregated_params rewritten for the generation leg
// (GenerationParams), or nil with the reason they are not usable.
func ExtractDisaggParams(resp []byte) ([]byte, KVParamsOutcome) {
	if !validJSON(resp) {
		return nil, KVParamsInvalid
	}
	c, err := firstChoice(resp)
	if err != nil || c == nil {
		return nil, KVParamsInvalid
	}
	v, err := topLevelValue(c, "disaggregated_params")
	switch {
	case err != nil:
		return nil, KVParamsInvalid
	case v == nil || isNull(v):
		return nil, KVParamsMissing
	case v[0] != '{':
		return nil, KVParamsInvalid
	case len(v) > MaxKVParamsBytes:
		return nil, KVParamsOversize
	}
	p, err := GenerationParams(v)
	if err != nil {
		return nil, KVParamsInvalid
	}
	return p, KVParamsFound
}

// GenerationParams returns a context answer's disaggregated_params (an
// object) with request_type "generation_only": every other member byte for
// byte, in order, request_type where it was.
func GenerationParams(ctx []byte) ([]byte, error) {
	const gen = `"generation_only"`
	out := make([]byte, 0, len(ctx)+len(gen))
	out = append(out, '{')
	first, seen := true, false
	it := memberIter{doc: ctx}
	for it.next() {
		if !first {
			out = append(out, ',')
		}
		first = false
		if string(it.m.key) == "request_type" {
			out = append(out, `"request_type":`...)
			out = append(out, gen...)
			seen = true
			continue
		}
		out = append(out, ctx[it.m.start:it.m.end]...)
	}
	if it.err != nil {
		return nil, it.err
	}
	if !seen {
		if !first {
			out = append(out, ',')
		}
		out = append(out, `"request_type":`...)
		out = append(out, gen...)
	}
	return append(out, '}'), nil
}

// firstChoice returns the first element of a response's choices (nil when
// there is none).
func firstChoice(resp []byte) ([]byte, error) {
	choices, err := topLevelValue(resp, "choices")
	if err != nil || choices == nil || choices[0] != '[' {
		return nil, err
	}
	var c []byte
	err = forEachElement(choices, func(i int, v []byte) error {
		if i == 0 {
			c = v
		}
		return nil
	})
	if c == nil || c[0] != '{' {
		return nil, err
	}
	return c, err
}

// contextFinished reports whether a context answer already finished the
// request: its first choice's finish_reason is set and is neither
// "length" nor "not_finished" (trtllm-serve's router goes on to the
// generation leg for those), or is "length" when the client's own token
// bound was 1 (the context computed the one token asked for).
func contextFinished(resp []byte, req *Request) bool {
	if !validJSON(resp) {
		return false
	}
	c, err := firstChoice(resp)
	if err != nil || c == nil {
		return false
	}
	v, err := topLevelValue(c, "finish_reason")
	if err != nil || v == nil || isNull(v) {
		return false
	}
	var reason string
	if json.Unmarshal(v, &reason) != nil || reason == "" {
		return false
	}
	switch reason {
	case "not_finished":
		return false
	case "length":
		return req.Cont.maxTokens == 1 || req.Cont.maxCompletionTokens == 1
	}
	return true
}

// answerFromContext answers the client with a context answer that
// finished the request: its JSON without the choices'
// disaggregated_params, or the same as a stream of events when the client
// asked for one. The prefill leg was reported; the ticket ends here.
func (x *exchange) answerFromContext(pr *prefillAnswer) {
	x.tokens = pr.usage
	x.finish(actors.Result{OK: true})
	x.clearResponse()
	x.out.Header.SetStatusCode(http.StatusOK)
	// contextFinished read the body: a JSON object with choices.
	body := withoutDisaggParams(pr.body)
	if x.req.Stream {
		body = contextEvents(body, x.req.Kind == KindChat, x.req.Cont.includeUsage)
		x.out.Header.SetContentType("text/event-stream")
	} else {
		x.out.Header.SetContentType("application/json")
	}
	x.out.SetBody(body)
	x.commit()
	x.bytes += int64(len(body))
}

// withoutDisaggParams returns a response (a valid JSON object) with
// disaggregated_params taken out of each of its choices; every other byte
// is kept, in order.
func withoutDisaggParams(resp []byte) []byte {
	ed := newObjectEditor(len(resp))
	it := memberIter{doc: resp}
	for it.next() {
		if string(it.m.key) != "choices" || it.m.val[0] != '[' {
			ed.copyMember(resp, &it.m)
			continue
		}
		arr := make([]byte, 0, len(it.m.val))
		arr = append(arr, '[')
		_ = forEachElement(it.m.val, func(i int, c []byte) error {
			if i > 0 {
				arr = append(arr, ',')
			}
			if c[0] != '{' {
				arr = append(arr, c...)
				return nil
			}
			ced := newObjectEditor(len(c))
			ci := memberIter{doc: c}
			for ci.next() {
				if string(ci.m.key) != "disaggregated_params" {
					ced.copyMember(c, &ci.m)
				}
			}
			arr = append(arr, ced.bytes()...)
			return nil
		})
		ed.add("choices", append(arr, ']'))
	}
	return ed.bytes()
}

// contextEvents renders a whole answer (a valid JSON object) as the
// stream the client asked for: one chunk holding every choice (a chat
// choice's message as its delta), a usage chunk when the client asked for
// usage, and [DONE].
func contextEvents(body []byte, chat, usage bool) []byte {
	var resp map[string]json.RawMessage
	_ = json.Unmarshal(body, &resp)
	var choices []map[string]json.RawMessage
	_ = json.Unmarshal(resp["choices"], &choices)
	object := `"text_completion"`
	if chat {
		object = `"chat.completion.chunk"`
	}
	chunk := map[string]json.RawMessage{"object": json.RawMessage(object)}
	for _, k := range []string{"id", "created", "model"} {
		if v, ok := resp[k]; ok {
			chunk[k] = v
		}
	}
	for _, c := range choices {
		delete(c, "token_ids")
		if m, ok := c["message"]; chat && ok {
			c["delta"] = m
			delete(c, "message")
		}
	}
	var out []byte
	event := func(v any) {
		b, _ := json.Marshal(v) // raw values: cannot fail
		out = append(out, "data: "...)
		out = append(out, b...)
		out = append(out, "\n\n"...)
	}
	chunk["choices"], _ = json.Marshal(choices)
	event(chunk)
	if u, ok := resp["usage"]; ok && usage {
		chunk["choices"], chunk["usage"] = json.RawMessage("[]"), u
		event(chunk)
	}
	return append(out, "data: [DONE]\n\n"...)
}

package gateway

import (
	"crypto/rand"
	"encoding/hex"
)

// vLLM's P/D protocol with its NixlConnector (vllm-contract.md §4):
//
//  1. one X-Request-Id (LoxiLB's ___prefill_addr_…___decode_addr_…___<uuid>___
//     form) on both legs;
//  2. prefill leg: the client body rewritten by PrefillBody, sent to the
//     prefill endpoint; the full JSON answer is awaited under the prefill
//     deadline and bounded (DefaultPrefillResponseLimit; params ≤ 64 KiB);
//  3. decode leg: the ORIGINAL body with kv_transfer_params replaced by the
//     prefill's (removed when it returned none), streamed back as-is.
//
// Failure rules are the P/D ones (pd.go) and the answering leg's
// (attempt.go): a decode that never answered is retried on a new route
// avoiding it, prefill included (the unused prefill lease expires on the
// prefill side); a decode that dies after accepting the request, before
// the client got a byte, is 502 pd_decode_backend_died (LoxiLB's rule).

// nixl is vLLM's NIXL two-leg protocol.
func nixl() sequential {
	return sequential{prefillBody: PrefillBody, extract: ExtractKVParams, decodeBody: DecodeBody}
}

// The request rewriting and the request id both legs share.

// prefillKVParams is the prefill leg's kv_transfer_params: P keeps the KV
// for a remote decode.
const prefillKVParams = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// prefillDropped are the client fields the prefill leg removes (or
// overrides below): P must run one token, non-streaming, and does not
// support min_tokens.
func prefillDropped(key string) bool {
	switch key {
	case "kv_transfer_params", "stream", "stream_options", "max_tokens",
		"max_completion_tokens", "min_tokens", "min_completion_tokens":
		return true
	}
	return false
}

// PrefillBody rewrites a client body (a valid JSON object) for the prefill
// leg: kv_transfer_params {do_remote_decode:true, do_remote_prefill:false,
// remote_* null}, stream false, max_tokens 1, max_completion_tokens 1 when
// the client sent it; stream_options, min_tokens and min_completion_tokens
// removed. Every other member is copied byte-for-byte, in order.
func PrefillBody(body []byte) ([]byte, error) {
	ed := newObjectEditor(len(body) + len(prefillKVParams) + 96)
	hasMCT := false
	err := forEachMember(body, func(m *member) error {
		if string(m.key) == "max_completion_tokens" {
			hasMCT = true
		}
		if !prefillDropped(string(m.key)) {
			ed.copyMember(body, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ed.add("kv_transfer_params", []byte(prefillKVParams))
	ed.add("stream", []byte("false"))
	ed.add("max_tokens", []byte("1"))
	if hasMCT {
		ed.add("max_completion_tokens", []byte("1"))
	}
	return ed.bytes(), nil
}

// DecodeBody returns the decode leg's body: the client's original body with
// kv_transfer_params replaced by params (the prefill's, verbatim), or
// removed when params is nil. When there is nothing to change the original
// slice is returned.
func DecodeBody(body, params []byte) ([]byte, error) {
	if params == nil {
		v, err := topLevelValue(body, "kv_transfer_params")
		if err != nil {
			return nil, err
		}
		if v == nil {
			return body, nil
		}
	}
	ed := newObjectEditor(len(body) + len(params) + 24)
	err := forEachMember(body, func(m *member) error {
		if string(m.key) != "kv_transfer_params" {
			ed.copyMember(body, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if params != nil {
		ed.add("kv_transfer_params", params)
	}
	return ed.bytes(), nil
}

// KVParamsOutcome says what the prefill response carried.
type KVParamsOutcome uint8

// KV-params outcomes.
const (
	// KVParamsFound: an object of at most MaxKVParamsBytes.
	KVParamsFound KVParamsOutcome = iota
	// KVParamsMissing: absent or null (P only returns params when it
	// finished length-capped or stopped).
	KVParamsMissing
	// KVParamsOversize: larger than MaxKVParamsBytes; dropped (the decode
	// recomputes the prefill, as LoxiLB degrades).
	KVParamsOversize
	// KVParamsInvalid: the response is not a JSON object, or the params are
	// not an object; dropped.
	KVParamsInvalid
)

var kvParamsNames = [...]string{"found", "missing", "oversize", "invalid"}

// String returns "found", "missing", "oversize" or "invalid".
func (o KVParamsOutcome) String() string {
	if int(o) < len(kvParamsNames) {
		return kvParamsNames[o]
	}
	return "kvparams(?)"
}

// ExtractKVParams returns the top-level kv_transfer_params of a prefill
// response, verbatim, or nil with the reason it is not usable.
func ExtractKVParams(resp []byte) ([]byte, KVParamsOutcome) {
	if !validJSON(resp) {
		return nil, KVParamsInvalid
	}
	v, err := topLevelValue(resp, "kv_transfer_params")
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
	return v, KVParamsFound
}

// HeaderRequestID carries the request id both P/D legs share.
const HeaderRequestID = "X-Request-Id"

// PDRequestID renders LoxiLB's P/D request id,
// ___prefill_addr_<ip:port>___decode_addr_<ip:port>___<uuid>___, with a
// random (v4) UUID.
func PDRequestID(prefill, decode string) string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var hx [36]byte
	hex.Encode(hx[0:8], u[0:4])
	hx[8] = '-'
	hex.Encode(hx[9:13], u[4:6])
	hx[13] = '-'
	hex.Encode(hx[14:18], u[6:8])
	hx[18] = '-'
	hex.Encode(hx[19:23], u[8:10])
	hx[23] = '-'
	hex.Encode(hx[24:], u[10:])
	b := make([]byte, 0, 64+len(prefill)+len(decode))
	b = append(b, "___prefill_addr_"...)
	b = append(b, prefill...)
	b = append(b, "___decode_addr_"...)
	b = append(b, decode...)
	b = append(b, "___"...)
	b = append(b, hx[:]...)
	b = append(b, "___"...)
	return string(b)
}

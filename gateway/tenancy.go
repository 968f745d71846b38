package gateway

import (
	"bytes"
	"net/http"
	"strconv"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/tenant"
)

// Tenants and classes at the front door. A request's tenant (its fairness
// identity) and class (its priority) are settled before its API runs:
//
//   - class: the Gateway API Inference Extension's objective header
//     (x-gateway-inference-objective: a class name or an integer priority;
//     an unknown objective is standard, as GIE treats an objective it has
//     no priority for), else llb's plain X-Llb-Priority (a class name or an
//     integer; anything else is 400). ladder.ClassOfPriority folds integers.
//   - tenant: GIE's x-gateway-inference-fairness-id header; "" (the
//     anonymous tenant) without one.
//
// The admission queue orders parked requests by class, then by the
// service each tenant of the class has received (actors, ladder.FlowQueue).
//
// API keys (LoxiLB's AI gateway, docs/tenants.md): on a rule with
// sse_mode, once llbd holds at least one key, every request must carry a
// live key, as X-Api-Key or as Authorization: Bearer lxb_…:
//
//	no key, an unknown, disabled or expired one      401 invalid_api_key
//	a model the key does not allow (X-Model, else
//	  the body's model; APIs without a model pass)  403 model_not_allowed
//	over the key's or its tenant's rate or tokens    429 rate_limit_exceeded,
//	                                                 tenant_quota_exceeded or
//	                                                 token_quota_exceeded, Retry-After
//
// The key then fixes the tenant (a fairness-id header is ignored) and
// caps the class: the key's class is the default, and a header may only
// lower it. The key headers are not forwarded to the engine. A request's
// tokens (prompt and completion) are charged to the key and its tenant
// when it ends.

// Headers llb reads for tenants and classes.
const (
	// HeaderObjective is GIE's inference objective: a class name
	// (critical, standard, sheddable) or an integer priority.
	HeaderObjective = "X-Gateway-Inference-Objective"
	// HeaderFairnessID is GIE's fairness identity: the request's tenant.
	HeaderFairnessID = "X-Gateway-Inference-Fairness-Id"
	// HeaderPriority is llb's plain priority header: a class name or an
	// integer priority.
	HeaderPriority = "X-Llb-Priority"
	// HeaderAPIKey carries an API key (LoxiLB's X-Api-Key).
	HeaderAPIKey = "X-Api-Key"
	// HeaderModel names the model a request asks for, ahead of its body
	// (LoxiLB's X-Model).
	HeaderModel = "X-Model"
)

// Codes of the key checks (LoxiLB's).
const (
	// CodeInvalidAPIKey: no key, or an unknown, disabled or expired one
	// (401).
	CodeInvalidAPIKey = "invalid_api_key"
	// CodeModelNotAllowed: the key does not allow the model (403).
	CodeModelNotAllowed = "model_not_allowed"
)

// maxTenantLen bounds a tenant id (a fairness id header, a key's tenant).
const maxTenantLen = 128

// tenancy is what the front door settled for a request.
type tenancy struct {
	// tenant is the fairness identity ("" anonymous); class the priority
	// class; tagged is true when either came from the request (a header
	// or a key), so X-Llb-Route names them.
	tenant string
	class  ladder.Class
	tagged bool
	// key is the request's API key when the rule checks keys (nil
	// otherwise); headerClass marks a class that came from a header.
	key         *tenant.Key
	headerClass bool
	// generation marks a request to an inference API (counted per
	// tenant and class).
	generation bool
}

// classify settles x's tenant and class from its headers. It answers the
// client and returns false for a malformed header.
func (x *exchange) classify() bool {
	h := &x.in.Header
	if v := h.Peek(HeaderObjective); len(v) > 0 {
		x.class, _ = ladder.ParseClass(string(v))
		x.tagged, x.headerClass = true, true
	} else if v := h.Peek(HeaderPriority); len(v) > 0 {
		c, ok := ladder.ParseClass(string(v))
		if !ok {
			x.fail(requestError(http.StatusBadRequest, CodeInvalidField, HeaderPriority,
				HeaderPriority+" must be critical, standard, sheddable or an integer priority (positive: critical, negative: sheddable)"))
			return false
		}
		x.class, x.tagged, x.headerClass = c, true, true
	}
	if v := h.Peek(HeaderFairnessID); len(v) > 0 {
		if !validTenant(v) {
			x.fail(requestError(http.StatusBadRequest, CodeInvalidField, HeaderFairnessID,
				HeaderFairnessID+" must be 1 to 128 printable ASCII characters without spaces"))
			return false
		}
		x.tenant, x.tagged = string(v), true
	}
	return true
}

// validTenant reports whether b is usable as a tenant id: 1–128 bytes of
// printable ASCII without spaces (it lands in a header, a log field and a
// metric label).
func validTenant(b []byte) bool {
	if len(b) == 0 || len(b) > maxTenantLen {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// tag puts x's tenant and class on its routing input, with the prompt
// size the admission queue charges (exact when tokenized, else 4 bytes a
// token).
func (x *exchange) tag(rr *actors.RouteRequest) {
	rr.Tenant, rr.Req.Class = x.tenant, x.class
	rr.PromptTokens = rr.Req.KV.PromptTokens
	if rr.PromptTokens == 0 {
		rr.PromptTokens = uint32(min((len(rr.Req.Prompt)+3)/4, 1<<31))
	}
}

// appendTenancy adds " class=… tenant=…" to X-Llb-Route when the request
// named either.
func (x *exchange) appendTenancy(b []byte) []byte {
	if !x.tagged {
		return b
	}
	b = append(b, " class="...)
	b = append(b, x.class.String()...)
	if x.tenant != "" {
		b = append(b, " tenant="...)
		b = append(b, x.tenant...)
	}
	return b
}

// recordTenant writes a generation request's tenant and class series.
func (h *Handler) recordTenant(x *exchange) {
	t := h.tmet
	t.request(x.tenant, x.class)
	if x.code != "" {
		t.refused(x.tenant, x.class, x.code)
	}
	if x.status/100 != 2 {
		return
	}
	prompt := x.tokens.PromptTokens
	if prompt == 0 && x.rr != nil {
		prompt = x.rr.PromptTokens
	}
	t.served(x.tenant, x.class, prompt, x.tokens.CompletionTokens, x.parked, x.ttft)
}

// keysEnforced reports whether x's rule checks API keys now.
func (h *Handler) keysEnforced() bool {
	return h.rule.APIKeys && h.keys != nil && h.keys.Enforced()
}

// rawKey is the request's API key: X-Api-Key, else an Authorization
// bearer credential that starts with lxb_.
func rawKey(x *exchange) []byte {
	if v := x.in.Header.Peek(HeaderAPIKey); len(v) > 0 {
		return bytes.TrimSpace(v)
	}
	if cred, ok := bearer(x.in.Header.Peek("Authorization")); ok && bytes.HasPrefix(cred, []byte(tenant.RawKeyPrefix)) {
		return cred
	}
	return nil
}

func bearer(v []byte) ([]byte, bool) {
	const p = "bearer "
	if len(v) < len(p) || !bytes.EqualFold(v[:len(p)], []byte(p)) {
		return nil, false
	}
	return bytes.TrimSpace(v[len(p):]), true
}

// isKeyHeader reports whether header k: v carries the API key (not
// forwarded to the engine).
func isKeyHeader(k, v []byte) bool {
	switch string(k) {
	case HeaderAPIKey:
		return true
	case "Authorization":
		cred, ok := bearer(v)
		return ok && bytes.HasPrefix(cred, []byte(tenant.RawKeyPrefix))
	}
	return false
}

// authenticate checks x's API key (401) and its X-Model header (403), and
// makes the key's tenant and class x's. It answers the client and returns
// false on a refusal.
func (x *exchange) authenticate() bool {
	k := x.h.keys.Lookup(string(rawKey(x)), time.Now())
	if k == nil {
		x.fail(requestError(http.StatusUnauthorized, CodeInvalidAPIKey, "",
			"a valid API key is required: send it as "+HeaderAPIKey+" (or Authorization: Bearer lxb_…); this one is missing, unknown, disabled or expired"))
		return false
	}
	x.key, x.tenant, x.tagged = k, k.TenantID, true
	if kc := k.ClassOf(); !x.headerClass || x.class > kc {
		x.class = kc
	}
	if m := x.in.Header.Peek(HeaderModel); len(m) > 0 {
		return x.allowModel(string(m))
	}
	return true
}

// allowModel answers 403 and returns false when x's key does not allow
// model.
func (x *exchange) allowModel(model string) bool {
	if x.key == nil || x.key.Allows(model) {
		return true
	}
	x.fail(requestError(http.StatusForbidden, CodeModelNotAllowed, "model",
		"this API key may not use model "+strconv.Quote(model)+"; ask for one of the models it allows"))
	return false
}

// admitKey takes x's place in its key's and tenant's limits (429 with
// Retry-After when it does not fit). No key: nothing to take.
func (x *exchange) admitKey() bool {
	if x.key == nil {
		return true
	}
	r := x.h.keys.Admit(x.key, time.Now())
	if r.Code == "" {
		return true
	}
	msg := "the API key's request rate limit is reached; retry after the Retry-After interval"
	switch r.Code {
	case tenant.CodeTenantRate:
		msg = "the tenant's request rate limit is reached; retry after the Retry-After interval"
	case tenant.CodeTokens:
		msg = "the API key's or its tenant's tokens per minute are spent; retry after the Retry-After interval"
	}
	e := planeError(http.StatusTooManyRequests, r.Code, msg)
	e.RetryAfter = max(r.RetryAfter, time.Second)
	x.fail(e)
	return false
}

// chargeKey charges x's key and tenant the tokens its answer cost.
func (h *Handler) chargeKey(x *exchange) {
	if x.key == nil || x.status/100 != 2 {
		return
	}
	prompt := x.tokens.PromptTokens
	if prompt == 0 && x.rr != nil {
		prompt = x.rr.PromptTokens
	}
	h.keys.Charge(x.key, uint64(prompt)+uint64(x.tokens.CompletionTokens), time.Now())
}

package gateway

import (
	"net/http"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
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
}

// classify settles x's tenant and class from its headers. It answers the
// client and returns false for a malformed header.
func (x *exchange) classify() bool {
	h := &x.in.Header
	if v := h.Peek(HeaderObjective); len(v) > 0 {
		x.class, _ = ladder.ParseClass(string(v))
		x.tagged = true
	} else if v := h.Peek(HeaderPriority); len(v) > 0 {
		c, ok := ladder.ParseClass(string(v))
		if !ok {
			x.fail(requestError(http.StatusBadRequest, CodeInvalidField, HeaderPriority,
				HeaderPriority+" must be critical, standard, sheddable or an integer priority (positive: critical, negative: sheddable)"))
			return false
		}
		x.class, x.tagged = c, true
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

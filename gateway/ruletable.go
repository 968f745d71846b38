package gateway

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/rule"
)

// Several rules on one VIP:port, as LoxiLB's inference gateway keys them:
// by host, path_prefix with path_match_mode, and model_name. A request goes
// to the rule its Host header, path and model select — the model from the
// X-Model header (an empty one counts as absent), else the body's model
// field — following find_endpoint_lpm in loxilb-ebpf-inference-gateway
// (common/sockproxy_routing.c and its test_model_routing.c):
//
//  1. Rules whose host is the request's Host (port stripped) first, then
//     rules without a host (the listener's own).
//  2. Within a host, rules for the request's model first, then the
//     wildcard rules (model_name "").
//  3. Within those, the path decides: an "exact" rule takes its path only
//     (the query ignored); a "prefix" rule its path and every path below
//     it, segment by segment ("/v1" takes "/v1/chat", not "/v10"), the
//     longest prefix winning; a rule without a path condition takes any
//     path, after every rule with one.
//  4. No rule: 503 model_unavailable.
//
// Model names and paths are compared case-sensitively. A rule alone on its
// address whose route restricts neither path nor model takes every request.

// RuleTable is the rules sharing one listener. Immutable once built.
type RuleTable struct {
	rules []tableRule
	// needsModel: some rule names a model (the body's model is read).
	needsModel bool
	// open: one rule takes every request (no matching at all).
	open bool
}

type tableRule struct {
	route rule.Route
	h     *Handler
}

// NewRuleTable builds the table of handlers on one address, in the order
// given (the first is the listener's default for connection bounds).
func NewRuleTable(hs []*Handler) *RuleTable {
	t := &RuleTable{}
	for _, h := range hs {
		r := h.rule.Route
		r.PathPrefix = trimSlash(r.PathPrefix)
		t.rules = append(t.rules, tableRule{route: r, h: h})
		t.needsModel = t.needsModel || r.Model != ""
	}
	t.open = len(hs) == 1 && !hs[0].rule.Route.Restricts()
	return t
}

// trimSlash drops a path prefix's trailing slashes ("/v1/" is "/v1"; "/"
// stays).
func trimSlash(p string) string {
	for len(p) > 1 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

// Handlers returns the table's handlers in order.
func (t *RuleTable) Handlers() []*Handler {
	out := make([]*Handler, len(t.rules))
	for i := range t.rules {
		out[i] = t.rules[i].h
	}
	return out
}

// Pick returns the handler of the rule host, path and model select, or
// nil (503 model_unavailable).
func (t *RuleTable) Pick(host, path, model string) *Handler {
	if t.open {
		return t.rules[0].h
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	hosts := []string{host, ""}
	if host == "" {
		hosts = hosts[1:]
	}
	models := []string{model, ""}
	if model == "" {
		models = models[1:]
	}
	for _, hh := range hosts {
		for _, m := range models {
			if h := t.pickPath(hh, m, path); h != nil {
				return h
			}
		}
	}
	return nil
}

// pickPath picks among the rules of host and model by path.
func (t *RuleTable) pickPath(host, model, path string) *Handler {
	var best *Handler
	bestLen := -1
	for i := range t.rules {
		r := &t.rules[i].route
		if r.Host != host || r.Model != model {
			continue
		}
		n := -1 // how specific the match is
		switch r.PathMode {
		case "exact":
			if path == r.PathPrefix {
				n = len(r.PathPrefix) + 1<<20 // exact beats any prefix
			}
		case "prefix":
			if underPrefix(path, r.PathPrefix) {
				n = len(r.PathPrefix)
			}
		default:
			n = 0 // no path condition: after every rule with one
		}
		if n > bestLen {
			best, bestLen = t.rules[i].h, n
		}
	}
	return best
}

// underPrefix reports whether path is prefix or below it, segment-wise.
func underPrefix(path, prefix string) bool {
	if prefix == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == prefix || strings.HasPrefix(path, prefix) && path[len(prefix)] == '/'
}

// requestHost is the Host header without its port.
func requestHost(in *fasthttp.Request) string {
	h := string(in.Header.Host())
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			return h[1:i]
		}
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.Count(h, ":") == 1 {
		return h[:i]
	}
	return h
}

// requestModel is the model a request names for rule selection: X-Model
// when not empty, else the JSON body's top-level model (or a multipart
// form's model field); "" when none.
func requestModel(in *fasthttp.Request) string {
	if v := bytes.TrimSpace(in.Header.Peek(HeaderModel)); len(v) > 0 {
		return string(v)
	}
	body := in.Body()
	if len(body) == 0 {
		return ""
	}
	if ct := in.Header.ContentType(); bytes.HasPrefix(bytes.TrimSpace(ct), []byte("multipart/form-data")) {
		return formModel(ct, body)
	}
	if !validJSON(body) {
		return ""
	}
	model := ""
	it := memberIter{doc: body}
	for it.next() {
		if string(it.m.key) == "model" && len(it.m.val) > 0 && it.m.val[0] == '"' {
			model = unquote(it.m.val)
		}
	}
	return model
}

// formModel reads a multipart form's model field.
func formModel(ct, body []byte) string {
	_, params, err := mime.ParseMediaType(string(ct))
	if err != nil {
		return ""
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := mr.NextPart()
		if err != nil {
			return ""
		}
		if p.FormName() == "model" {
			b, _ := io.ReadAll(io.LimitReader(p, maxFormField))
			return string(b)
		}
	}
}

package attack

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
)

const lbPath = "/netlox/v1/config/loadbalancer"

// mutatedRule POSTs a mutated template.
func (f *restFamily) mutatedRule(ctx context.Context, rng *rand.Rand) (Outcome, func() string) {
	m := &mutContext{spot: newRuleSpot(rng, f.net), net: f.net, rest: f.d.Addr}
	body, ops := mutateRule(rng, m)
	ctype := "application/json"
	switch rng.IntN(20) {
	case 0:
		ctype = ""
	case 1:
		ctype = "text/plain"
	case 2:
		ctype = "application/x-www-form-urlencoded"
	}
	repro := reproHTTP(http.MethodPost, lbPath, ctype, body)
	return f.post(ctx, ctype, body, ""), func() string { return "mutations: " + ops + "\n" + repro() }
}

// sweepValues are the hostile strings every string field of every template
// gets, escaped in valid JSON (the raw forms are invalid JSON, which the
// mutations send).
var sweepValues = []string{"\x00", "a\r\nX-Injected: 1", "\n", "\"", "\\", "\xff\xfe", "\u202e", " ", strings.Repeat("s", 5000)}

// sweepCase is one template with one string field set to one value.
type sweepCase struct {
	template int
	path     []int
	field    string
	value    string
}

// sweepCases lists every (template, string field, value) in a fixed order.
func sweepCases(n loopNet) []sweepCase {
	spot := ruleSpot{vip: n.ip(hostRESTVIPLo), port: 20000, eps: []string{n.ip(hostRESTEPLo), n.ip(hostRESTEPLo + 1), n.ip(hostRESTEPLo + 2), n.ip(hostRESTEPLo + 3)}}
	var out []sweepCase
	for ti, tp := range templates {
		doc, err := parseJSON([]byte(tp.json(spot)))
		if err != nil {
			panic(err) // a broken template is a bug of this package
		}
		for _, p := range doc.paths()[1:] {
			if node, _, _ := doc.at(p); node.kind != jStr {
				continue
			}
			for _, v := range sweepValues {
				out = append(out, sweepCase{template: ti, path: p, field: fieldName(doc, p), value: v})
			}
		}
	}
	return out
}

// fieldName is path p as a dotted JSON path ("endpoints.0.urlPath").
func fieldName(doc *jnode, p []int) string {
	var parts []string
	for i := range p {
		if k := doc.keyAt(p[:i+1]); k != "" {
			parts = append(parts, k)
		} else {
			parts = append(parts, strconv.Itoa(p[i]))
		}
	}
	return strings.Join(parts, ".")
}

// stringSweep POSTs a template with one string field set to a hostile
// value: refused cleanly, or accepted and then running, round-tripping
// and deletable.
func (f *restFamily) stringSweep(ctx context.Context, c sweepCase) (Outcome, func() string) {
	spot := newRuleSpot(caseRand(f.cfg.Seed, "rest-sweep", c.template*100000+len(c.path)*1000+len(c.value)), f.net)
	doc, _ := parseJSON([]byte(templates[c.template].json(spot)))
	replace(doc, c.path, jstr(c.value))
	body := doc.encode()
	repro := reproHTTP(http.MethodPost, lbPath, "application/json", body)
	return f.post(ctx, "application/json", body, ""), func() string { return "field " + c.field + " = " + strconv.Quote(c.value) + "\n" + repro() }
}

// rawBody POSTs bodies that are not rules at all, or not JSON, or too big.
func (f *restFamily) rawBody(ctx context.Context, rng *rand.Rand) (Outcome, func() string) {
	valid := []byte(templates[0].json(newRuleSpot(rng, f.net)))
	ctype := "application/json"
	var body []byte
	switch v := rng.IntN(16); v {
	case 0, 1, 2, 3, 4, 5, 6, 7:
		body = []byte([]string{"", "null", "[]", "{}", `"rule"`, "1", "{", "}{"}[v])
	case 8:
		body = []byte(strings.Repeat("[", 500000))
	case 9:
		body = []byte(`{"serviceArguments":` + strings.Repeat(`{"a":`, 200000))
	case 10:
		body = append(valid, "\x00garbage"...)
	case 11: // UTF-16LE with a BOM
		body = []byte{0xff, 0xfe}
		for _, u := range utf16.Encode([]rune(string(valid))) {
			body = append(body, byte(u), byte(u>>8))
		}
		ctype = "application/json; charset=utf-16"
	case 12: // gzip, which llbd does not decode
		var b bytes.Buffer
		z := gzip.NewWriter(&b)
		_, _ = z.Write(valid)
		_ = z.Close()
		return f.rawPOST(ctx, b.Bytes(), "Content-Encoding: gzip\r\n", http.StatusBadRequest)
	case 13:
		body = make([]byte, 1+rng.IntN(4096))
		for i := range body {
			body[i] = byte(rng.IntN(256))
		}
	case 14: // declared and sent, over the 1 MiB limit
		return f.rawPOST(ctx, append(valid, bytes.Repeat([]byte(" "), 2<<20)...), "", http.StatusRequestEntityTooLarge)
	default: // chunked, over the limit
		return f.rawChunkedPOST(ctx, rng, append(valid, bytes.Repeat([]byte(" "), 2<<20)...))
	}
	if rng.IntN(4) == 0 {
		ctype = []string{"", "text/plain", "multipart/form-data; boundary=x", "application/xml"}[rng.IntN(4)]
	}
	return f.post(ctx, ctype, body, ""), reproHTTP(http.MethodPost, lbPath, ctype, body)
}

// rawPOST sends body with a Content-Length over a raw connection and wants
// status back (an oversized body may be refused before it is all sent).
func (f *restFamily) rawPOST(ctx context.Context, body []byte, extra string, want int) (Outcome, func() string) {
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n", lbPath, f.d.Addr, extra, len(body))
	req := append([]byte(head), body...)
	res := exchange(ctx, f.d.Addr, rawPlan{steps: []rawStep{{data: req}}, wait: restSlow, stopAfter: 1})
	return judgeRaw(res, want), func() string { return "raw: " + quote(req, 1500) }
}

// rawChunkedPOST sends body chunked, in random chunk sizes.
func (f *restFamily) rawChunkedPOST(ctx context.Context, rng *rand.Rand, body []byte) (Outcome, func() string) {
	req := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", lbPath, f.d.Addr)
	for len(body) > 0 {
		n := min(len(body), 1+rng.IntN(64<<10))
		req = fmt.Appendf(req, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	req = append(req, "0\r\n\r\n"...)
	res := exchange(ctx, f.d.Addr, rawPlan{steps: []rawStep{{data: req}}, wait: restSlow, stopAfter: 1})
	return judgeRaw(res, http.StatusRequestEntityTooLarge), func() string { return "raw: " + quote(req, 1500) }
}

// judgeRaw wants status as the first answer, with LoxiLB's error JSON.
func judgeRaw(res rawResult, want int) Outcome {
	r, ok := res.first()
	switch {
	case res.dialErr != nil:
		return defect("dial: %v", res.dialErr)
	case !ok:
		return defect("no answer within %v: connection %s", restSlow, res.end())
	case r.status >= 500:
		return defect("%d %s", r.status, short(r.body))
	case r.status != want:
		return defect("%d %s (want %d)", r.status, short(r.body), want)
	case !loxiError(r.body):
		return defect("%d with a body that is not LoxiLB's error JSON: %s", r.status, short(r.body))
	}
	return refused()
}

// netHTTPRefusal reports whether r is net/http's own refusal of a request
// it could not parse (before any handler ran): a 4xx whose text/plain
// body starts with the status.
func netHTTPRefusal(r rawResponse) bool {
	return r.status >= 400 && r.status < 500 && strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") &&
		bytes.HasPrefix(r.body, []byte(strconv.Itoa(r.status)))
}

// badPath sends odd methods and paths over a raw connection.
func (f *restFamily) badPath(ctx context.Context, rng *rand.Rand) (Outcome, func() string) {
	methods := []string{"GET", "GET", "POST", "PUT", "PATCH", "DELETE", "DELETE", "HEAD", "OPTIONS", "TRACE", "FOO", "get", "PROPFIND", "CONNECT", "G\x00T"}
	method := methods[rng.IntN(len(methods))]
	m := &mutContext{spot: newRuleSpot(rng, f.net), net: f.net, rest: f.d.Addr}
	ss := m.strings()
	evil := func() string {
		s := ss[rng.IntN(len(ss))]
		if rng.IntN(2) == 0 {
			return url.PathEscape(s)
		}
		return strings.Map(func(r rune) rune { // raw, but never a line break or space, which would end the request line
			if r == '\r' || r == '\n' || r == ' ' {
				return '_'
			}
			return r
		}, s)
	}
	var path string
	switch rng.IntN(8) {
	case 0:
		ips := []string{m.spot.vip, "%00", "..%2f..", "[::1", "%5B%3A%3A1%5D", evil()}
		ports := []string{strconv.Itoa(m.spot.port), "-1", "65536", "99999999999999999999", "0x10", "%20", ""}
		protos := []string{"tcp", "TCP", "xyz", "%00", ""}
		path = lbPath + "/externalipaddress/" + ips[rng.IntN(len(ips))] + "/port/" + ports[rng.IntN(len(ports))] +
			"/protocol/" + protos[rng.IntN(len(protos))] + []string{"", "/status", "/stats", "/x", "/"}[rng.IntN(5)]
	case 1:
		path = lbPath + "/id/" + evil()
	case 2:
		path = lbPath + "/name/" + evil()
	case 3:
		path = lbPath + "/hosturl/" + evil() + "/externalipaddress/" + m.spot.vip + "/port/" + strconv.Itoa(m.spot.port) + "/portmax/" + evil() + "/protocol/tcp"
	case 4:
		path = "/" + strings.Repeat("a", []int{10, 9000, 70000}[rng.IntN(3)])
	case 5:
		path = "/netlox/v1/config/ai/controller?service=" + evil()
	default:
		paths := []string{"/", "/netlox", "/netlox/v1/", "/netlox/v2/version", "/metrics/../netlox/v1/version", "//netlox//v1//version",
			"/netlox/v1/version?%zz", "*", "http://evil.example/netlox/v1/version", "/%", "/netlox/v1/config/ai/kv/inventory",
			"/netlox/v1/config/loadbalancer/all/../all", "/netlox/v1/config/loadbalancer/ALL", "/NETLOX/V1/VERSION", "/netlox/v1/metrics?x=" + evil()}
		path = paths[rng.IntN(len(paths))]
	}
	if method == "DELETE" && strings.Contains(strings.ToLower(path), "all") {
		method = "GET" // never DELETE /all: it would delete the sentinels
	}
	var body []byte
	if rng.IntN(3) == 0 {
		body = []byte(templates[rng.IntN(len(templates))].json(m.spot))
	}
	req := fmt.Appendf(nil, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, path, f.d.Addr, len(body), body)
	res := exchange(ctx, f.d.Addr, rawPlan{steps: []rawStep{{data: req}}, wait: restSlow, stopAfter: 1, head: method == "HEAD"})
	repro := func() string { return "raw: " + quote(req, 1500) }
	r, ok := res.first()
	switch {
	case res.dialErr != nil:
		return defect("dial: %v", res.dialErr), repro
	case !ok && res.timedOut:
		return defect("no answer within %v", restSlow), repro
	case !ok:
		return refused(), repro // net/http closed a request it could not parse
	case r.status >= 500:
		return defect("%d %s", r.status, short(r.body)), repro
	case r.status >= 400:
		if method == "HEAD" || netHTTPRefusal(r) || loxiError(r.body) || (r.status == http.StatusNotFound && len(r.body) == 0) {
			return refused(), repro
		}
		return defect("%d with a body that is not LoxiLB's error JSON: %s", r.status, short(r.body)), repro
	}
	if method == "DELETE" || method == "POST" {
		f.cleanStray(ctx)
	}
	return accepted(), repro
}

// cleanStray deletes every rule on the template VIPs (a bad path that
// turned out to be a valid write).
func (f *restFamily) cleanStray(ctx context.Context) {
	rules, err := f.ruleSet(ctx)
	if err != nil {
		return
	}
	for _, s := range rules {
		if ip := s.sa.ExternalIP; ip != f.net.ip(hostRESTCtl) && ip != f.net.ip(hostRESTSent) && s.sa.Name != "atk-sentinel" {
			f.remove(ctx, s)
		}
	}
}

// epochText is cur+d as a decimal literal (past 2^64-1 when it overflows,
// at 0 when it would go negative).
func epochText(cur uint64, d int) string {
	v := new(big.Int).SetUint64(cur)
	v.Add(v, big.NewInt(int64(d)))
	if v.Sign() < 0 {
		v.SetInt64(0)
	}
	return v.String()
}

// controller POSTs controller updates, mostly well formed around the
// endpoint's applied epoch, some with odd fields; the model of applied
// epochs predicts 200 or 409 for every well-formed one.
func (f *restFamily) controller(ctx context.Context, rng *rand.Rand) (Outcome, func() string) {
	doc := jobj()
	wellFormed := true
	odd := func() bool { return rng.IntN(100) < 12 }
	if odd() {
		wellFormed = false
		ss := evilStrings
		doc.set("service", []*jnode{jstr(ss[rng.IntN(len(ss))]), jnum("1"), jnull(), jstr(f.ctl.key + "@x"), jstr("tcp:" + f.net.ip(hostRESTCtl) + ":20001")}[rng.IntN(5)])
	} else {
		doc.set("service", jstr(f.ctl.key))
	}
	ep := rng.IntN(len(f.ctl.epochs))
	if odd() {
		wellFormed = false
		doc.set("ep_idx", jnum([]string{"-1", "3", "31", "32", "1.0", "9223372036854775808", `"0"`, "null"}[rng.IntN(8)]))
	} else {
		doc.set("ep_idx", jnum(strconv.Itoa(ep)))
	}
	hasState, hasWeight := rng.IntN(10) < 6, rng.IntN(10) < 6
	if hasState {
		if odd() {
			wellFormed = false
			doc.set("state", []*jnode{jstr("PAUSED"), jstr("active"), jstr(""), jstr("ACTIVE\x00"), jnum("1"), jnull()}[rng.IntN(6)])
		} else {
			doc.set("state", jstr([]string{"ACTIVE", "DRAINING", "DISABLED", "NONE"}[rng.IntN(4)]))
		}
	}
	if hasWeight {
		if odd() {
			wellFormed = false
			doc.set("weight", jnum([]string{"-1", "101", "1.5", "1e2", "4294967396", `"50"`, "null"}[rng.IntN(7)]))
		} else {
			doc.set("weight", jnum(strconv.Itoa(rng.IntN(101))))
		}
	}
	if !hasState && !hasWeight {
		wellFormed = false
	}
	cur := f.ctl.epochs[ep]
	epoch := cur
	switch x := rng.IntN(100); {
	case x < 15: // absent: the applied epoch
	case x < 20:
		wellFormed = false
		doc.set("epoch", jnum([]string{"-1", "18446744073709551616", "1.5", `"7"`, "null", "1e3"}[rng.IntN(6)]))
	case x < 23:
		doc.set("epoch", jnum("18446744073709551615"))
		epoch = 1<<64 - 1
	default:
		d := rng.IntN(6) - 3
		txt := epochText(cur, d)
		doc.set("epoch", jnum(txt))
		if e, err := strconv.ParseUint(txt, 10, 64); err == nil {
			epoch = e
		} else {
			wellFormed = false
		}
	}
	switch rng.IntN(40) {
	case 0:
		wellFormed = false
		doc.set("wieght", jnum("1"))
	case 1:
		wellFormed = false
		doc.keys = append(doc.keys, "epoch")
		doc.kids = append(doc.kids, jnum("0"))
	}
	body := doc.encode()
	path := "/netlox/v1/config/ai/controller/endpoint"
	repro := func() string {
		return fmt.Sprintf("%s\nendpoint %d's applied epoch before: %d (model)", reproHTTP(http.MethodPost, path, "application/json", body)(), ep, cur)
	}
	r, err := f.d.do(ctx, http.MethodPost, path, "application/json", body)
	o, ok := judgeREST(http.MethodPost, r, err)
	if o.Verdict == Defective {
		return o, repro
	}
	if wellFormed {
		want := http.StatusOK
		if epoch < cur {
			want = http.StatusConflict
		}
		if r.code != want {
			return defect("controller update with epoch %d on endpoint %d (applied %d): %d %s (want %d)", epoch, ep, cur, r.code, short(r.body), want), repro
		}
	}
	if ok { // applied: the epoch in force is the one sent, or the one kept
		if epoch < cur && wellFormed {
			return defect("an update with epoch %d older than the applied %d was applied", epoch, cur), repro
		}
		if !wellFormed {
			f.resyncEpochs(ctx)
		} else {
			f.ctl.epochs[ep] = epoch
		}
	}
	return o, repro
}

// resyncEpochs reads the applied epochs back (after an update the model
// could not predict was applied), refusing to let one go backwards.
func (f *restFamily) resyncEpochs(ctx context.Context) {
	got, err := f.appliedEpochs(ctx)
	if err != nil {
		return
	}
	for i, e := range got {
		if i < len(f.ctl.epochs) && e >= f.ctl.epochs[i] {
			f.ctl.epochs[i] = e
		}
	}
}

// appliedEpochs reads each endpoint's applied epoch of the controller
// target from GET /config/ai/controller.
func (f *restFamily) appliedEpochs(ctx context.Context) ([]uint64, error) {
	var v struct {
		Services []struct {
			Endpoints []struct {
				Epoch uint64 `json:"epoch"`
			} `json:"endpoints"`
		} `json:"services"`
	}
	if err := f.d.getJSON(ctx, "/netlox/v1/config/ai/controller?service="+url.QueryEscape(f.ctl.key), &v); err != nil {
		return nil, err
	}
	if len(v.Services) != 1 {
		return nil, fmt.Errorf("GET controller?service=%s: %d services", f.ctl.key, len(v.Services))
	}
	out := make([]uint64, len(v.Services[0].Endpoints))
	for i, e := range v.Services[0].Endpoints {
		out[i] = e.Epoch
	}
	return out, nil
}

// inventory asks the KV inventory view with odd parameters.
func (f *restFamily) inventory(ctx context.Context, rng *rand.Rand) (Outcome, func() string) {
	vals := func(good ...string) string {
		if rng.IntN(3) > 0 {
			return good[rng.IntN(len(good))]
		}
		return evilStrings[rng.IntN(len(evilStrings))]
	}
	q := url.Values{}
	if rng.IntN(8) > 0 {
		q.Add("service_id", vals(f.ctl.key, "tcp:"+f.net.ip(hostRESTCtl)+":20000@x", "atk-nope"))
	}
	if rng.IntN(8) > 0 {
		q.Add("ep_idx", vals("0", "2", "3", "-1", "31", "32", "99999999999999999999"))
	}
	if rng.IntN(2) == 0 {
		q.Add("offset", vals("0", "-1", "1000000", "9223372036854775807"))
	}
	if rng.IntN(2) == 0 {
		q.Add("limit", vals("1", "0", "10000", "10001", "-5"))
	}
	if rng.IntN(6) == 0 {
		q.Add("ep_idx", "1")
	}
	path := "/netlox/v1/config/ai/kv/inventory?" + q.Encode()
	r, err := f.d.do(ctx, http.MethodGet, path, "", nil)
	o, _ := judgeREST(http.MethodGet, r, err)
	return o, reproHTTP(http.MethodGet, path, "", nil)
}

// loopRule POSTs rules whose endpoint leads back into llbd; every one
// must be refused.
func (f *restFamily) loopRule(ctx context.Context, rng *rand.Rand) (Outcome, func() string) {
	s := newRuleSpot(rng, f.net)
	restHost, restPort := splitHostPort(f.d.Addr)
	ctlVIP := f.net.ip(hostRESTCtl)
	vip, ep, port := s.vip, s.vip, s.port
	why := ""
	switch v := rng.IntN(8); v {
	case 0:
		why = "the endpoint is the rule's own VIP:port"
	case 1:
		ep, why = "::ffff:"+s.vip, "the endpoint is the rule's own VIP:port, IPv4-mapped"
	case 2:
		vip, why = "::ffff:"+s.vip, "the VIP is IPv4-mapped and the endpoint its plain form"
	case 3:
		ep, port, why = restHost, restPort, "the endpoint is the REST API"
	case 4:
		ep, port, why = "0.0.0.0", restPort, "the endpoint 0.0.0.0:<REST port> reaches the REST API"
	case 5:
		ep, port, why = "::ffff:"+restHost, restPort, "the endpoint is the REST API, IPv4-mapped"
	case 6:
		ep, port, why = ctlVIP, 20000, "the endpoint is another rule's VIP:port"
	default:
		return f.loopThroughNewVIP(ctx, s)
	}
	body := fmt.Appendf(nil, `{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"atk-loop","probetype":"none"},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":%d,"weight":1},{"endpointIP":%q,"targetPort":8000,"weight":1}]}`, vip, s.port, ep, port, s.eps[0])
	return f.post(ctx, "application/json", body, why), reproHTTP(http.MethodPost, lbPath, "application/json", body)
}

// loopThroughNewVIP makes rule A whose endpoint is X:Q, then rule B
// listening on X:Q: B would close a loop through A and must be refused.
func (f *restFamily) loopThroughNewVIP(ctx context.Context, s ruleSpot) (Outcome, func() string) {
	rule := func(vip string, port int, ep string, epPort int) []byte {
		return fmt.Appendf(nil, `{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"atk-loop2","probetype":"none"},`+
			`"endpoints":[{"endpointIP":%q,"targetPort":%d,"weight":1}]}`, vip, port, ep, epPort)
	}
	a, b := rule(s.vip, s.port, s.eps[0], s.port+1), rule(s.eps[0], s.port+1, s.eps[1], 8000)
	repro := func() string { return fmt.Sprintf("POST %s\nPOST (closes the loop) %s", a, b) }
	defer f.cleanStray(ctx)
	r, err := f.d.do(ctx, http.MethodPost, lbPath, "application/json", a)
	if o, _ := judgeREST(http.MethodPost, r, err); o.Verdict == Defective || r.code != http.StatusOK {
		if o.Verdict == Defective {
			return o, repro
		}
		return defect("a valid rule was refused: %d %s", r.code, short(r.body)), repro
	}
	r, err = f.d.do(ctx, http.MethodPost, lbPath, "application/json", b)
	o, _ := judgeREST(http.MethodPost, r, err)
	if o.Verdict != Defective && r.code == http.StatusOK {
		return defect("a rule listening on the endpoint of a stored rule was accepted"), repro
	}
	return o, repro
}

func splitHostPort(addr string) (string, int) {
	i := strings.LastIndexByte(addr, ':')
	p, _ := strconv.Atoi(addr[i+1:])
	return strings.Trim(addr[:i], "[]"), p
}

// sentinel creates or deletes a sentinel rule; the model keeps the
// acknowledged ones for the end-of-family and after-SIGKILL checks.
func (f *restFamily) sentinel(ctx context.Context, rng *rand.Rand) (Outcome, func() string) {
	vip := f.net.ip(hostRESTSent)
	if len(f.sentinels) < 12 && (len(f.sentinels) == 0 || rng.IntN(3) > 0) {
		port := 21000 + f.nextSent
		f.nextSent++
		body := fmt.Appendf(nil, `{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"atk-sentinel","probetype":"none"},`+
			`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1}]}`, vip, port, f.net.ip(hostRESTEPLo+3))
		r, err := f.d.do(ctx, http.MethodPost, lbPath, "application/json", body)
		o, ok := judgeREST(http.MethodPost, r, err)
		if ok && r.code == http.StatusOK {
			f.sentinels[port] = true
			return accepted(), nil
		}
		if o.Verdict != Defective {
			o = defect("a valid sentinel rule was refused: %d %s", r.code, short(r.body))
		}
		return o, reproHTTP(http.MethodPost, lbPath, "application/json", body)
	}
	ports := make([]int, 0, len(f.sentinels))
	for p := range f.sentinels {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	port := ports[rng.IntN(len(ports))]
	path := fmt.Sprintf("%s/externalipaddress/%s/port/%d/protocol/tcp", lbPath, vip, port)
	r, err := f.d.do(ctx, http.MethodDelete, path, "", nil)
	o, ok := judgeREST(http.MethodDelete, r, err)
	if ok && r.code == http.StatusOK {
		delete(f.sentinels, port)
		return accepted(), nil
	}
	if o.Verdict != Defective {
		o = defect("deleting sentinel rule %d: %d %s", port, r.code, short(r.body))
	}
	return o, reproHTTP(http.MethodDelete, path, "", nil)
}

// slowResult is one slow client's verdict.
type slowResult struct {
	kind, repro string
	o           Outcome
}

// slowClients starts the slow REST clients (headers a line a second; a
// body a byte a second) when the budget leaves room for the 30 s read
// bound; the returned func waits for them.
func (f *restFamily) slowClients(ctx context.Context, budget time.Duration) func() []slowResult {
	if budget < 40*time.Second || f.cfg.Replay {
		return func() []slowResult { return nil }
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var out []slowResult
	run := func(kind string, head []byte, step []byte, bound time.Duration) {
		defer wg.Done()
		steps := []rawStep{{data: head}}
		for range 60 {
			steps = append(steps, rawStep{pause: time.Second, data: step})
		}
		res := exchange(ctx, f.d.Addr, rawPlan{steps: steps, wait: bound + 10*time.Second})
		o := refused()
		r, ok := res.first()
		switch {
		case ok && r.status < 400:
			o = defect("slow client answered %d", r.status)
		case ok && r.status >= 500:
			o = defect("slow client answered %d %s", r.status, short(r.body))
		case res.ended > bound+3*time.Second:
			o = defect("slow client held for %v (bound %v); connection %s", res.ended.Round(time.Millisecond), bound, res.end())
		}
		mu.Lock()
		out = append(out, slowResult{kind, fmt.Sprintf("%s, then %q every second", quote(head, 300), step), o})
		mu.Unlock()
	}
	for range 3 {
		wg.Add(2)
		go run("slow_header", fmt.Appendf(nil, "GET /netlox/v1/version HTTP/1.1\r\nHost: %s\r\n", f.d.Addr), []byte("X-Slow: 1\r\n"), 10*time.Second)
		go run("slow_body", fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n{", lbPath, f.d.Addr), []byte(" "), 30*time.Second)
	}
	return func() []slowResult {
		wg.Wait()
		return out
	}
}

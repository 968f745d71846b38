package attack

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The data-plane cases. Each generator draws everything from rng and
// returns the bytes to send and the oracle.

// reqOpts shapes one HTTP/1.1 request.
type reqOpts struct {
	method, path, proto string
	headers             []string // "Name: value" lines, verbatim
	body                []byte
	noLength            bool // no Content-Length (the headers carry the framing)
}

// build writes the request.
func (o reqOpts) build(host string) []byte {
	var b bytes.Buffer
	method, path, proto := o.method, o.path, o.proto
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = "/v1/completions"
	}
	if proto == "" {
		proto = "HTTP/1.1"
	}
	fmt.Fprintf(&b, "%s %s %s\r\nHost: %s\r\n", method, path, proto, host)
	for _, h := range o.headers {
		b.WriteString(h)
		b.WriteString("\r\n")
	}
	if !o.noLength && (o.body != nil || method == http.MethodPost) {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(o.body))
	}
	b.WriteString("\r\n")
	b.Write(o.body)
	return b.Bytes()
}

// completion is a small valid completion body.
func completion(rng *rand.Rand, stream bool) []byte {
	return fmt.Appendf(nil, `{"model":"sim-model","prompt":"attack %d: tell me about load balancers","max_tokens":%d,"stream":%v}`,
		rng.IntN(1_000_000), 1+rng.IntN(8), stream)
}

// chat is a small valid chat body.
func chat(rng *rand.Rand, stream bool) []byte {
	return fmt.Appendf(nil, `{"model":"sim-model","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"attack %d"}],"max_tokens":%d,"stream":%v}`,
		rng.IntN(1_000_000), 1+rng.IntN(8), stream)
}

// one sends data in one write and reads the first answer.
func one(data []byte) rawPlan {
	return rawPlan{steps: []rawStep{{data: data}}, wait: dpFastBound + dpSlack, stopAfter: 1}
}

// validCase is a complete, valid request: the control every attack is
// measured against.
func validCase(rng *rand.Rand, host string) dpCase {
	stream := rng.IntN(2) == 0
	o := reqOpts{body: completion(rng, stream)}
	if rng.IntN(2) == 0 {
		o.path, o.body = "/v1/chat/completions", chat(rng, stream)
	}
	return dpCase{kind: "valid", plan: one(o.build(host)), exp: dpExpect{want200: true}}
}

// dpGenerators are the case kinds with their weights.
var dpGenerators = []struct {
	kind   string
	weight int
	gen    func(rng *rand.Rand, host string) dpCase
}{
	{"valid", 6, validCase},
	{"request_line", 10, requestLineCase},
	{"header_bomb", 8, headerBombCase},
	{"smuggle", 12, smuggleCase},
	{"bad_chunked", 10, badChunkedCase},
	{"body_limit", 3, bodyLimitCase},
	{"truncated_body", 6, truncatedBodyCase},
	{"bad_json", 16, badJSONCase},
	{"huge_prompt", 2, hugePromptCase},
	{"forged_hop", 6, forgedHopCase},
	{"h2_junk", 8, h2JunkCase},
	{"method_path", 8, methodPathCase},
	{"pipelined", 5, pipelinedCase},
	{"http10_stream", 4, http10StreamCase},
	{"h2_target", 4, h2TargetCase},
}

// dpGenerate draws case i.
func dpGenerate(rng *rand.Rand, host string) dpCase {
	g := pickKind(rng, dpGenerators, func(g struct {
		kind   string
		weight int
		gen    func(rng *rand.Rand, host string) dpCase
	}) int {
		return g.weight
	})
	c := g.gen(rng, host)
	c.kind = g.kind
	return c
}

// requestLineCase sends malformed request lines.
func requestLineCase(rng *rand.Rand, host string) dpCase {
	body := completion(rng, false)
	lines := []struct {
		line string
		exp  dpExpect
	}{
		{"GET\r\n\r\n", dpExpect{}},
		{"GET /v1/models\r\n\r\n", dpExpect{}},
		{"GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n", dpExpect{}},
		{"GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n", dpExpect{allow: []int{505}}},
		{"GET /v1/models HTTP/2.0\r\nHost: x\r\n\r\n", dpExpect{allow: []int{505}}},
		{"GET /v1/models HTTP/1.10\r\nHost: x\r\n\r\n", dpExpect{allow: []int{505}}},
		{"GET /v1/models HTTP/0.9\r\nHost: x\r\n\r\n", dpExpect{allow: []int{505}}},
		{"GET /v1/models http/1.1\r\nHost: x\r\n\r\n", dpExpect{allow: []int{505}}},
		{"\x00\x01\x02\x03\r\n\r\n", dpExpect{}},
		{" GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", dpExpect{}},
		{"GET  /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", dpExpect{}},
		{"GET /v1/mo\x00dels HTTP/1.1\r\nHost: x\r\n\r\n", dpExpect{}},
		{"GET /v1/models\tHTTP/1.1\r\nHost: x\r\n\r\n", dpExpect{}},
		{"G\x7fET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", dpExpect{}},
		{strings.Repeat("A", 9000) + " /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", dpExpect{}},
		{"GET /" + strings.Repeat("a", 2<<20) + " HTTP/1.1\r\nHost: x\r\n\r\n", dpExpect{}},
		{"GET http://evil.example/v1/models HTTP/1.1\r\nHost: x\r\n\r\n", dpExpect{ok200: true}},
		{"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n", dpExpect{}},
		{"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", dpExpect{ok200: true, anyBody: true}},
		{"GET /v1/models HTTP/1.1\r\n\r\n", dpExpect{}}, // no Host
		{"GET /v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", dpExpect{}},
		{"GET /v1/models HTTP/1.0\r\n\r\n", dpExpect{ok200: true}},
		{"POST /v1/completions HTTP/1.1\nHost: x\nContent-Length: " + strconv.Itoa(len(body)) + "\n\n" + string(body), dpExpect{ok200: true}},
		{"POST /v1/completions HTTP/1.1\rHost: x\r\r", dpExpect{}},
	}
	l := lines[rng.IntN(len(lines))]
	plan := one([]byte(l.line))
	plan.halfClose = true
	return dpCase{plan: plan, exp: l.exp}
}

// headerBombCase sends many or huge headers.
func headerBombCase(rng *rand.Rand, host string) dpCase {
	o := reqOpts{body: completion(rng, false)}
	exp := dpExpect{ok200: true}
	switch rng.IntN(9) {
	case 0: // many small headers, under the 1 MiB header limit
		for i := range 5000 + rng.IntN(5000) {
			o.headers = append(o.headers, fmt.Sprintf("X-Bomb-%d: %d", i, i))
		}
	case 1: // one header over the limit
		o.headers = []string{"X-Huge: " + strings.Repeat("h", 1<<20+rng.IntN(1<<20))}
		exp = dpExpect{}
	case 2: // many headers over the limit
		for i := range 80000 {
			o.headers = append(o.headers, fmt.Sprintf("X-Bomb-%d: %s", i, strings.Repeat("b", 10)))
		}
		exp = dpExpect{}
	case 3:
		o.headers = []string{"X Bad: 1"}
		exp = dpExpect{}
	case 4:
		o.headers = []string{"X-Nul: a\x00b"}
		exp = dpExpect{}
	case 5:
		o.headers = []string{"X-Fold: a", " folded"} // obs-fold: net/http unfolds it (RFC 9112 §5.2 allows that)
	case 6:
		o.headers = []string{"X-Llb-Route: forged", "X-Forwarded-For: 1.2.3.4, evil", "X-Real-IP: 10.0.0.1", "Forwarded: for=evil"}
	case 7:
		o.headers = []string{"Content-Type: text/plain", "Content-Type: application/json"}
	default:
		o.headers = []string{": empty-name", "X-Ok: 1"}
		exp = dpExpect{}
	}
	return dpCase{plan: one(o.build(host)), exp: exp}
}

// smuggleCase sends a request whose framing is ambiguous with a second,
// smuggled request behind it in the same write.
func smuggleCase(rng *rand.Rand, host string) dpCase {
	body := completion(rng, false)
	smuggled := fmt.Sprintf("GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	te := []string{"Transfer-Encoding: chunked", "Transfer-Encoding: chunked, identity", "Transfer-Encoding: identity",
		"Transfer-Encoding: xchunked", "Transfer-Encoding : chunked", "Transfer-Encoding:\tchunked", "Transfer-Encoding: CHUNKED",
		"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity", "Transfer-Encoding: gzip, chunked", "Transfer-Encoding: \"chunked\""}
	var o reqOpts
	exp := dpExpect{ok200: true, mustClose: true, allow: []int{http.StatusNotImplemented}}
	switch v := rng.IntN(6); v {
	case 0, 1: // TE and CL: CL claims the smuggled request as body, or less
		cl := len(chunked) + len(smuggled)
		if v == 1 {
			cl = rng.IntN(len(chunked))
		}
		o = reqOpts{noLength: true, headers: []string{te[rng.IntN(len(te))], "Content-Type: application/json", "Content-Length: " + strconv.Itoa(cl)},
			body: []byte(chunked + smuggled)}
	case 2: // CL then TE
		o = reqOpts{noLength: true, headers: []string{"Content-Length: " + strconv.Itoa(len(body)), te[rng.IntN(len(te))], "Content-Type: application/json"},
			body: []byte(chunked + smuggled)}
	case 3: // two different lengths
		o = reqOpts{noLength: true, headers: []string{"Content-Type: application/json", "Content-Length: " + strconv.Itoa(len(body)),
			"Content-Length: " + strconv.Itoa(len(body)+len(smuggled))}, body: []byte(string(body) + smuggled)}
		exp = dpExpect{mustClose: true}
	case 4: // a length that is not a plain number
		cls := []string{"+" + strconv.Itoa(len(body)), strconv.Itoa(len(body)) + ", " + strconv.Itoa(len(body)), "0x" + strconv.FormatInt(int64(len(body)), 16),
			"-1", "99999999999999999999999", "1_0"}
		o = reqOpts{noLength: true, headers: []string{"Content-Type: application/json", "Content-Length: " + cls[rng.IntN(len(cls))]},
			body: []byte(string(body) + smuggled)}
		exp = dpExpect{mustClose: true}
	default: // a chunked HTTP/1.0 request
		o = reqOpts{proto: "HTTP/1.0", noLength: true, headers: []string{"Transfer-Encoding: chunked", "Content-Type: application/json", "Connection: keep-alive"},
			body: []byte(chunked + smuggled)}
	}
	// Read every response until the connection closes (a short bound).
	plan := rawPlan{steps: []rawStep{{data: o.build(host)}}, wait: dpFastBound}
	return dpCase{plan: plan, exp: exp}
}

// badChunkedCase sends broken chunked encodings; the write side is shut
// after them, so a body that never ends ends at the EOF.
func badChunkedCase(rng *rand.Rand, host string) dpCase {
	body := string(completion(rng, false))
	n := len(body)
	encodings := []string{
		"zz\r\n" + body + "\r\n0\r\n\r\n",
		"ffffffffffffffffff\r\n" + body + "\r\n0\r\n\r\n",
		fmt.Sprintf("%x\r\n%s0\r\n\r\n", n, body),                                            // no CRLF after the data
		fmt.Sprintf("%x\r\n%s\r\n", n, body),                                                 // no last chunk
		fmt.Sprintf("%x;%s\r\n%s\r\n0\r\n\r\n", n, strings.Repeat("e", 70000), body),         // extension bomb
		fmt.Sprintf("%x\r\n%s\r\n0\r\n%s\r\n", n, body, strings.Repeat("X-T: t\r\n", 20000)), // trailer bomb
		"-1\r\n" + body + "\r\n0\r\n\r\n",
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", n+100, body), // size beyond the data
		fmt.Sprintf("%x \r\n%s\r\n0\r\n\r\n", n, body),    // space after the size
		strings.Repeat("1\r\na\r\n", 50000) + "0\r\n\r\n", // 50 000 one-byte chunks (not JSON)
		fmt.Sprintf("0%x\r\n%s\r\n0\r\n\r\n", n, body),    // leading zero
		fmt.Sprintf("%X\r\n%s\r\n0\r\n\r\n", n, body),     // upper-case hex: valid
	}
	v := rng.IntN(len(encodings))
	o := reqOpts{noLength: true, headers: []string{"Transfer-Encoding: chunked", "Content-Type: application/json"}, body: []byte(encodings[v])}
	plan := rawPlan{steps: []rawStep{{data: o.build(host)}}, halfClose: true, wait: dpFastBound + dpSlack}
	exp := dpExpect{mustClose: true}
	switch v {
	case len(encodings) - 1, len(encodings) - 2:
		exp.ok200 = true
	case 4, 8:
		// llb's HTTP/1.1 server (fasthttp) reads a chunk extension of any
		// length and drops it (the body read bound limits how long), and
		// takes whitespace between a chunk size and its CRLF as the end of
		// the size. Neither frames the body differently from a reader that
		// accepts the request, so nothing can be smuggled; a strict proxy in
		// front refuses both before llb sees them. Served or refused, both
		// are fine.
		exp.ok200 = true
	}
	return dpCase{plan: plan, exp: exp}
}

// bodyLimitCase sends bodies over the 16 MiB limit, declared or chunked.
func bodyLimitCase(rng *rand.Rand, host string) dpCase {
	size := dpBodyLimit + 1 + rng.IntN(1<<20)
	big := append([]byte(`{"model":"sim-model","prompt":"`), bytes.Repeat([]byte("x"), size)...)
	big = append(big, `"}`...)
	var o reqOpts
	if rng.IntN(2) == 0 {
		o = reqOpts{body: big}
	} else {
		var b bytes.Buffer
		for rest := big; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(1<<20))
			fmt.Fprintf(&b, "%x\r\n%s\r\n", k, rest[:k])
			rest = rest[k:]
		}
		b.WriteString("0\r\n\r\n")
		o = reqOpts{noLength: true, headers: []string{"Transfer-Encoding: chunked", "Content-Type: application/json"}, body: b.Bytes()}
	}
	return dpCase{plan: one(o.build(host)), exp: dpExpect{}}
}

// truncatedBodyCase declares more body than it sends, then shuts the write
// side: never a 200.
func truncatedBodyCase(rng *rand.Rand, host string) dpCase {
	body := completion(rng, rng.IntN(2) == 0)
	cut := rng.IntN(len(body))
	head := reqOpts{noLength: true, headers: []string{"Content-Type: application/json", "Content-Length: " + strconv.Itoa(len(body))}}.build(host)
	plan := rawPlan{steps: []rawStep{{data: append(head, body[:cut]...)}}, halfClose: true, wait: dpFastBound + dpSlack}
	return dpCase{plan: plan, exp: dpExpect{}}
}

// badJSONCase sends complete requests whose JSON is broken or odd.
func badJSONCase(rng *rand.Rand, host string) dpCase {
	// llb refuses what is not a JSON object (400 invalid_json); a JSON
	// object goes to the backend, which judges its fields (a 200 there is
	// the backend's call, not llb's).
	bodies := []struct {
		body string
		ok   bool // a JSON object
	}{
		{"", false}, {"{", false}, {"[]", false}, {"null", false}, {`"x"`, false}, {`{"model":`, false},
		{`{"model":"sim-model","prompt":"\xff\xfe"}`, true},
		{"\xef\xbb\xbf" + `{"model":"sim-model","prompt":"bom"}`, false},
		{`{"model":"sim-model","prompt":5}`, false},
		{`{"model":"sim-model","prompt":["a",1]}`, false},
		{`{"model":"sim-model","prompt":[1,2,3]}`, true},
		{`{"model":"sim-model","prompt":[[1,2],[3]]}`, true},
		{`{"model":"sim-model","prompt":[-1]}`, false},
		{`{"model":"sim-model","prompt":[4294967296]}`, false},
		{`{"model":"sim-model","prompt":"a","max_tokens":-1}`, false},
		{`{"model":"sim-model","prompt":"a","max_tokens":1e309}`, false},
		{`{"model":"sim-model","prompt":"a","max_tokens":"5"}`, false},
		{`{"model":"sim-model","prompt":"a","max_tokens":9223372036854775808}`, false},
		{`{"model":"sim-model","prompt":"a","stream":"yes"}`, false},
		{`{"model":"sim-model","prompt":"a","prompt":7}`, false},
		{`{"model":null,"prompt":"a"}`, true},
		{`{"model":"sim-model","prompt":"a\u0000b"}`, true},
		{`{"model":"sim-model","prompt":"a","user":"\r\nX-Injected: 1"}`, true},
		{`{"model":"sim-model","prompt":"a","n":1000000}`, false},
		{`{"model":"sim-model","prompt":"` + strings.Repeat(`\ud800`, 1000) + `"}`, true},
		{`{"model":"sim-model","prompt":"a",` + strings.Repeat(`"k":1,`, 20000) + `"z":1}`, true},
		{`{"model":"sim-model","prompt":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`, false},
		{`{"model":"sim-model","messages":"x"}`, false},
		{`{"model":"sim-model","messages":[]}`, false},
		{`{"model":"sim-model","messages":[{"role":"user"}]}`, false},
		{`{"model":"sim-model","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, true},
		{`{"model":"sim-model","messages":[` + strings.Repeat(`{"role":"user","content":"m"},`, 50000) + `{"role":"user","content":"end"}]}`, true},
		{`{"model":"sim-model","prompt":"a","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"evil","remote_host":"169.254.169.254","remote_port":80}}`, true},
		{`{"model":"sim-model","prompt":"a","stream":true,"stream_options":{"include_usage":"x"}}`, false},
	}
	b := bodies[rng.IntN(len(bodies))]
	path := "/v1/completions"
	if strings.Contains(b.body, `"messages"`) || rng.IntN(5) == 0 {
		path = "/v1/chat/completions"
	}
	ctype := []string{"Content-Type: application/json", "Content-Type: text/plain", "Content-Type: application/json; charset=latin1"}[rng.IntN(3)]
	o := reqOpts{path: path, noLength: true, headers: []string{ctype, "Content-Length: " + strconv.Itoa(len(b.body))}, body: []byte(b.body)}
	return dpCase{plan: one(o.build(host)), exp: dpExpect{ok200: jsonObject(b.body)}}
}

// jsonObject reports whether s is one JSON object (what llb forwards).
func jsonObject(s string) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &v) == nil
}

// hugePromptCase sends prompts up to just under the body limit.
func hugePromptCase(rng *rand.Rand, host string) dpCase {
	sizes := []int{1 << 20, 8 << 20, dpBodyLimit - 200}
	n := sizes[rng.IntN(len(sizes))]
	body := append([]byte(`{"model":"sim-model","max_tokens":1,"prompt":"`), bytes.Repeat([]byte("word "), n/5)...)
	body = append(body, `"}`...)
	if rng.IntN(2) == 0 {
		body = bytes.Replace(body, []byte(`"prompt":"`), []byte(`"messages":[{"role":"user","content":"`), 1)
		body = append(body[:len(body)-1], "}]}"...)
		return dpCase{plan: one(reqOpts{path: "/v1/chat/completions", body: body}.build(host)), exp: dpExpect{ok200: true}}
	}
	return dpCase{plan: one(reqOpts{body: body}.build(host)), exp: dpExpect{ok200: true}}
}

// forgedHopCase sends X-Llb-Hop headers a client made up: a few unknown
// instances are passed through; more than 8 are a loop (508).
func forgedHopCase(rng *rand.Rand, host string) dpCase {
	o := reqOpts{body: completion(rng, false)}
	hop := func() string { return fmt.Sprintf("%032x", rng.Uint64()) }
	switch rng.IntN(5) {
	case 0:
		o.headers = []string{"X-Llb-Hop: " + hop()}
		return dpCase{plan: one(o.build(host)), exp: dpExpect{want200: true}}
	case 1:
		ids := make([]string, 9+rng.IntN(20))
		for i := range ids {
			ids[i] = hop()
		}
		o.headers = []string{"X-Llb-Hop: " + strings.Join(ids, ", ")}
		return dpCase{plan: one(o.build(host)), exp: dpExpect{allow: []int{http.StatusLoopDetected}}}
	case 2:
		for range 9 + rng.IntN(20) {
			o.headers = append(o.headers, "X-Llb-Hop: "+hop())
		}
		return dpCase{plan: one(o.build(host)), exp: dpExpect{allow: []int{http.StatusLoopDetected}}}
	case 3:
		o.headers = []string{"X-Llb-Hop: " + strings.Repeat(",", 100000)}
		return dpCase{plan: one(o.build(host)), exp: dpExpect{ok200: true, allow: []int{http.StatusLoopDetected}}}
	default:
		o.headers = []string{"X-Llb-Hop: \xff\xfe", "x-llb-hop: " + hop()}
		return dpCase{plan: one(o.build(host)), exp: dpExpect{ok200: true, allow: []int{http.StatusLoopDetected}}}
	}
}

// methodPathCase sends the wrong method or an unknown path.
func methodPathCase(rng *rand.Rand, host string) dpCase {
	paths := []string{"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/v1/../v1/completions", "/v1/completions/",
		"/V1/COMPLETIONS", "/v1/completions?x=%zz", "/v1/completions?" + strings.Repeat("q=1&", 5000), "/%2e%2e/admin", "/metrics",
		"/v1/assistants", "//v1/completions", "/v1/completions#frag", "/debug/pprof/"}
	methods := []string{"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "FOO"}
	m, p := methods[rng.IntN(len(methods))], paths[rng.IntN(len(paths))]
	o := reqOpts{method: m, path: p}
	if m == "POST" || rng.IntN(3) == 0 {
		o.body = completion(rng, false)
	}
	plan := one(o.build(host))
	plan.head = m == "HEAD"
	ok := (m == "POST" && (p == "/v1/completions" || p == "/v1/chat/completions" || strings.HasPrefix(p, "/v1/completions?"))) ||
		((m == "GET" || m == "HEAD") && (p == "/v1/models" || p == "/health"))
	// A HEAD has no body, and vLLM's /health answers 200 with none.
	return dpCase{plan: plan, exp: dpExpect{ok200: ok, anyBody: plan.head || p == "/health"}}
}

// pipelinedCase sends three valid requests in one write: three answers,
// in order.
func pipelinedCase(rng *rand.Rand, host string) dpCase {
	var b []byte
	for range 3 {
		b = append(b, reqOpts{body: completion(rng, false)}.build(host)...)
	}
	plan := rawPlan{steps: []rawStep{{data: b}}, wait: dpFastBound + dpSlack, stopAfter: 3}
	return dpCase{plan: plan, exp: dpExpect{want200: true, maxResponses: 3}}
}

// http10StreamCase asks for a stream over HTTP/1.0, which cannot read
// chunks: the events must come whole, without a length or chunks, the body
// ended by the close, as vLLM's own server sends them.
func http10StreamCase(rng *rand.Rand, host string) dpCase {
	o := reqOpts{proto: "HTTP/1.0", body: completion(rng, true)}
	if rng.IntN(2) == 0 {
		o.path, o.body = "/v1/chat/completions", chat(rng, true)
	}
	if rng.IntN(2) == 0 {
		o.headers = []string{"Connection: keep-alive"}
	}
	plan := rawPlan{steps: []rawStep{{data: o.build(host)}}, wait: dpFastBound + dpSlack}
	return dpCase{plan: plan, exp: dpExpect{want200: true, mustClose: true, untilClose: true}}
}

// h2Targets are :paths an HTTP/1.1 request line cannot carry.
var h2Targets = []string{"/v1/models?a=b c", "/v1/models?a=\xff\xfe", "/v1/models#frag", "/v1/completions#frag", "/health?x=\xfe"}

// h2TargetCase sends an h2c request whose :path an HTTP/1.1 request line
// cannot carry: it must be refused 400 bad_request, never forwarded (llb
// copied such a :path into the upstream request line).
func h2TargetCase(rng *rand.Rand, host string) dpCase {
	return dpCase{h2Path: h2Targets[rng.IntN(len(h2Targets))]}
}

// h2Target runs an h2_target case.
func (f *dpFamily) h2Target(ctx context.Context, c dpCase) Outcome {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	defer tr.CloseIdleConnections()
	req := (&http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: "http", Host: f.vip, Opaque: c.h2Path}, Host: f.vip,
		Header: http.Header{}}).WithContext(ctx)
	start := time.Now()
	resp, err := (&http.Client{Transport: tr, Timeout: dpFastBound + dpSlack}).Do(req)
	if err != nil {
		return defect("no answer: %v", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.ProtoMajor != 2:
		return defect("answered over HTTP/%d.%d", resp.ProtoMajor, resp.ProtoMinor)
	case resp.StatusCode != http.StatusBadRequest || !bytes.Contains(body, []byte(`"code":"bad_request"`)):
		return defect("%d %s after %v; want 400 bad_request (a target the upstream request line cannot carry)", resp.StatusCode, short(body), time.Since(start).Round(time.Millisecond))
	}
	return refused()
}

// ---- HTTP/2 ------------------------------------------------------------

const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2Frame is one frame: 24-bit length, type, flags, stream id.
func h2Frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[5:], stream&0x7fffffff)
	return append(b, payload...)
}

// hpackLiteral encodes name: value as a literal without indexing (lengths
// under 127).
func hpackLiteral(name, value string) []byte {
	b := []byte{0x00, byte(len(name))}
	b = append(b, name...)
	b = append(b, byte(len(value)))
	return append(b, value...)
}

// h2Headers is a request header block for a POST to path.
func h2Headers(path, host string) []byte {
	var b []byte
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", host}, {"content-type", "application/json"}} {
		b = append(b, hpackLiteral(kv[0], kv[1])...)
	}
	return b
}

// h2JunkCase sends HTTP/2 with prior knowledge, then junk or abuse. The
// server must end the connection (GOAWAY and close) within the bound, and
// never answer in HTTP/1 with a 5xx.
func h2JunkCase(rng *rand.Rand, host string) dpCase {
	settings := h2Frame(0x4, 0, 0, nil)
	var tail []byte
	switch rng.IntN(8) {
	case 0: // garbage after the preface
		tail = make([]byte, 1+rng.IntN(4096))
		for i := range tail {
			tail[i] = byte(rng.IntN(256))
		}
	case 1: // a broken preface
		return dpCase{plan: rawPlan{steps: []rawStep{{data: []byte("PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")}}, halfClose: true, wait: dpFastBound + dpSlack},
			exp: dpExpect{}}
	case 2: // a frame claiming 16 MiB
		tail = append(settings, 0xff, 0xff, 0xff, 0x0, 0x0, 0, 0, 0, 1)
	case 3: // HEADERS with garbage HPACK
		junk := make([]byte, 64)
		for i := range junk {
			junk[i] = byte(rng.IntN(256))
		}
		tail = append(settings, h2Frame(0x1, 0x5, 1, junk)...)
	case 4: // CONTINUATION flood: HEADERS without END_HEADERS, then endless CONTINUATION
		tail = append(settings, h2Frame(0x1, 0x0, 1, h2Headers("/v1/completions", host))...)
		for range 4000 {
			tail = append(tail, h2Frame(0x9, 0x0, 1, hpackLiteral("x-flood", strings.Repeat("c", 100)))...)
		}
	case 5: // rapid reset: HEADERS then RST_STREAM, many streams
		tail = settings
		for s := uint32(1); s < 4000; s += 2 {
			tail = append(tail, h2Frame(0x1, 0x4, s, h2Headers("/v1/completions", host))...)
			tail = append(tail, h2Frame(0x3, 0, s, []byte{0, 0, 0, 8})...)
		}
	case 6: // SETTINGS with absurd values, then a WINDOW_UPDATE overflow
		p := []byte{0, 4, 0x7f, 0xff, 0xff, 0xff, 0, 5, 0xff, 0xff, 0xff, 0xff}
		tail = append(h2Frame(0x4, 0, 0, p), h2Frame(0x8, 0, 0, []byte{0x7f, 0xff, 0xff, 0xff})...)
		tail = append(tail, h2Frame(0x8, 0, 0, []byte{0x7f, 0xff, 0xff, 0xff})...)
	default: // a stream with a DATA frame before its HEADERS
		tail = append(settings, h2Frame(0x0, 0x1, 1, []byte("{}"))...)
	}
	data := append([]byte(h2Preface), tail...)
	plan := rawPlan{steps: []rawStep{{data: data}}, halfClose: true, wait: dpFastBound + dpSlack}
	return dpCase{plan: plan, exp: dpExpect{}}
}

// ---- slow clients ----------------------------------------------------------

// slowCase is a slow-client case with its index.
type slowCase struct {
	i int
	c dpCase
	o Outcome
}

// slowCases runs the slow clients in the background (when the budget
// leaves room for the 60 s body bound): slowloris headers, trickled
// bodies (small and over 256 KiB), idle connections. The returned func
// waits for them.
func (f *dpFamily) slowCases(ctx context.Context, budget time.Duration) func() []slowCase {
	var cases []dpCase
	trickle := func(head []byte, step []byte, every time.Duration, n int) []rawStep {
		steps := []rawStep{{data: head}}
		for range n {
			steps = append(steps, rawStep{pause: every, data: step})
		}
		return steps
	}
	rng := caseRand(f.cfg.Seed, FamilyDataPlane, -1)
	if shortRun(budget) {
		return func() []slowCase { return nil }
	}
	// Slowloris: a header line a second, forever.
	for range 4 {
		head := []byte(fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: %s\r\n", f.vip))
		cases = append(cases, dpCase{kind: "slow_header", plan: rawPlan{steps: trickle(head, []byte("X-Slow: 1\r\n"), time.Second, 30),
			wait: dpHeaderTimeout + 2*dpSlack}, exp: dpExpect{bound: dpHeaderTimeout}})
	}
	// Idle connections that never send a byte.
	for range 200 {
		cases = append(cases, dpCase{kind: "idle_conn", plan: rawPlan{wait: dpHeaderTimeout + 2*dpSlack}, exp: dpExpect{bound: dpHeaderTimeout}})
	}
	if budget >= SlowCasesBudget && !f.cfg.Replay {
		body := completion(rng, false)
		for _, pre := range []int{1, 300 << 10} { // a small start, and one over net/http's 256 KiB drain
			head := reqOpts{noLength: true, headers: []string{"Content-Type: application/json", "Content-Length: " + strconv.Itoa(pre+100000)}}.build(f.vip)
			head = append(head, bytes.Repeat([]byte(" "), pre)...)
			for range 3 {
				cases = append(cases, dpCase{kind: "slow_body", plan: rawPlan{steps: trickle(head, []byte(" "), 2*time.Second, 40),
					wait: dpBodyTimeout + 2*dpSlack}, exp: dpExpect{bound: dpBodyTimeout, mustClose: true}})
			}
		}
		_ = body
	}
	if f.cfg.Replay {
		cases = nil
	}
	out := make([]slowCase, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = slowCase{i: -1 - i, c: c, o: f.judge(c, exchange(ctx, f.vip, c.plan))}
		}()
	}
	return func() []slowCase {
		wg.Wait()
		return out
	}
}

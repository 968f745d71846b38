package attack

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Rule templates and the mutators that bend them. A template is a valid
// rule (llbd accepts it: TestTemplates_AreAccepted); a mutation is one to
// three operators applied to it, each a function of the case's random
// source alone.

// ruleSpot is where a case's rule lives: its VIP, port and endpoints.
type ruleSpot struct {
	vip  string
	port int
	eps  []string
}

// newRuleSpot draws a VIP (.2–.99), a port (20000–29999) and four endpoint
// addresses (.100–.149, where nothing listens) in the net.
func newRuleSpot(rng *rand.Rand, n loopNet) ruleSpot {
	s := ruleSpot{
		vip:  n.ip(hostRESTVIPLo + rng.IntN(hostRESTVIPHi-hostRESTVIPLo+1)),
		port: 20000 + rng.IntN(10000),
	}
	for range 4 {
		s.eps = append(s.eps, n.ip(hostRESTEPLo+rng.IntN(hostRESTEPHi-hostRESTEPLo+1)))
	}
	return s
}

// templates are the valid rules mutations start from; each covers a
// different part of the rule model.
var templates = []struct {
	name string
	json func(s ruleSpot) string
}{
	{"pool", func(s ruleSpot) string {
		return fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"atk-pool","probetype":"none"},`+
			`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1},{"endpointIP":%q,"targetPort":8000,"weight":2}]}`,
			s.vip, s.port, s.eps[0], s.eps[1])
	}},
	{"pd", func(s ruleSpot) string {
		return fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"atk-pd",`+
			`"pd_disagg_mode":true,"pd_cache_aware_mode":true,"pd_session_ttl_sec":300,"pd_cache_threshold":20,"pd_balance_abs_threshold":3,`+
			`"kvExactMode":1,"kvZmqPort":5557,"kvBlockSize":16,"kvHashAlgo":"sha256_cbor","kvNoneHashSeed":"0","kvWarmupSec":1,"probetype":"none"},`+
			`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1,"ep_role":1,"nixl_port":5600},`+
			`{"endpointIP":%q,"targetPort":8000,"weight":1,"ep_role":2,"nixl_port":5600},{"endpointIP":%q,"targetPort":8000,"weight":1}]}`,
			s.vip, s.port, s.eps[0], s.eps[1], s.eps[2])
	}},
	{"chwbl", func(s ruleSpot) string {
		return fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":8,"mode":4,"name":"atk-chwbl",`+
			`"chwbl_prefix_hash_level":2,"chwbl_prefix_hash_flags":9,"chwbl_enable_cache_salt":true,"chwbl_mean_load_factor":175,"chwbl_replication":100,`+
			`"sse_mode":true,"max_stream_duration_sec":600,"cb_enable":true,"probetype":"tcp","probeport":8000,"probeTimeout":30,"probeRetries":2},`+
			`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1},{"endpointIP":%q,"targetPort":8001,"weight":1},{"endpointIP":%q,"targetPort":8000,"weight":3}]}`,
			s.vip, s.port, s.eps[0], s.eps[1], s.eps[2])
	}},
	{"kv3", func(s ruleSpot) string {
		return fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"atk-kv3",`+
			`"kvExactMode":3,"kvZmqPort":5557,"kvReplayPort":5567,"kvDpRankCount":2,"kvBlockKey":"tokens","kvBlockSize":16,"kvWarmupSec":0,"probetype":"none"},`+
			`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1},{"endpointIP":%q,"targetPort":8000,"weight":1}]}`,
			s.vip, s.port, s.eps[0], s.eps[1])
	}},
	{"octavia", func(s ruleSpot) string {
		return fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":3,"mode":4,"name":"atk-octavia","host":"api.example",`+
			`"id":"atk-%d","projectId":"p1","annotations":{"team":"attack","tier":"gold"},"adminStateUp":true,"connectionLimit":100,`+
			`"timeoutMemberConnect":500,"timeoutMemberData":2000,"session_header_name":"X-User","path_prefix":"/v1","path_match_mode":"prefix",`+
			`"backend_protocol":"http1","probetype":"http","probeport":8000,"probereq":"/health","probeTimeout":5,"probeRetries":2},`+
			`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1,"httpMethod":"GET","urlPath":"/health","expectedCodes":"200-204",`+
			`"httpVersion":"1.1","domainName":"worker.example","monitorAddress":%q}],`+
			`"allowedSources":[{"prefix":"127.0.0.0/8"}],"secondaryVIPs":[{"address":"10.0.0.1","subnetId":"s","portId":"p","proto":"tcp"}]}`,
			s.vip, s.port, s.port, s.eps[0], s.eps[0])
	}},
	{"admission", func(s ruleSpot) string {
		return fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":4,"mode":4,"name":"atk-fc","probetype":"none",`+
			`"fc_mode":"enforce","fc_max_outstanding":100,"fc_ep_max_inflight":8,"fc_max_queue_depth":16,"fc_max_queue_wait_ms":2000,`+
			`"fc_telemetry_stale_ms":30000,"fc_warmup_ms":1000,"fc_ttft_target_ms":500,"fc_tenant_max_share_pct":50,"fc_adaptive":"on","fc_expose_headers":"on"},`+
			`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1},{"endpointIP":%q,"targetPort":8000,"weight":1}]}`,
			s.vip, s.port, s.eps[0], s.eps[1])
	}},
	{"l4", func(s ruleSpot) string {
		return fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"portMax":%d,"protocol":"udp","sel":1,"mode":2,"name":"atk-l4","block":7,"inactiveTimeOut":20},`+
			`"endpoints":[{"endpointIP":%q,"targetPort":9000,"weight":1}]}`,
			s.vip, s.port, s.port+5, s.eps[0])
	}},
}

// edgeNumbers are number spellings at and past every range the model
// checks, and a few that are not JSON numbers at all.
var edgeNumbers = []string{
	"0", "-1", "1", "2", "3", "4", "7", "8", "31", "32", "33", "99", "100", "101", "255", "256", "300", "1024", "4096",
	"65535", "65536", "-65536", "86400", "86401", "100000", "2147483647", "2147483648", "-2147483649",
	"4294967295", "4294967296", "9007199254740993", "9223372036854775807", "9223372036854775808",
	"-9223372036854775808", "-9223372036854775809", "18446744073709551615", "18446744073709551616",
	"1e3", "1E400", "-1e400", "1.5", "0.0", "-0", "1e-400", "1" + strings.Repeat("0", 400), "0.1e1",
	"01", "+1", ".5", "1.", "0x10", "NaN", "Infinity", "-", "1e", "--1",
}

// evilStrings are the strings every string field gets tried with; a
// template's own values and the net's addresses join them per case.
var evilStrings = []string{
	"", " ", "\x00", "a\x00b", "\r\n", "x\r\nX-Injected: 1", "/health\r\nHost: evil", "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
	"\t", "\x7f", "\xff\xfe\xfd", "\xc0\xaf", "\xed\xa0\x80", "\u202eevil", "ℌ𝔢𝔩𝔩𝔬", "e\u0301", "\ufeff", "\u2028",
	strings.Repeat("A", 70000), strings.Repeat("é", 40000), strings.Repeat("\x00", 1000),
	"../../../../etc/passwd", "/a/../../b", "%2e%2e%2f", "%00", "%", "?a=b#c", "/ space", "${jndi:ldap://x}", "'; DROP TABLE rules; --",
	"<script>alert(1)</script>", "{{.}}", "\\", "\"", "null", "true", "0", "-1", "1e309",
	"TCP", "Tcp", "tcp ", " tcp", "tcp\x00", "udp", "sctp", "icmp",
	"127.0.0.256", "127.1", "0x7f.0.0.1", "0177.0.0.1", "fe80::1%eth0", "[::1]", "1.2.3.4/32", "localhost", "٣.٣.٣.٣",
	"::", "0.0.0.0", "255.255.255.255", "224.0.0.1", "2001:db8::1",
	"ACTIVE", "DISABLED", "NONE", "active", "enforce", "observe", "inherit", "on", "off", "prefix", "exact", "disabled",
	"sha256_cbor", "xxhash_cbor", "sha256_sglang", "blockhash_trtllm", "tokens", "hash", "vllm", "sglang", "trtllm", "llamacpp",
	"http1", "http2", "both", "cookie:", "cookie:a\r\nb", "query:", "basic-auth", "X-User\r\n", "200-199", "99", "600", "200,", "1.2", "get",
}

// mutation is one operator: it changes the document (and may return raw
// bytes instead, for the operators past JSON).
type mutation struct {
	name  string
	apply func(rng *rand.Rand, doc *jnode, m *mutContext) []byte
}

// mutContext is what operators may draw on besides the document.
type mutContext struct {
	spot ruleSpot
	net  loopNet
	rest string // the REST API's host:port
}

// strings returns the evil strings plus the case's own addresses.
func (m *mutContext) strings() []string {
	own := []string{m.spot.vip, "::ffff:" + m.spot.vip, m.spot.vip + "%lo", m.net.ip(hostRESTVIPLo), m.spot.eps[0],
		m.spot.vip + ":" + strconv.Itoa(m.spot.port), m.rest}
	return append(own, evilStrings...)
}

// pickPath draws a non-root value of doc that ok accepts (nil: any); it
// returns nil when there is none.
func pickPath(rng *rand.Rand, doc *jnode, ok func(*jnode) bool) []int {
	all := doc.paths()[1:]
	if len(all) == 0 {
		return nil
	}
	if ok != nil {
		var fit [][]int
		for _, p := range all {
			if n, _, _ := doc.at(p); ok(n) {
				fit = append(fit, p)
			}
		}
		if all = fit; len(all) == 0 {
			return nil
		}
	}
	return all[rng.IntN(len(all))]
}

// replace puts v at path p.
func replace(doc *jnode, p []int, v *jnode) {
	_, parent, i := doc.at(p)
	parent.kids[i] = v
}

func isKind(k jkind) func(*jnode) bool { return func(n *jnode) bool { return n.kind == k } }

// otherValue is a value of another kind than n's.
func otherValue(rng *rand.Rand, n *jnode) *jnode {
	for {
		var v *jnode
		switch rng.IntN(8) {
		case 0:
			v = jnum(strconv.Itoa(rng.IntN(3)))
		case 1:
			v = jstr(strconv.Itoa(rng.IntN(3)))
		case 2:
			v = jbool(rng.IntN(2) == 0)
		case 3:
			v = jnull()
		case 4:
			v = jarr()
		case 5:
			v = jobj()
		case 6:
			v = jarr(jnum("1"), jstr("a"))
		default:
			v = jobj("a", jnum("1"))
		}
		if v.kind != n.kind {
			return v
		}
	}
}

// nested is depth levels of arrays or objects around a number.
func nested(depth int, obj bool) *jnode {
	open, close := "[", "]"
	if obj {
		open, close = `{"a":`, "}"
	}
	return jraw(strings.Repeat(open, depth) + "1" + strings.Repeat(close, depth))
}

// mutations are the operators, each picked with equal odds.
var mutations = []mutation{
	{"type", func(rng *rand.Rand, doc *jnode, _ *mutContext) []byte {
		if p := pickPath(rng, doc, nil); p != nil {
			n, _, _ := doc.at(p)
			replace(doc, p, otherValue(rng, n))
		}
		return nil
	}},
	{"number", func(rng *rand.Rand, doc *jnode, _ *mutContext) []byte {
		if p := pickPath(rng, doc, isKind(jNum)); p != nil {
			replace(doc, p, jnum(edgeNumbers[rng.IntN(len(edgeNumbers))]))
		}
		return nil
	}},
	{"null", func(rng *rand.Rand, doc *jnode, _ *mutContext) []byte {
		if p := pickPath(rng, doc, nil); p != nil {
			replace(doc, p, jnull())
		}
		return nil
	}},
	{"string", func(rng *rand.Rand, doc *jnode, m *mutContext) []byte {
		if p := pickPath(rng, doc, isKind(jStr)); p != nil {
			ss := m.strings()
			s := jstr(ss[rng.IntN(len(ss))])
			s.rawCtl = rng.IntN(4) == 0
			replace(doc, p, s)
		}
		return nil
	}},
	{"key", func(rng *rand.Rand, doc *jnode, m *mutContext) []byte {
		if p := pickPath(rng, doc, isKind(jObj)); p != nil {
			o, _, _ := doc.at(p)
			if len(o.keys) > 0 {
				i := rng.IntN(len(o.keys))
				switch rng.IntN(3) {
				case 0:
					o.keys[i] = strings.ToUpper(o.keys[i])
				case 1:
					o.keys[i] = strings.ReplaceAll(o.keys[i], "_", "")
				default:
					ss := m.strings()
					o.keys[i] = ss[rng.IntN(len(ss))]
				}
			}
		}
		return nil
	}},
	{"duplicate_key", func(rng *rand.Rand, doc *jnode, _ *mutContext) []byte {
		if p := pickPath(rng, doc, isKind(jObj)); p != nil {
			o, _, _ := doc.at(p)
			if len(o.keys) > 0 {
				i := rng.IntN(len(o.keys))
				v := otherValue(rng, o.kids[i])
				if o.kids[i].kind == jNum {
					v = jnum(edgeNumbers[rng.IntN(len(edgeNumbers))])
				}
				o.keys = append(o.keys, o.keys[i])
				o.kids = append(o.kids, v)
				if rng.IntN(2) == 0 { // the duplicate first
					last := len(o.keys) - 1
					o.keys[i], o.keys[last] = o.keys[last], o.keys[i]
					o.kids[i], o.kids[last] = o.kids[last], o.kids[i]
				}
			}
		}
		return nil
	}},
	{"delete", func(rng *rand.Rand, doc *jnode, _ *mutContext) []byte {
		if p := pickPath(rng, doc, nil); p != nil {
			_, parent, i := doc.at(p)
			if parent.kind == jObj {
				parent.keys = append(parent.keys[:i], parent.keys[i+1:]...)
			}
			parent.kids = append(parent.kids[:i], parent.kids[i+1:]...)
		}
		return nil
	}},
	{"unknown_key", func(rng *rand.Rand, doc *jnode, m *mutContext) []byte {
		if p := pickPath(rng, doc, isKind(jObj)); p != nil {
			o, _, _ := doc.at(p)
			ss := m.strings()
			o.keys = append(o.keys, "x_"+strconv.Itoa(rng.IntN(1000)))
			o.kids = append(o.kids, jstr(ss[rng.IntN(len(ss))]))
		}
		return nil
	}},
	{"deep", func(rng *rand.Rand, doc *jnode, _ *mutContext) []byte {
		if p := pickPath(rng, doc, nil); p != nil {
			depths := []int{64, 1000, 10000, 100000, 400000}
			replace(doc, p, nested(depths[rng.IntN(len(depths))], rng.IntN(2) == 0))
		}
		return nil
	}},
	{"huge_array", func(rng *rand.Rand, doc *jnode, _ *mutContext) []byte {
		p := pickPath(rng, doc, isKind(jArr))
		if p == nil {
			return nil
		}
		a, _, _ := doc.at(p)
		if len(a.kids) == 0 {
			a.kids = []*jnode{jnum("1")}
		}
		sizes := []int{0, 33, 100, 1000, 20000}
		n := sizes[rng.IntN(len(sizes))]
		elem := 0
		for _, k := range a.kids {
			elem = max(elem, len(k.encode()))
		}
		for n > 0 && n*elem > maxDocBytes/2 {
			n /= 2
		}
		kids := make([]*jnode, n)
		for i := range kids {
			kids[i] = a.kids[i%len(a.kids)].clone()
		}
		a.kids = kids
		return nil
	}},
	{"annotations", func(rng *rand.Rand, doc *jnode, _ *mutContext) []byte {
		sa := doc.get("serviceArguments")
		if sa == nil || sa.kind != jObj {
			return nil
		}
		ann := jobj()
		switch rng.IntN(3) {
		case 0: // many keys
			for i := range 1 + rng.IntN(20000) {
				ann.keys = append(ann.keys, "k"+strconv.Itoa(i))
				ann.kids = append(ann.kids, jstr("v"))
			}
		case 1: // one huge value
			ann.set("big", jstr(strings.Repeat("a", 1<<(10+rng.IntN(10)))))
		default: // odd keys
			ann.set("", jstr(""))
			ann.set("\x00", jstr("\r\n"))
			ann.set(strings.Repeat("k", 5000), jnum("1"))
		}
		sa.set("annotations", ann)
		return nil
	}},
	{"bytes", func(rng *rand.Rand, doc *jnode, _ *mutContext) []byte {
		b := doc.encode()
		switch rng.IntN(7) {
		case 0:
			return b[:rng.IntN(len(b))]
		case 1:
			i := rng.IntN(len(b))
			b[i] ^= byte(1 << rng.IntN(8))
			return b
		case 2:
			return append([]byte("\xef\xbb\xbf"), b...)
		case 3:
			return append(b, []byte(`{"trailing":1}`)...)
		case 4:
			return append(append([]byte("["), b...), ']')
		case 5:
			return []byte(strconv.Quote(string(b)))
		default:
			i := rng.IntN(len(b))
			return append(b[:i:i], append([]byte{byte(rng.IntN(256))}, b[i:]...)...)
		}
	}},
}

// maxDocBytes bounds a mutated document before a further operator (a huge
// array of huge arrays would not fit in memory; llbd's 1 MiB body limit
// refuses far less).
const maxDocBytes = 4 << 20

// mutateRule builds mutated rule i: a template drawn from rng at spot,
// then one to three operators. It returns the body and what was done.
func mutateRule(rng *rand.Rand, m *mutContext) ([]byte, string) {
	t := templates[rng.IntN(len(templates))]
	doc, err := parseJSON([]byte(t.json(m.spot)))
	if err != nil {
		panic(fmt.Sprintf("template %s: %v", t.name, err)) // a broken template is a bug of this package
	}
	ops := []string{t.name}
	for range 1 + rng.IntN(3) {
		if len(doc.encode()) > maxDocBytes {
			break
		}
		op := mutations[rng.IntN(len(mutations))]
		ops = append(ops, op.name)
		if raw := op.apply(rng, doc, m); raw != nil {
			return raw, strings.Join(ops, "+")
		}
	}
	return doc.encode(), strings.Join(ops, "+")
}

package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"pgregory.net/rapid"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rule"
)

// The one-rule-model property, over the whole field space: every rule that
// rule.Validate accepts compiles and starts (its actors service and its
// handler come up; only the documented L4/TLS/range rules are stored but not
// served), and every rejection names a field of the model. A rule REST
// acknowledged once failed to start (fc_ep_max_inflight 100000); this is the
// test that would have caught it.

// pick draws one of vs.
func pick[T any](t *rapid.T, label string, vs ...T) T {
	return vs[rapid.IntRange(0, len(vs)-1).Draw(t, label)]
}

// Boundary values the checks care about.
var (
	ints     = []int64{-1, 0, 1, 2, 3, 8, 16, 64, 65, 100, 255, 256, 4096, 5557, 8998, 65535, 65536, 99999, 100000, 100001, 1<<31 - 1, 1 << 32}
	ips      = []string{"10.0.0.1", "10.0.0.2", "127.0.0.1", "192.0.2.7", "::1", "2001:db8::9", "0.0.0.0", "::", "fe80::1%eth0", "x", ""}
	strs     = []string{"", "x", "/health", "/x\r\ny", "a b", "X-Session-ID", "cookie:sid", "query:s", "basic-auth", "cookie:", "PING\r\n"}
	probes   = []string{"", "http", "https", "tcp", "udp", "sctp", "ping", "none", "x"}
	algos    = []string{"", rule.HashSHA256CBOR, rule.HashXXHashCBOR, rule.HashSHA256SGLang, rule.HashBlockHashTRTLLM, "md5"}
	engines  = []string{"", rule.EngineVLLM, rule.EngineSGLang, rule.EngineTRTLLM, rule.EngineLlamaCPP, "x"}
	inflight = []int64{0, 1, 8, 99999, 100000}
	codes    = []string{"", "200", "200,202", "200-204", "204-200", "600"}
)

// often draws usual most of the time and one of the others (boundaries,
// invalid values) now and then, so that both accepted and refused rules
// cover the whole field space.
// gen draws one rule. How often a field leaves its usual value is drawn
// once per rule (wild, in percent): some rules are entirely usual, some have
// a field or two off, some are all over the place.
type gen struct {
	t    *rapid.T
	wild int
}

// often draws usual, or now and then (wild %) one of others.
func often[T any](g *gen, label string, usual T, others ...T) T {
	if len(others) == 0 || rapid.IntRange(0, 99).Draw(g.t, label+"~") >= g.wild {
		return usual
	}
	return pick(g.t, label, others...)
}

// optional draws an optional field: absent most of the time, else one of
// valid, or now and then (wild %) one of invalid.
func optional[T any](g *gen, label string, valid []T, invalid ...T) *T {
	if rapid.IntRange(0, 99).Draw(g.t, label+"?") < 70 {
		return nil
	}
	v := often(g, label, pick(g.t, label+"!", valid...), invalid...)
	return &v
}

// genEntry draws a rule over the whole field space, valid or not: a shape
// (single pool, single pool with KV-exact, P/D with or without KV-exact),
// then every field, usually consistent with the shape, sometimes not.
func genEntry(t *rapid.T) *rule.LoadbalanceEntry {
	g := &gen{t: t, wild: rapid.SampledFrom([]int{0, 0, 1, 2, 5, 30}).Draw(t, "wild")}
	shape := pick(t, "shape", "single", "singleKV", "pd", "pdKV")
	pd := shape == "pd" || shape == "pdKV"
	sa := &rule.ServiceArguments{}
	sa.ExternalIP = often(g, "vip", "10.0.0.1", ips...)
	sa.Port = new(often[int64](g, "port", 2020, 0, 1, 65535, 65536, -1))
	sa.PortMax = often[int64](g, "portMax", 0, 2021, 10)
	sa.Protocol = often(g, "protocol", "tcp", "udp", "sctp", "icmp", "", "http")
	sa.Sel = often(g, "sel", pick[int64](t, "usualSel", 0, 1, 2, 3, 4, 8, 9, 10), -1, 5, 6, 7, 11)
	sa.Mode = often[int64](g, "mode", 4, 0, 1, 2, 3, 5, 6)
	sa.Security = often[int64](g, "security", 0, 1, 2, 3)
	sa.Host = pick(t, "host", "", "", "example")
	sa.Block = often[int64](g, "block", 0, 7)
	sa.ProbeType = often(g, "probetype", "", probes...)
	sa.ProbePort = often[int64](g, "probeport", 0, 8000, 70000)
	if sa.ProbeType == rule.ProbeHTTP || sa.ProbeType == rule.ProbeHTTPS || sa.ProbeType == rule.ProbeTCP {
		sa.ProbePort = often[int64](g, "probeport!", 8000, 0)
	}
	sa.ProbeReq = often(g, "probereq", "", strs...)
	sa.ProbeTimeout = often[int64](g, "probeTimeout", 0, 1, 5, 86400, 86401)
	sa.ProbeRetries = often[int64](g, "probeRetries", 0, 1, 100, 101, -1)
	sa.InactiveTimeOut = often[int64](g, "inactiveTimeOut", 0, 10, 86401)
	sa.AdminStateUp = optional(g, "adminStateUp", []bool{true, false})
	sa.TimeoutMemberConnect = often[int64](g, "timeoutMemberConnect", 0, 1, 500, 1<<32)
	sa.TimeoutMemberData = often[int64](g, "timeoutMemberData", 0, 1, 2000, 1<<32)
	sa.SessionHeaderName = often(g, "session_header_name", "", "X-Session-ID", "cookie:sid", "query:s", "basic-auth", "cookie:", "a b")
	sa.BackendProtocol = optional(g, "backend_protocol", []string{"http1"}, "http2", "both", "x")
	sa.SSEMode = rapid.Bool().Draw(t, "sse_mode")
	sa.MaxStreamDurationSec = often[int64](g, "max_stream_duration_sec", 0, 1, 86400, -1)
	sa.CBEnable = rapid.Bool().Draw(t, "cb_enable")
	sa.ChwblPrefixHashLevel = optional(g, "chwbl_prefix_hash_level", []int64{1, 2, 3}, 0, 4)
	sa.ChwblPrefixHashFlags = optional(g, "chwbl_prefix_hash_flags", []int64{0, 9, 255}, 256, -1)
	sa.ChwblMeanLoadFactor = often[int64](g, "chwbl_mean_load_factor", 0, 99, 100, 300, 301)
	sa.ChwblReplication = often[int64](g, "chwbl_replication", 0, 1, 1024, 1025)
	sa.PDDisaggMode = often(g, "pd_disagg_mode", pd, !pd)
	sa.PDCacheAwareMode = often(g, "pd_cache_aware_mode", pd && rapid.Bool().Draw(t, "aware"), true)
	sa.PDSessionTTLSec = often[int64](g, "pd_session_ttl_sec", 0, 1, 300, -1)
	sa.PDCacheThreshold = often[int64](g, "pd_cache_threshold", 0, 20, 100, 101)
	sa.PDBalanceAbsThreshold = often[int64](g, "pd_balance_abs_threshold", 0, 3, 255, 256)
	sa.PDBootstrapPort = often[int64](g, "pdBootstrapPort", 0, 8998)
	kv := map[string]int64{"single": 0, "singleKV": 3, "pd": 0, "pdKV": 1}[shape]
	sa.KVExactMode = often(g, "kvExactMode", kv, 0, 1, 2, 3, 4, -1)
	sa.KVBlockSize = often(g, "kvBlockSize", pick[int64](t, "usualBlock", 0, 16, 32), ints...)
	sa.KVHashAlgo = often(g, "kvHashAlgo", "", algos...)
	sa.KVZmqPort = often[int64](g, "kvZmqPort", 0, 5557, 65535, 65536)
	sa.KVWarmupSec = often[int64](g, "kvWarmupSec", 0, 1, 30, -1)
	sa.KVEngineType = often(g, "kvEngineType", "", engines...)
	sa.KVDpRankCount = often[int64](g, "kvDpRankCount", 0, 1, 2, 8, 9)
	sa.KVReplayPort = often[int64](g, "kvReplayPort", 0, 5558, 5600, 65535)
	sa.KVBlockKey = often(g, "kvBlockKey", "", "hash", "tokens", "x")
	sa.KVNoneHashSeed = optional(g, "kvNoneHashSeed", []string{"", "0", "42"})
	sa.FCMode = optional(g, "fc_mode", []string{"off", "observe", "enforce", "inherit"}, "", "x")
	sa.FCMaxOutstanding = optional(g, "fc_max_outstanding", inflight, ints...)
	sa.FCEpMaxInflight = optional(g, "fc_ep_max_inflight", inflight, ints...)
	sa.FCPrefillMaxInflight = optional(g, "fc_prefill_max_inflight", inflight, ints...)
	sa.FCDecodeMaxInflight = optional(g, "fc_decode_max_inflight", inflight, ints...)
	sa.FCMaxQueueDepth = optional(g, "fc_max_queue_depth", []int64{0, 1, 8, 64, 65, 65536}, ints...)
	sa.FCMaxQueueWaitMs = optional(g, "fc_max_queue_wait_ms", []int64{0, 1, 5000, 3600000}, ints...)
	sa.FCTelemetryStaleMs = optional(g, "fc_telemetry_stale_ms", []int64{0, 1, 30000, 3600000}, ints...)
	sa.FCAdaptive = optional(g, "fc_adaptive", []string{"on", "off", "inherit"}, "", "x")
	sa.FCExposeHeaders = optional(g, "fc_expose_headers", []string{"on", "off", "inherit"}, "", "x")
	sa.FCTenantMaxSharePct = optional(g, "fc_tenant_max_share_pct", []int64{0, 50, 100}, 101, -1)
	e := &rule.LoadbalanceEntry{ServiceArguments: sa}
	n := often(g, "endpoints", pick(t, "usualEndpoints", 2, 3, 4, 8), 0, 1, 32, 33)
	// Endpoint fields are many; each strays less often than a rule's.
	ge := &gen{t: t, wild: g.wild / 5}
	for i := 0; i < n; i++ {
		role := int64(0)
		if pd {
			role = int64(1 + i%2) // prefill, decode, prefill, ...
		}
		ip := often(ge, "endpointIP", "10.0.1."+strconv.Itoa(1+i%250), ips...)
		ep := rule.Endpoint{
			EndpointIP:     &ip,
			TargetPort:     new(often[int64](ge, "targetPort", 8000, 0, 65536, 8100, 8200)),
			Weight:         new(often[int64](ge, "weight", 1, 0, 255, 256, -1)),
			EpRole:         often(ge, "ep_role", role, 0, 1, 2, 3),
			NixlPort:       often[int64](ge, "nixl_port", 0, 5600, 65536),
			Backup:         optional(ge, "backup", []bool{true, false}),
			MonitorAddress: often(ge, "monitorAddress", "", "10.0.0.9", "x"),
			HTTPMethod:     often(ge, "httpMethod", "", "GET", "get", "PO ST"),
			URLPath:        often(ge, "urlPath", "", strs...),
			ExpectedCodes:  often(ge, "expectedCodes", "", codes...),
			HTTPVersion:    often(ge, "httpVersion", "", "1.0", "1.1", "2"),
			DomainName:     often(ge, "domainName", "", "w.example", "a b"),
		}
		e.Endpoints = append(e.Endpoints, ep)
	}
	return e
}

// jsonKeys lists the JSON keys of a struct type, embedded structs flattened.
func jsonKeys(t reflect.Type, into map[string]bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous {
			jsonKeys(f.Type, into)
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" {
			into[name] = true
		}
	}
}

// namesAField reports whether a problem's field is a path into the model.
func namesAField(field string, saKeys, epKeys map[string]bool) bool {
	parts := strings.Split(field, ".")
	switch parts[0] {
	case "endpoints":
		if len(parts) == 1 {
			return true
		}
		_, err := strconv.Atoi(parts[1])
		return err == nil && len(parts) == 3 && epKeys[parts[2]]
	case "serviceArguments":
		return len(parts) == 1 || saKeys[parts[1]]
	case "secondaryIPs", "secondaryVIPs", "allowedSources":
		return true
	}
	return false
}

// nopFeeds stands in for the KV feeds (the property is about configuration,
// not about ZMQ).
func nopFeeds(context.Context, actors.FeedSpec, func(inventory.Update)) actors.FeedHandle {
	return nopFeed{done: closedChan()}
}

type nopFeed struct{ done chan struct{} }

func (f nopFeed) Stats() inventory.FeedStats { return inventory.FeedStats{} }
func (f nopFeed) Done() <-chan struct{}      { return f.done }

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func TestProperty_EveryAcceptedRuleCompilesAndStarts_EveryRejectionNamesItsField(t *testing.T) {
	saKeys, epKeys := map[string]bool{}, map[string]bool{}
	jsonKeys(reflect.TypeOf(rule.ServiceArguments{}), saKeys)
	jsonKeys(reflect.TypeOf(rule.Endpoint{}), epKeys)
	dp := newTestDataPlane(t)
	var accepted, served int
	rapid.Check(t, func(t *rapid.T) {
		e := genEntry(t)
		e.ServiceArguments.Oper = 0 // attach and detach are merges, not rules
		if err := rule.Validate(e); err != nil {
			var ve *rule.ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("rejection %v is not a list of problems", err)
			}
			for _, p := range ve.Problems {
				if !namesAField(p.Field, saKeys, epKeys) {
					t.Fatalf("problem %q names %q, not a field of the rule", p.Msg, p.Field)
				}
			}
			return
		}
		accepted++
		r, err := rule.NormalizeEntry(e)
		if err != nil {
			t.Fatalf("accepted rule does not normalize: %v", err)
		}
		_, err = rule.Compile(&r, rule.Defaults{})
		if errors.Is(err, rule.ErrNotServed) {
			return
		}
		if err != nil {
			t.Fatalf("accepted rule does not compile: %v", err)
		}
		served++
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dp.Apply(ctx, r); err != nil {
			t.Fatalf("accepted rule %s does not start: %v", r.Key, err)
		}
		if st, ok := dp.Status(r.Key); !ok || st.Operating == restapi.OperatingOffline {
			t.Fatalf("started rule %s has no live status: %+v", r.Key, st)
		}
		if err := dp.Remove(ctx, r.Key); err != nil {
			t.Fatalf("remove %s: %v", r.Key, err)
		}
	})
	t.Logf("%d rules accepted, %d of them served", accepted, served)
	if served == 0 {
		t.Fatal("no generated rule was served: the generator does not reach the data plane")
	}
}

// The largest block the rule accepts is the largest the hash chain
// computes (the two packages may not import each other).
func TestLimits_BlockSizeAgreesAcrossPackages(t *testing.T) {
	if ladder.MaxKVBlockSize != inventory.MaxBlockSize {
		t.Fatalf("ladder.MaxKVBlockSize %d, inventory.MaxBlockSize %d; want them equal", ladder.MaxKVBlockSize, inventory.MaxBlockSize)
	}
}

// The example: REST said Success, then the ladder refused the cap
// (0–99999) and the listener never started. It now runs.
func TestExample_AnAdmissionCapOf100000Runs(t *testing.T) {
	body := `{"serviceArguments":{"externalIP":"10.0.0.1","port":2020,"protocol":"tcp","mode":4,` +
		`"pd_disagg_mode":true,"fc_mode":"enforce","fc_ep_max_inflight":100000},` +
		`"endpoints":[{"endpointIP":"10.0.0.2","targetPort":8100,"weight":1,"ep_role":1},{"endpointIP":"10.0.0.3","targetPort":8200,"weight":1,"ep_role":2}]}`
	var e rule.LoadbalanceEntry
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatal(err)
	}
	if err := rule.Validate(&e); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	r, err := rule.NormalizeEntry(&e)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rule.Compile(&r, rule.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	dp := newTestDataPlane(t)
	if err := dp.Apply(context.Background(), r); err != nil {
		t.Fatalf("the rule does not start: %v", err)
	}
	if got := c.Spec.Admission.MaxInflightPerEP; got != 100000 {
		t.Fatalf("admission cap %d; want 100000", got)
	}
}

// newTestDataPlane is a daemon's data plane with the KV feeds stubbed out,
// closed at the end of the test.
func newTestDataPlane(t *testing.T) *DataPlane {
	t.Helper()
	dp, err := New(Config{Log: zerolog.Nop(), Env: ladder.DefaultEnv(), Feeds: nopFeeds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dp.Close(ctx)
	})
	return dp
}

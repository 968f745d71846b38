package restapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/llbproject/llb/rule"
)

// TestPOST_ValidationRules posts one body per validation rule through the real
// HTTP handler and checks the status, the body's code, the field it names and
// the message. Each rule is a row; every row runs against a fresh server.
func TestPOST_ValidationRules(t *testing.T) {
	type row struct {
		name       string
		give       func(t testing.TB) entry
		raw        string // used instead of give when set
		wantStatus int
		wantCode   int    // body "code"
		wantField  string // must be listed in body "fields"
		wantMsg    string // substring of body "result"
		wantAlso   []string
	}
	const (
		ok   = http.StatusOK
		bad  = http.StatusBadRequest
		unpr = http.StatusUnprocessableEntity
	)
	rows := []row{
		// ---- accepted shapes ----
		{name: "pd example accepted", give: pd, wantStatus: ok},
		{name: "chwbl example with duplicate endpoints accepted", give: chwbl, wantStatus: ok},
		{name: "l4 dnat rule accepted", give: l4, wantStatus: ok},
		{name: "unknown keys ignored", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.noSuchKey", 1).set("serviceArguments.kv_exact_mode", 9).set("endpoints.0.epRole", 7)
		}, wantStatus: ok},
		{name: "keys match case-insensitively", give: func(t testing.TB) entry {
			return single(t).del("serviceArguments.port").set("serviceArguments.PORT", 3000).set("serviceArguments.KVEXACTMODE", 3)
		}, wantStatus: ok},
		{name: "icmp rule needs no port", give: func(t testing.TB) entry {
			return l4(t).set("serviceArguments.protocol", "icmp").del("serviceArguments.port")
		}, wantStatus: ok},
		{name: "dsr with hash selector accepted", give: func(t testing.TB) entry {
			return l4(t).set("serviceArguments.mode", 3).set("serviceArguments.sel", 1).set("endpoints.0.targetPort", 3000)
		}, wantStatus: ok},
		{name: "egress rule may use the unspecified vip", give: func(t testing.TB) entry {
			return l4(t).set("serviceArguments.externalIP", "0.0.0.0").set("serviceArguments.egress", true)
		}, wantStatus: ok},
		{name: "hostonearm uses the unspecified vip", give: func(t testing.TB) entry {
			return l4(t).set("serviceArguments.externalIP", "::").set("serviceArguments.mode", 5).set("endpoints.0.endpointIP", "::1")
		}, wantStatus: ok},
		{name: "prefix hash level allowed with gpuaware", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.sel", 9).set("serviceArguments.chwbl_prefix_hash_level", 2)
		}, wantStatus: ok},
		{name: "single pool kv exact mode 3 with llb extensions accepted", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.kvExactMode", 3).set("serviceArguments.kvNoneHashSeed", "").
				set("serviceArguments.kvReplayPort", 5600).set("serviceArguments.kvBlockKey", "tokens").set("serviceArguments.sel", 8)
		}, wantStatus: ok},
		{name: "admission fields accepted on fullproxy", give: func(t testing.TB) entry {
			return pd(t).set("serviceArguments.fc_mode", "enforce").set("serviceArguments.fc_prefill_max_inflight", 8).
				set("serviceArguments.fc_max_queue_depth", 64).set("serviceArguments.fc_adaptive", "inherit")
		}, wantStatus: ok},
		{name: "p/d keeps role-less rescue endpoints", give: func(t testing.TB) entry {
			e := pd(t)
			eps := e["endpoints"].([]any)
			e["endpoints"] = append(eps, map[string]any{"endpointIP": "127.0.0.9", "targetPort": 8300, "weight": 1})
			return e
		}, wantStatus: ok},

		// ---- malformed bodies: 400 ----
		{name: "malformed json names the offset", raw: `{"serviceArguments": {"port": }`, wantStatus: bad, wantCode: 400, wantMsg: "malformed JSON at byte offset 31 (line 1, column 31): invalid character '}'"},
		{name: "truncated json", raw: `{"serviceArguments": {"port": 1`, wantStatus: bad, wantCode: 400, wantMsg: "malformed JSON"},
		{name: "empty body", raw: " ", wantStatus: bad, wantCode: 400, wantMsg: "request body is empty"},
		{name: "top-level array", raw: `[1,2]`, wantStatus: bad, wantCode: 400, wantMsg: "body must be a JSON object"},
		{name: "multi-line body reports the line", raw: "{\n  \"serviceArguments\": {\n    \"port\": 2020,,\n  }\n}", wantStatus: bad, wantCode: 400, wantMsg: "(line 3, column 18)"},
		{name: "trailing data", raw: singleFixture + ` {}`, wantStatus: bad, wantCode: 400, wantMsg: "unexpected data after the top-level object"},

		// ---- wrong JSON types: 422 / 600, all reported ----
		{name: "string where integer", give: func(t testing.TB) entry { return single(t).set("serviceArguments.port", "abc") },
			wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "serviceArguments.port", wantMsg: "serviceArguments.port in body must be of type integer, got string \"abc\""},
		{name: "every wrong type reported", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.port", true).set("endpoints.1.weight", "heavy")
		}, wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "endpoints.1.weight", wantMsg: "serviceArguments.port in body must be of type integer, got boolean true; endpoints.1.weight in body must be of type integer"},
		{name: "fraction where integer", give: func(t testing.TB) entry { return single(t).set("serviceArguments.sel", 1.5) },
			wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "serviceArguments.sel", wantMsg: "must be an integer within int64"},
		{name: "object where array", give: func(t testing.TB) entry { return single(t).set("endpoints", map[string]any{}) },
			wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "endpoints", wantMsg: "endpoints in body must be of type array, got object"},
		{name: "number where string", give: func(t testing.TB) entry { return single(t).set("serviceArguments.externalIP", 127) },
			wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "serviceArguments.externalIP", wantMsg: "must be of type string"},
		{name: "null admission field refused", give: func(t testing.TB) entry { return single(t).set("serviceArguments.fc_mode", nil) },
			wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "serviceArguments.fc_mode", wantMsg: "serviceArguments.fc_mode in body must not be null"},

		// ---- schema: required, enum, range: 422 ----
		{name: "serviceArguments required", give: func(t testing.TB) entry { return single(t).del("serviceArguments") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "serviceArguments", wantMsg: "serviceArguments in body is required"},
		{name: "externalIP required", give: func(t testing.TB) entry { return single(t).del("serviceArguments.externalIP") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "serviceArguments.externalIP", wantMsg: "serviceArguments.externalIP in body is required"},
		{name: "protocol required", give: func(t testing.TB) entry { return single(t).del("serviceArguments.protocol") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "serviceArguments.protocol", wantMsg: "serviceArguments.protocol in body is required"},
		{name: "protocol enum is case-sensitive", give: func(t testing.TB) entry { return single(t).set("serviceArguments.protocol", "TCP") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.protocol", wantMsg: "should be one of [tcp udp sctp icmp]"},
		{name: "port required for tcp", give: func(t testing.TB) entry { return single(t).del("serviceArguments.port") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "serviceArguments.port", wantMsg: "serviceArguments.port in body is required"},
		{name: "port above uint16", give: func(t testing.TB) entry { return single(t).set("serviceArguments.port", 70000) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.port", wantMsg: "should be less than or equal to 65535"},
		{name: "port negative", give: func(t testing.TB) entry { return single(t).set("serviceArguments.port", -1) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.port", wantMsg: "should be greater than or equal to 0"},
		{name: "portMax above uint16", give: func(t testing.TB) entry { return single(t).set("serviceArguments.portMax", 70000) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.portMax"},
		{name: "sel outside 0-10", give: func(t testing.TB) entry { return single(t).set("serviceArguments.sel", 11) },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.sel", wantMsg: "serviceArguments.sel in body should be one of [0 1 2 3 4 5 6 7 8 9 10], got 11"},
		{name: "mode outside 0-5", give: func(t testing.TB) entry { return single(t).set("serviceArguments.mode", 6) },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.mode", wantMsg: "should be one of [0 1 2 3 4 5]"},
		{name: "security outside 0-2", give: func(t testing.TB) entry { return single(t).set("serviceArguments.security", 3) },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.security"},
		{name: "oper outside 0-2", give: func(t testing.TB) entry { return single(t).set("serviceArguments.oper", 3) },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.oper"},
		{name: "probetype enum", give: func(t testing.TB) entry { return single(t).set("serviceArguments.probetype", "tls-hello") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.probetype", wantMsg: "[tcp udp sctp http https ping none]"},
		{name: "probeport above uint16", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.probetype", "tcp").set("serviceArguments.probeport", 70000)
		}, wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.probeport"},
		{name: "probeTimeout negative", give: func(t testing.TB) entry { return single(t).set("serviceArguments.probeTimeout", -1) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.probeTimeout"},
		{name: "probeRetries negative", give: func(t testing.TB) entry { return single(t).set("serviceArguments.probeRetries", -1) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.probeRetries"},
		{name: "block above uint32", give: func(t testing.TB) entry { return single(t).set("serviceArguments.block", 4294967296) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.block"},
		{name: "inactiveTimeOut negative", give: func(t testing.TB) entry { return single(t).set("serviceArguments.inactiveTimeOut", -1) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.inactiveTimeOut"},
		{name: "connectionLimit above uint32", give: func(t testing.TB) entry { return single(t).set("serviceArguments.connectionLimit", 4294967296) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.connectionLimit"},
		{name: "member timeouts are uint32 ms", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.timeoutMemberConnect", -1).set("serviceArguments.timeoutMemberData", -1).set("serviceArguments.timeoutTcpInspect", -1)
		}, wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.timeoutTcpInspect"},
		{name: "hsts_max_age negative", give: func(t testing.TB) entry { return single(t).set("serviceArguments.hsts_max_age", -1) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.hsts_max_age"},
		{name: "path_match_mode enum", give: func(t testing.TB) entry { return single(t).set("serviceArguments.path_match_mode", "regex") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.path_match_mode", wantMsg: "[disabled prefix exact]"},
		{name: "backend_protocol enum", give: func(t testing.TB) entry { return single(t).set("serviceArguments.backend_protocol", "http3") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.backend_protocol", wantMsg: "[http1 http2 both]"},
		{name: "mtls client_cert_mode enum", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.mtls_frontend", map[string]any{"client_cert_mode": "maybe"})
		}, wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.mtls_frontend.client_cert_mode"},
		{name: "max_stream_duration_sec negative", give: func(t testing.TB) entry { return single(t).set("serviceArguments.max_stream_duration_sec", -1) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.max_stream_duration_sec"},
		{name: "backend_keepalive_interval_sec negative", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.backend_keepalive_interval_sec", -1)
		}, wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.backend_keepalive_interval_sec"},
		{name: "chwbl_prefix_hash_level enum", give: func(t testing.TB) entry { return chwbl(t).set("serviceArguments.chwbl_prefix_hash_level", 4) },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.chwbl_prefix_hash_level", wantMsg: "should be one of [1 2 3]"},
		{name: "chwbl_prefix_hash_flags above 255", give: func(t testing.TB) entry { return chwbl(t).set("serviceArguments.chwbl_prefix_hash_flags", 256) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.chwbl_prefix_hash_flags"},
		{name: "chwbl_mean_load_factor below 100", give: func(t testing.TB) entry { return chwbl(t).set("serviceArguments.chwbl_mean_load_factor", 99) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.chwbl_mean_load_factor", wantMsg: "greater than or equal to 100"},
		{name: "chwbl_mean_load_factor above 300", give: func(t testing.TB) entry { return chwbl(t).set("serviceArguments.chwbl_mean_load_factor", 301) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.chwbl_mean_load_factor"},
		{name: "chwbl_replication above 1024", give: func(t testing.TB) entry { return chwbl(t).set("serviceArguments.chwbl_replication", 1025) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.chwbl_replication"},
		{name: "pd_session_ttl_sec negative", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.pd_session_ttl_sec", -1) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.pd_session_ttl_sec"},
		{name: "pd_cache_threshold above 100", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.pd_cache_threshold", 101) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.pd_cache_threshold", wantMsg: "serviceArguments.pd_cache_threshold in body should be less than or equal to 100"},
		{name: "pd_balance_abs_threshold above uint8", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.pd_balance_abs_threshold", 256) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.pd_balance_abs_threshold"},
		{name: "pdBootstrapPort above uint16", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.pdBootstrapPort", 65536) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.pdBootstrapPort"},
		{name: "kvExactMode above 3", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.kvExactMode", 4) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.kvExactMode"},
		{name: "kvBlockSize below 1", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.kvBlockSize", -16) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.kvBlockSize", wantMsg: "greater than or equal to 1"},
		{name: "kvHashAlgo enum", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.kvHashAlgo", "md5") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.kvHashAlgo", wantMsg: "[sha256_cbor xxhash_cbor sha256_sglang blockhash_trtllm]"},
		{name: "kvZmqPort above 65535", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.kvZmqPort", 65536) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.kvZmqPort"},
		{name: "kvWarmupSec negative", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.kvWarmupSec", -1) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.kvWarmupSec"},
		{name: "kvEngineType enum", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.kvEngineType", "tgi") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.kvEngineType", wantMsg: "[vllm sglang trtllm llamacpp]"},
		{name: "kvDpRankCount above 8", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.kvDpRankCount", 9) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.kvDpRankCount"},
		{name: "kvReplayPort above 65535", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.kvReplayPort", 65536) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.kvReplayPort"},
		{name: "kvBlockKey enum", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.kvBlockKey", "bytes") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.kvBlockKey", wantMsg: "[hash tokens]"},
		{name: "fc_mode enum", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.fc_mode", "strict") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.fc_mode", wantMsg: "[off observe enforce inherit]"},
		{name: "fc_mode empty string", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.fc_mode", "") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.fc_mode"},
		{name: "fc_max_outstanding above 100000", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.fc_max_outstanding", 100001) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.fc_max_outstanding"},
		{name: "fc_ep_max_inflight negative", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.fc_ep_max_inflight", -1) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.fc_ep_max_inflight"},
		{name: "fc_max_queue_depth above 65536", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.fc_max_queue_depth", 65537) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.fc_max_queue_depth"},
		{name: "fc_max_queue_wait_ms above an hour", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.fc_max_queue_wait_ms", 3600001) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.fc_max_queue_wait_ms"},
		{name: "fc_tenant_max_share_pct above 100", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.fc_tenant_max_share_pct", 101) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.fc_tenant_max_share_pct"},
		{name: "fc_adaptive enum", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.fc_adaptive", "maybe") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.fc_adaptive", wantMsg: "[on off inherit]"},
		{name: "fc_expose_headers enum", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.fc_expose_headers", "yes") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.fc_expose_headers"},
		{name: "endpointIP required", give: func(t testing.TB) entry { return single(t).del("endpoints.0.endpointIP") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "endpoints.0.endpointIP", wantMsg: "endpoints.0.endpointIP in body is required"},
		{name: "targetPort required", give: func(t testing.TB) entry { return single(t).del("endpoints.1.targetPort") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "endpoints.1.targetPort"},
		{name: "weight required", give: func(t testing.TB) entry { return single(t).del("endpoints.0.weight") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "endpoints.0.weight", wantMsg: "endpoints.0.weight in body is required"},
		{name: "targetPort zero", give: func(t testing.TB) entry { return single(t).set("endpoints.0.targetPort", 0) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "endpoints.0.targetPort", wantMsg: "greater than or equal to 1"},
		{name: "targetPort above uint16", give: func(t testing.TB) entry { return single(t).set("endpoints.0.targetPort", 65536) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "endpoints.0.targetPort"},
		{name: "weight above uint8", give: func(t testing.TB) entry { return single(t).set("endpoints.0.weight", 256) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "endpoints.0.weight", wantMsg: "less than or equal to 255"},
		{name: "ep_role enum", give: func(t testing.TB) entry { return pd(t).set("endpoints.0.ep_role", 3) },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "endpoints.0.ep_role", wantMsg: "should be one of [0 1 2]"},
		{name: "nixl_port above uint16", give: func(t testing.TB) entry { return pd(t).set("endpoints.0.nixl_port", 65536) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "endpoints.0.nixl_port"},

		// ---- semantic: core ----
		{name: "externalIP not an ip", give: func(t testing.TB) entry { return single(t).set("serviceArguments.externalIP", "lb.local") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.externalIP", wantMsg: `malformed-service error: "lb.local" is not an IP address`},
		{name: "externalIP with ipv6 zone", give: func(t testing.TB) entry { return single(t).set("serviceArguments.externalIP", "fe80::1%eth0") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.externalIP", wantMsg: "zone"},
		{name: "unspecified vip needs egress or hostonearm", give: func(t testing.TB) entry { return single(t).set("serviceArguments.externalIP", "0.0.0.0") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.externalIP", wantMsg: "only allowed for egress rules or mode 5"},
		{name: "hostonearm needs the unspecified vip", give: func(t testing.TB) entry { return l4(t).set("serviceArguments.mode", 5) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.externalIP", wantMsg: "mode 5 (hostonearm) needs the unspecified VIP"},
		{name: "privateIP not an ip", give: func(t testing.TB) entry { return single(t).set("serviceArguments.privateIP", "x") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.privateIP", wantMsg: "malformed-service error"},
		{name: "icmp takes port 0", give: func(t testing.TB) entry { return l4(t).set("serviceArguments.protocol", "icmp") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.port", wantMsg: "icmp rules take port 0"},
		{name: "tcp needs a non-zero port", give: func(t testing.TB) entry { return single(t).set("serviceArguments.port", 0) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.port", wantMsg: "needs a port in 1..65535"},
		{name: "portMax below port", give: func(t testing.TB) entry { return single(t).set("serviceArguments.portMax", 2999) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.portMax", wantMsg: "serv-port-args range error: portMax 2999 is below port 3000"},
		{name: "sel 7 reserved", give: func(t testing.TB) entry { return single(t).set("serviceArguments.sel", 7) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "sel=7 is reserved"},
		{name: "sel 5 needs fullproxy", give: func(t testing.TB) entry { return l4(t).set("serviceArguments.sel", 5) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "sel=5 (n2) requires mode=4 (fullproxy), got mode 0"},
		{name: "sel 8 needs fullproxy", give: func(t testing.TB) entry { return l4(t).set("serviceArguments.sel", 8) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "sel=8 (chwbl) requires mode=4 (fullproxy)"},
		{name: "sel 9 needs fullproxy", give: func(t testing.TB) entry { return l4(t).set("serviceArguments.sel", 9) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "sel=9 (gpuaware) requires mode=4"},
		{name: "sel 10 needs fullproxy", give: func(t testing.TB) entry { return l4(t).set("serviceArguments.sel", 10) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "sel=10 (wrr-hash) requires mode=4"},
		{name: "sel 6 needs udp", give: func(t testing.TB) entry { return l4(t).set("serviceArguments.sel", 6) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "non-udp-n3-args error"},
		{name: "dsr needs hash selector (not LoxiLB's 200)", give: func(t testing.TB) entry {
			return l4(t).set("serviceArguments.mode", 3).set("endpoints.0.targetPort", 3000)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "Only Hash Selection criteria allowed for DSR mode"},
		{name: "dsr endpoints use the service port", give: func(t testing.TB) entry {
			return l4(t).set("serviceArguments.mode", 3).set("serviceArguments.sel", 1)
		}, wantStatus: bad, wantCode: 400, wantField: "endpoints.0.targetPort", wantMsg: "DSR (mode 3) endpoints must use the service port 3000, got 8000"},
		{name: "proxy protocol v2 needs tcp (not LoxiLB's 500)", give: func(t testing.TB) entry {
			return l4(t).set("serviceArguments.protocol", "udp").set("serviceArguments.proxyprotocolv2", true)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.proxyprotocolv2", wantMsg: "proxy-proto-v2 not tcp service error"},
		{name: "inactiveTimeOut above a day", give: func(t testing.TB) entry { return single(t).set("serviceArguments.inactiveTimeOut", 86401) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.inactiveTimeOut", wantMsg: "service-args error: inactiveTimeOut is at most 86400"},
		{name: "secondary ips need sctp", give: func(t testing.TB) entry {
			return single(t).set("secondaryIPs", []any{map[string]any{"secondaryIP": "127.0.0.5"}})
		}, wantStatus: bad, wantCode: 400, wantField: "secondaryIPs", wantMsg: "secondaryIP-args error: secondary IPs need protocol sctp"},
		{name: "at most 3 secondary ips", give: func(t testing.TB) entry {
			ips := []any{}
			for _, a := range []string{"127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8"} {
				ips = append(ips, map[string]any{"secondaryIP": a})
			}
			return l4(t).set("serviceArguments.protocol", "sctp").set("secondaryIPs", ips)
		}, wantStatus: bad, wantCode: 400, wantField: "secondaryIPs", wantMsg: "at most 3 secondary IPs, got 4"},
		{name: "secondary ip must parse", give: func(t testing.TB) entry {
			return l4(t).set("serviceArguments.protocol", "sctp").set("secondaryIPs", []any{map[string]any{"secondaryIP": "nope"}})
		}, wantStatus: bad, wantCode: 400, wantField: "secondaryIPs.0.secondaryIP", wantMsg: "malformed-secip error"},
		{name: "allowed source must be a prefix", give: func(t testing.TB) entry {
			return single(t).set("allowedSources", []any{map[string]any{"prefix": "10.0.0.0/33"}})
		}, wantStatus: bad, wantCode: 400, wantField: "allowedSources.0.prefix", wantMsg: "rule-allowed-src error"},

		// ---- semantic: probes ----
		{name: "connect probe needs a probeport", give: func(t testing.TB) entry { return single(t).set("serviceArguments.probetype", "http") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probeport", wantMsg: "probetype http needs a probeport"},
		{name: "ping probe takes no probeport", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.probetype", "ping").set("serviceArguments.probeport", 80)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probeport", wantMsg: "probetype ping takes no probeport"},
		{name: "probeport needs a probetype", give: func(t testing.TB) entry { return single(t).set("serviceArguments.probeport", 80) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probeport", wantMsg: "probeport 80 needs a probetype"},
		{name: "probe period at most a day", give: func(t testing.TB) entry { return single(t).set("serviceArguments.probeTimeout", 86401) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probeTimeout", wantMsg: "at most 86400"},
		{name: "probeRetries at most 100", give: func(t testing.TB) entry { return single(t).set("serviceArguments.probeRetries", 101) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probeRetries", wantMsg: "probeRetries is at most 100"},

		// ---- semantic: endpoints ----
		{name: "no endpoints", give: func(t testing.TB) entry { return single(t).set("endpoints", []any{}) },
			wantStatus: bad, wantCode: 400, wantField: "endpoints", wantMsg: "endpoints-range error: a rule needs 1 to 32 endpoints, got 0"},
		{name: "33 endpoints", give: func(t testing.TB) entry { return single(t).set("endpoints", endpoints(33)) },
			wantStatus: bad, wantCode: 400, wantField: "endpoints", wantMsg: "endpoints-range error: a rule needs 1 to 32 endpoints, got 33"},
		{name: "endpoint ip must parse", give: func(t testing.TB) entry { return single(t).set("endpoints.1.endpointIP", "worker-1") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.1.endpointIP", wantMsg: `malformed-lbep error: "worker-1" is not an IP address`},
		{name: "ipv4 vip cannot front ipv6 endpoint", give: func(t testing.TB) entry { return single(t).set("endpoints.0.endpointIP", "::1") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.endpointIP", wantMsg: "malformed-service nat46 error"},
		{name: "monitorAddress must parse", give: func(t testing.TB) entry { return single(t).set("endpoints.0.monitorAddress", "x") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.monitorAddress", wantMsg: "malformed-lbep error"},
		{name: "expectedCodes syntax", give: func(t testing.TB) entry { return single(t).set("endpoints.0.expectedCodes", "200-100") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.expectedCodes", wantMsg: `expectedCodes "200-100"`},
		{name: "httpVersion 1.0 or 1.1", give: func(t testing.TB) entry { return single(t).set("endpoints.0.httpVersion", "2") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.httpVersion", wantMsg: `httpVersion must be "1.0" or "1.1"`},
		{name: "httpMethod token", give: func(t testing.TB) entry { return single(t).set("endpoints.0.httpMethod", "get") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.httpMethod"},
		{name: "urlPath without CR/LF", give: func(t testing.TB) entry { return single(t).set("endpoints.0.urlPath", "/health\r\nX-Injected: 1") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.urlPath", wantMsg: "control character"},
		{name: "urlPath without spaces", give: func(t testing.TB) entry { return single(t).set("endpoints.0.urlPath", "/a b") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.urlPath"},
		{name: "http probereq without CR/LF", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.probetype", "http").set("serviceArguments.probeport", 8000).
				set("serviceArguments.probereq", "/health\n")
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probereq", wantMsg: "control character"},
		{name: "default-probe probereq without CR/LF", give: func(t testing.TB) entry { return single(t).set("serviceArguments.probereq", "/x\ry") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probereq"},
		{name: "ping probe on a served mode:4 rule", give: func(t testing.TB) entry { return single(t).set("serviceArguments.probetype", "ping") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probetype", wantMsg: "not supported on a mode:4 rule llb serves"},
		{name: "sel 5 on a served mode:4 rule", give: func(t testing.TB) entry { return single(t).set("serviceArguments.sel", 5) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "does not implement"},
		{name: "kvBlockSize above 4096", give: func(t testing.TB) entry { return single(t).set("serviceArguments.kvBlockSize", 100000) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.kvBlockSize"},
		{name: "tcp probereq may carry CR/LF (it is raw bytes)", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.probetype", "tcp").set("serviceArguments.probeport", 8000).
				set("serviceArguments.probereq", "PING\r\n")
		}, wantStatus: ok},
		{name: "domainName is a host name", give: func(t testing.TB) entry { return single(t).set("endpoints.0.domainName", "a b") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.domainName"},

		// ---- semantic: octavia / tls ----
		{name: "session header applies to rr or persist", give: func(t testing.TB) entry {
			return chwbl(t).set("serviceArguments.session_header_name", "X-Session-ID")
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.session_header_name", wantMsg: "applies to sel 0 (rr) or 3 (persist), got sel 8"},
		{name: "session header syntax", give: func(t testing.TB) entry { return single(t).set("serviceArguments.session_header_name", "cookie:") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.session_header_name", wantMsg: "must be a header name"},
		{name: "path_prefix starts with slash", give: func(t testing.TB) entry { return single(t).set("serviceArguments.path_prefix", "v1") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.path_prefix"},
		{name: "path_match_mode needs a prefix", give: func(t testing.TB) entry { return single(t).set("serviceArguments.path_match_mode", "exact") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.path_match_mode", wantMsg: "needs a path_prefix"},
		{name: "hsts needs tls", give: func(t testing.TB) entry { return single(t).set("serviceArguments.hsts_max_age", 3600) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.hsts_max_age", wantMsg: "hsts_max_age needs security 1"},
		{name: "mtls needs fullproxy", give: func(t testing.TB) entry {
			return l4(t).set("serviceArguments.security", 2).set("serviceArguments.mtls_backend", map[string]any{"verify_server_cert": true})
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode", wantMsg: "mTLS requires mode=fullproxy"},
		{name: "frontend mtls needs tls termination", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.mtls_frontend", map[string]any{"client_cert_mode": "required"})
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mtls_frontend", wantMsg: "frontend mTLS requires security=1"},
		{name: "backend mtls needs e2e tls", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.security", 1).set("serviceArguments.mtls_backend", map[string]any{"verify_server_cert": true})
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mtls_backend", wantMsg: "backend mTLS requires security=2"},

		// ---- semantic: LLM ----
		{name: "llm fields need fullproxy", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.mode", 0) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode",
			wantMsg: "pd-disagg requires mode=fullproxy; LLM fields pd_disagg_mode, pd_cache_aware_mode, kvExactMode, kvBlockSize, kvHashAlgo, kvZmqPort require mode=4 (fullproxy), got mode 0"},
		{name: "sse_mode needs fullproxy", give: func(t testing.TB) entry { return l4(t).set("serviceArguments.sse_mode", true) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode", wantMsg: "LLM fields sse_mode require mode=4"},
		{name: "cb_enable needs fullproxy", give: func(t testing.TB) entry { return l4(t).set("serviceArguments.cb_enable", true) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode", wantMsg: "cb_enable"},
		{name: "admission fields need fullproxy", give: func(t testing.TB) entry { return l4(t).set("serviceArguments.fc_max_outstanding", 10) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode", wantMsg: "fc_max_outstanding"},
		{name: "kv exact single-role needs fullproxy", give: func(t testing.TB) entry { return l4(t).set("serviceArguments.kvExactMode", 3) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode", wantMsg: "kv-exact single-role mode requires mode=fullproxy"},
		{name: "p/d needs a decode endpoint", give: func(t testing.TB) entry { return pd(t).set("endpoints.1.ep_role", 1) },
			wantStatus: bad, wantCode: 400, wantField: "endpoints",
			wantMsg: "pd-disagg requires at least 1 prefill (ep_role=1) and 1 decode (ep_role=2) endpoint; got 2 prefill and 0 decode"},
		{name: "p/d needs a prefill endpoint", give: func(t testing.TB) entry { return pd(t).set("endpoints.0.ep_role", 0) },
			wantStatus: bad, wantCode: 400, wantField: "endpoints", wantMsg: "got 0 prefill and 1 decode"},
		{name: "p/d needs http1 backends", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.backend_protocol", "http2") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.backend_protocol", wantMsg: "pd-disagg requires backend_protocol http1"},
		{name: "cache-aware needs p/d", give: func(t testing.TB) entry { return single(t).set("serviceArguments.pd_cache_aware_mode", true) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.pd_cache_aware_mode", wantMsg: "pd-cache-aware requires pd_disagg_mode=true"},
		{name: "p/d thresholds without p/d are stored and inert", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.pd_cache_threshold", 50).set("serviceArguments.pd_session_ttl_sec", 60).set("serviceArguments.pd_balance_abs_threshold", 4)
		}, wantStatus: ok}, // stored and inert without P/D, as in LoxiLB
		{name: "roles need p/d", give: func(t testing.TB) entry { return single(t).set("endpoints.0.ep_role", 1) },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.ep_role", wantMsg: "ep_role 1 needs pd_disagg_mode=true"},
		{name: "nixl port without p/d is stored and inert", give: func(t testing.TB) entry { return single(t).set("endpoints.0.nixl_port", 5600) },
			wantStatus: ok},
		{name: "per-role admission caps without p/d are stored and inert", give: func(t testing.TB) entry { return single(t).set("serviceArguments.fc_decode_max_inflight", 4) },
			wantStatus: ok},
		{name: "kv exact mode 1 needs p/d", give: func(t testing.TB) entry { return single(t).set("serviceArguments.kvExactMode", 1) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvExactMode",
			wantMsg: "kv-exact zmq mode requires pd_disagg_mode=true (use kvExactMode=3 for a single pool)"},
		{name: "kv exact mode 3 forbids p/d", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.kvExactMode", 3) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvExactMode",
			wantMsg: "kv-exact single-role mode is incompatible with pd-disagg (use kvExactMode=1 for P/D)"},
		{name: "kv exact mode 2 reserved", give: func(t testing.TB) entry { return single(t).set("serviceArguments.kvExactMode", 2) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvExactMode", wantMsg: "kvExactMode 2 (nats) is reserved"},
		{name: "kv tuning with kv exact off is stored and inert", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.kvZmqPort", 5557).set("serviceArguments.kvNoneHashSeed", "0")
		}, wantStatus: ok},
		{name: "every kv tuning key is accepted with kv exact off", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.kvBlockSize", 32).set("serviceArguments.kvHashAlgo", "sha256_cbor").
				set("serviceArguments.kvWarmupSec", 5).set("serviceArguments.kvDpRankCount", 2).
				set("serviceArguments.kvReplayPort", 5600).set("serviceArguments.kvBlockKey", "tokens")
		}, wantStatus: ok},
		{name: "llamacpp keeps kv defaults", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.kvEngineType", "llamacpp").set("serviceArguments.kvBlockSize", 32).
				set("serviceArguments.kvZmqPort", 6000).set("serviceArguments.kvDpRankCount", 2).set("serviceArguments.kvHashAlgo", "xxhash_cbor")
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvBlockSize", wantMsg: "kvBlockSize is unsupported for llamacpp",
			wantAlso: []string{"kvZmqPort is unsupported for llamacpp", "kvDpRankCount is unsupported for llamacpp", "kvHashAlgo is unsupported for llamacpp"}},
		{name: "plain sglang proxy rule accepted", give: func(t testing.TB) entry { return single(t).set("serviceArguments.kvEngineType", "sglang") },
			wantStatus: ok},
		{name: "vllm rejects the sglang hash", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.kvHashAlgo", "sha256_sglang") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvHashAlgo",
			wantMsg: `kv-hash-algo "sha256_sglang" is incompatible with kv-engine-type "vllm" (omit kvHashAlgo to take the engine default "sha256_cbor")`},
		{name: "sglang rejects the cbor hash", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.kvEngineType", "sglang").set("serviceArguments.kvExactMode", 3).set("serviceArguments.kvHashAlgo", "sha256_cbor")
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvHashAlgo", wantMsg: `incompatible with kv-engine-type "sglang"`},
		{name: "trtllm has no zmq port", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.kvEngineType", "trtllm").set("serviceArguments.kvExactMode", 3).set("serviceArguments.kvZmqPort", 6000)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvZmqPort", wantMsg: "kvZmqPort is not used by trtllm; omit it"},
		{name: "trtllm has no dp ranks", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.kvEngineType", "trtllm").set("serviceArguments.kvExactMode", 3).set("serviceArguments.kvDpRankCount", 2)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvDpRankCount", wantMsg: "kvDpRankCount is not used by trtllm"},
		{name: "llamacpp has no kv events", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.kvEngineType", "llamacpp").set("serviceArguments.kvExactMode", 3)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvExactMode", wantMsg: "kvExactMode is unsupported for llamacpp"},
		{name: "llamacpp has no p/d", give: func(t testing.TB) entry {
			return pd(t).set("serviceArguments.kvEngineType", "llamacpp").set("serviceArguments.kvExactMode", 0).
				del("serviceArguments.kvZmqPort").del("serviceArguments.kvHashAlgo").del("serviceArguments.kvBlockSize")
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.pd_disagg_mode", wantMsg: "pd_disagg_mode is unsupported for llamacpp"},
		{name: "bootstrap port only for sglang p/d", give: func(t testing.TB) entry { return pd(t).set("serviceArguments.pdBootstrapPort", 8998) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.pdBootstrapPort",
			wantMsg: "pd-bootstrap-port requires pd_disagg_mode=true and kv-engine-type sglang"},
		{name: "sglang p/d not implemented by llb", give: func(t testing.TB) entry {
			return pd(t).set("serviceArguments.kvEngineType", "sglang").del("serviceArguments.kvHashAlgo").set("serviceArguments.pdBootstrapPort", 8998)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvEngineType", wantMsg: "not implemented by llb"},
		{name: "ring fields with another selector are stored and inert", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.sel", 9).set("serviceArguments.chwbl_mean_load_factor", 150).set("serviceArguments.chwbl_replication", 64)
		}, wantStatus: ok},
		{name: "prefix hash fields with another selector are stored and inert", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.chwbl_enable_cache_salt", true).set("serviceArguments.chwbl_prefix_hash_level", 1).
				set("serviceArguments.chwbl_prefix_hash_flags", 3)
		}, wantStatus: ok},
		{name: "ring fields accepted with wrr-hash", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.sel", 10).set("serviceArguments.chwbl_mean_load_factor", 125).set("serviceArguments.chwbl_replication", 256).
				set("serviceArguments.chwbl_prefix_hash_flags", 0).set("serviceArguments.chwbl_enable_cache_salt", false)
		}, wantStatus: ok},
		{name: "dp rank ports fit in 16 bits", give: func(t testing.TB) entry {
			return pd(t).set("serviceArguments.kvZmqPort", 65535).set("serviceArguments.kvDpRankCount", 2)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvDpRankCount", wantMsg: "needs ports up to 65536"},
		{name: "replay ports do not overlap event ports", give: func(t testing.TB) entry {
			return pd(t).set("serviceArguments.kvDpRankCount", 4).set("serviceArguments.kvReplayPort", 5559)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvReplayPort", wantMsg: "kvReplayPort 5559 overlaps the KV-event ports 5557..5560"},

		// ---- all problems at once ----
		{name: "schema and semantic problems reported together", give: func(t testing.TB) entry {
			return pd(t).set("serviceArguments.sel", 11).set("endpoints.0.weight", 300).set("serviceArguments.mode", 0)
		}, wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.mode",
			wantMsg: "serviceArguments.sel in body should be one of [0 1 2 3 4 5 6 7 8 9 10], got 11; endpoints.0.weight in body should be less than or equal to 255, got 300; serviceArguments.mode: pd-disagg requires mode=fullproxy"},
		{name: "several semantic problems reported together", give: func(t testing.TB) entry {
			return single(t).set("serviceArguments.externalIP", "nope").set("serviceArguments.sel", 7).set("endpoints.0.endpointIP", "x")
		}, wantStatus: bad, wantCode: 400, wantField: "endpoints.0.endpointIP",
			wantMsg: "serviceArguments.externalIP: malformed-service error: \"nope\" is not an IP address; serviceArguments.sel: sel=7 is reserved"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			ts := started(t)
			body := r.raw
			if body == "" {
				body = r.give(t).json(t)
			}
			res := ts.post(body)
			if res.status != r.wantStatus {
				t.Fatalf("status: got %d; want %d; body %s", res.status, r.wantStatus, res.body)
			}
			if r.wantStatus == http.StatusOK {
				if res.body != `{"result":"Success"}`+"\n" {
					t.Fatalf("body: got %s; want Success", res.body)
				}
				return
			}
			b := res.errBody(t)
			if b.Code != r.wantCode {
				t.Errorf("code: got %d; want %d", b.Code, r.wantCode)
			}
			if r.wantField != "" && !slices.Contains(b.Fields, r.wantField) {
				t.Errorf("fields: got %v; want it to list %q", b.Fields, r.wantField)
			}
			for _, m := range append([]string{r.wantMsg}, r.wantAlso...) {
				if !strings.Contains(b.Result, m) {
					t.Errorf("result: got %q; want it to contain %q", b.Result, m)
				}
			}
			wantClass := map[int]string{bad: msgMalformed}[r.wantStatus]
			if wantClass != "" && b.Message != wantClass {
				t.Errorf("message: got %q; want %q", b.Message, wantClass)
			}
			if r.wantStatus == unpr && !strings.Contains(b.Message, " in body ") {
				t.Errorf("message: got %q; want the schema problems", b.Message)
			}
			if n := len(ts.all()); n != 0 {
				t.Errorf("rules after a refused POST: got %d; want 0", n)
			}
		})
	}
}

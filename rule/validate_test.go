package rule_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

// TestValidate_Rules validates one entry per validation rule, decoded as
// the REST API decodes it, and checks the problems: the HTTP status class
// they are answered with, the code (the first schema problem's 6xx, else the
// status), the field named and the message. restapi's TestPOST_ValidationRules
// covers decoding and the rendering of these answers.
func TestValidate_Rules(t *testing.T) {
	type row struct {
		name       string
		give       func(t testing.TB) ruletest.Entry
		wantStatus int
		wantCode   int    // the first schema problem's code, else the status
		wantField  string // must be among the problems' fields
		wantMsg    string // substring of the problems' messages
		wantAlso   []string
	}
	const (
		ok   = http.StatusOK
		bad  = http.StatusBadRequest
		unpr = http.StatusUnprocessableEntity
	)
	rows := []row{
		// ---- accepted shapes ----
		{name: "chwbl example with duplicate endpoints accepted", give: ruletest.CHWBLEntry, wantStatus: ok},
		{name: "l4 dnat rule accepted", give: ruletest.L4Entry, wantStatus: ok},
		{name: "icmp rule needs no port", give: func(t testing.TB) ruletest.Entry {
			return ruletest.L4Entry(t).Set("serviceArguments.protocol", "icmp").Del("serviceArguments.port")
		}, wantStatus: ok},
		{name: "dsr with hash selector accepted", give: func(t testing.TB) ruletest.Entry {
			return ruletest.L4Entry(t).Set("serviceArguments.mode", 3).Set("serviceArguments.sel", 1).Set("endpoints.0.targetPort", 3000)
		}, wantStatus: ok},
		{name: "egress rule may use the unspecified vip", give: func(t testing.TB) ruletest.Entry {
			return ruletest.L4Entry(t).Set("serviceArguments.externalIP", "0.0.0.0").Set("serviceArguments.egress", true)
		}, wantStatus: ok},
		{name: "hostonearm uses the unspecified vip", give: func(t testing.TB) ruletest.Entry {
			return ruletest.L4Entry(t).Set("serviceArguments.externalIP", "::").Set("serviceArguments.mode", 5).Set("endpoints.0.endpointIP", "::1")
		}, wantStatus: ok},
		{name: "prefix hash level allowed with gpuaware", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.sel", 9).Set("serviceArguments.chwbl_prefix_hash_level", 2)
		}, wantStatus: ok},
		{name: "single pool kv exact mode 3 with llb extensions accepted", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvExactMode", 3).Set("serviceArguments.kvNoneHashSeed", "").
				Set("serviceArguments.kvReplayPort", 5600).Set("serviceArguments.kvBlockKey", "tokens").Set("serviceArguments.sel", 8)
		}, wantStatus: ok},
		{name: "admission fields accepted on fullproxy", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.fc_mode", "enforce").Set("serviceArguments.fc_prefill_max_inflight", 8).
				Set("serviceArguments.fc_max_queue_depth", 64).Set("serviceArguments.fc_adaptive", "inherit")
		}, wantStatus: ok},
		{name: "p/d keeps role-less rescue endpoints", give: func(t testing.TB) ruletest.Entry {
			e := ruletest.PDEntry(t)
			eps := e["endpoints"].([]any)
			e["endpoints"] = append(eps, map[string]any{"endpointIP": "127.0.0.9", "targetPort": 8300, "weight": 1})
			return e
		}, wantStatus: ok},

		// ---- schema: required, enum, range: 422 ----
		{name: "serviceArguments required", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Del("serviceArguments") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "serviceArguments", wantMsg: "serviceArguments in body is required"},
		{name: "externalIP required", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Del("serviceArguments.externalIP") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "serviceArguments.externalIP", wantMsg: "serviceArguments.externalIP in body is required"},
		{name: "protocol required", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Del("serviceArguments.protocol") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "serviceArguments.protocol", wantMsg: "serviceArguments.protocol in body is required"},
		{name: "protocol enum is case-sensitive", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.protocol", "TCP")
		},
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.protocol", wantMsg: "should be one of [tcp udp sctp icmp]"},
		{name: "port required for tcp", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Del("serviceArguments.port") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "serviceArguments.port", wantMsg: "serviceArguments.port in body is required"},
		{name: "port above uint16", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("serviceArguments.port", 70000) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.port", wantMsg: "should be less than or equal to 65535"},
		{name: "port negative", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("serviceArguments.port", -1) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.port", wantMsg: "should be greater than or equal to 0"},
		{name: "portMax above uint16", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.portMax", 70000)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.portMax"},
		{name: "sel outside 0-10", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("serviceArguments.sel", 11) },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.sel", wantMsg: "serviceArguments.sel in body should be one of [0 1 2 3 4 5 6 7 8 9 10], got 11"},
		{name: "mode outside 0-5", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("serviceArguments.mode", 6) },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.mode", wantMsg: "should be one of [0 1 2 3 4 5]"},
		{name: "security outside 0-2", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("serviceArguments.security", 3) },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.security"},
		{name: "oper outside 0-2", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("serviceArguments.oper", 3) },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.oper"},
		{name: "probetype enum", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probetype", "tls-hello")
		},
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.probetype", wantMsg: "[tcp udp sctp http https ping none]"},
		{name: "probeport above uint16", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probetype", "tcp").Set("serviceArguments.probeport", 70000)
		}, wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.probeport"},
		{name: "probeTimeout negative", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probeTimeout", -1)
		},
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.probeTimeout"},
		{name: "probeRetries negative", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probeRetries", -1)
		},
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.probeRetries"},
		{name: "block above uint32", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.block", 4294967296)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.block"},
		{name: "inactiveTimeOut negative", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.inactiveTimeOut", -1)
		},
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.inactiveTimeOut"},
		{name: "connectionLimit above uint32", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.connectionLimit", 4294967296)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.connectionLimit"},
		{name: "member timeouts are uint32 ms", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.timeoutMemberConnect", -1).Set("serviceArguments.timeoutMemberData", -1).Set("serviceArguments.timeoutTcpInspect", -1)
		}, wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.timeoutTcpInspect"},
		{name: "hsts_max_age negative", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.hsts_max_age", -1)
		},
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.hsts_max_age"},
		{name: "path_match_mode enum", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.path_match_mode", "regex")
		},
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.path_match_mode", wantMsg: "[disabled prefix exact]"},
		{name: "backend_protocol enum", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.backend_protocol", "http3")
		},
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.backend_protocol", wantMsg: "[http1 http2 both]"},
		{name: "mtls client_cert_mode enum", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.mtls_frontend", map[string]any{"client_cert_mode": "maybe"})
		}, wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.mtls_frontend.client_cert_mode"},
		{name: "max_stream_duration_sec negative", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.max_stream_duration_sec", -1)
		},
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.max_stream_duration_sec"},
		{name: "backend_keepalive_interval_sec negative", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.backend_keepalive_interval_sec", -1)
		}, wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.backend_keepalive_interval_sec"},
		{name: "chwbl_prefix_hash_level enum", give: func(t testing.TB) ruletest.Entry {
			return ruletest.CHWBLEntry(t).Set("serviceArguments.chwbl_prefix_hash_level", 4)
		},
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.chwbl_prefix_hash_level", wantMsg: "should be one of [1 2 3]"},
		{name: "chwbl_prefix_hash_flags above 255", give: func(t testing.TB) ruletest.Entry {
			return ruletest.CHWBLEntry(t).Set("serviceArguments.chwbl_prefix_hash_flags", 256)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.chwbl_prefix_hash_flags"},
		{name: "chwbl_mean_load_factor below 100", give: func(t testing.TB) ruletest.Entry {
			return ruletest.CHWBLEntry(t).Set("serviceArguments.chwbl_mean_load_factor", 99)
		},
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.chwbl_mean_load_factor", wantMsg: "greater than or equal to 100"},
		{name: "chwbl_mean_load_factor above 300", give: func(t testing.TB) ruletest.Entry {
			return ruletest.CHWBLEntry(t).Set("serviceArguments.chwbl_mean_load_factor", 301)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.chwbl_mean_load_factor"},
		{name: "chwbl_replication above 1024", give: func(t testing.TB) ruletest.Entry {
			return ruletest.CHWBLEntry(t).Set("serviceArguments.chwbl_replication", 1025)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.chwbl_replication"},
		{name: "pd_session_ttl_sec negative", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.pd_session_ttl_sec", -1)
		},
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.pd_session_ttl_sec"},
		{name: "pd_cache_threshold above 100", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.pd_cache_threshold", 101)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.pd_cache_threshold", wantMsg: "serviceArguments.pd_cache_threshold in body should be less than or equal to 100"},
		{name: "pd_balance_abs_threshold above uint8", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.pd_balance_abs_threshold", 256)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.pd_balance_abs_threshold"},
		{name: "pdBootstrapPort above uint16", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.pdBootstrapPort", 65536)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.pdBootstrapPort"},
		{name: "kvExactMode above 3", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("serviceArguments.kvExactMode", 4) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.kvExactMode"},
		{name: "kvBlockSize below 1", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("serviceArguments.kvBlockSize", -16) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.kvBlockSize", wantMsg: "greater than or equal to 1"},
		{name: "kvHashAlgo enum", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.kvHashAlgo", "md5")
		},
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.kvHashAlgo", wantMsg: "[sha256_cbor xxhash_cbor sha256_sglang blockhash_trtllm]"},
		{name: "kvZmqPort above 65535", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("serviceArguments.kvZmqPort", 65536) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.kvZmqPort"},
		{name: "kvWarmupSec negative", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("serviceArguments.kvWarmupSec", -1) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.kvWarmupSec"},
		{name: "kvEngineType enum", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.kvEngineType", "tgi")
		},
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.kvEngineType", wantMsg: "[vllm sglang trtllm llamacpp]"},
		{name: "kvDpRankCount above 8", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("serviceArguments.kvDpRankCount", 9) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.kvDpRankCount"},
		{name: "kvReplayPort above 65535", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.kvReplayPort", 65536)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.kvReplayPort"},
		{name: "kvBlockKey enum", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.kvBlockKey", "bytes")
		},
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.kvBlockKey", wantMsg: "[hash tokens]"},
		{name: "fc_mode enum", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.fc_mode", "strict")
		},
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.fc_mode", wantMsg: "[off observe enforce inherit]"},
		{name: "fc_mode empty string", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("serviceArguments.fc_mode", "") },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.fc_mode"},
		{name: "fc_max_outstanding above 100000", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.fc_max_outstanding", 100001)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.fc_max_outstanding"},
		{name: "fc_ep_max_inflight negative", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.fc_ep_max_inflight", -1)
		},
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "serviceArguments.fc_ep_max_inflight"},
		{name: "fc_max_queue_depth above 65536", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.fc_max_queue_depth", 65537)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.fc_max_queue_depth"},
		{name: "fc_max_queue_wait_ms above an hour", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.fc_max_queue_wait_ms", 3600001)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.fc_max_queue_wait_ms"},
		{name: "fc_tenant_max_share_pct above 100", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.fc_tenant_max_share_pct", 101)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.fc_tenant_max_share_pct"},
		{name: "fc_adaptive enum", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.fc_adaptive", "maybe")
		},
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.fc_adaptive", wantMsg: "[on off inherit]"},
		{name: "fc_expose_headers enum", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.fc_expose_headers", "yes")
		},
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.fc_expose_headers"},
		{name: "endpointIP required", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Del("endpoints.0.endpointIP") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "endpoints.0.endpointIP", wantMsg: "endpoints.0.endpointIP in body is required"},
		{name: "targetPort required", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Del("endpoints.1.targetPort") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "endpoints.1.targetPort"},
		{name: "weight required", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Del("endpoints.0.weight") },
			wantStatus: unpr, wantCode: rule.CodeRequired, wantField: "endpoints.0.weight", wantMsg: "endpoints.0.weight in body is required"},
		{name: "targetPort zero", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("endpoints.0.targetPort", 0) },
			wantStatus: unpr, wantCode: rule.CodeMin, wantField: "endpoints.0.targetPort", wantMsg: "greater than or equal to 1"},
		{name: "targetPort above uint16", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("endpoints.0.targetPort", 65536) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "endpoints.0.targetPort"},
		{name: "weight above uint8", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("endpoints.0.weight", 256) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "endpoints.0.weight", wantMsg: "less than or equal to 255"},
		{name: "ep_role enum", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("endpoints.0.ep_role", 3) },
			wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "endpoints.0.ep_role", wantMsg: "should be one of [0 1 2]"},
		{name: "nixl_port above uint16", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("endpoints.0.nixl_port", 65536) },
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "endpoints.0.nixl_port"},

		// ---- semantic: core ----
		{name: "externalIP not an ip", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.externalIP", "lb.local")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.externalIP", wantMsg: `malformed-service error: "lb.local" is not an IP address`},
		{name: "externalIP with ipv6 zone", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.externalIP", "fe80::1%eth0")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.externalIP", wantMsg: "zone"},
		{name: "unspecified vip needs egress or hostonearm", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.externalIP", "0.0.0.0")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.externalIP", wantMsg: "only allowed for egress rules or mode 5"},
		{name: "hostonearm needs the unspecified vip", give: func(t testing.TB) ruletest.Entry { return ruletest.L4Entry(t).Set("serviceArguments.mode", 5) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.externalIP", wantMsg: "mode 5 (hostonearm) needs the unspecified VIP"},
		{name: "privateIP not an ip", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.privateIP", "x")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.privateIP", wantMsg: "malformed-service error"},
		{name: "icmp takes port 0", give: func(t testing.TB) ruletest.Entry { return ruletest.L4Entry(t).Set("serviceArguments.protocol", "icmp") },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.port", wantMsg: "icmp rules take port 0"},
		{name: "tcp needs a non-zero port", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("serviceArguments.port", 0) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.port", wantMsg: "needs a port in 1..65535"},
		{name: "portMax below port", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.portMax", 2999)
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.portMax", wantMsg: "serv-port-args range error: portMax 2999 is below port 3000"},
		{name: "sel 7 reserved", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("serviceArguments.sel", 7) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "sel=7 is reserved"},
		{name: "sel 5 needs fullproxy", give: func(t testing.TB) ruletest.Entry { return ruletest.L4Entry(t).Set("serviceArguments.sel", 5) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "sel=5 (n2) requires mode=4 (fullproxy), got mode 0"},
		{name: "sel 8 needs fullproxy", give: func(t testing.TB) ruletest.Entry { return ruletest.L4Entry(t).Set("serviceArguments.sel", 8) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "sel=8 (chwbl) requires mode=4 (fullproxy)"},
		{name: "sel 9 needs fullproxy", give: func(t testing.TB) ruletest.Entry { return ruletest.L4Entry(t).Set("serviceArguments.sel", 9) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "sel=9 (gpuaware) requires mode=4"},
		{name: "sel 10 needs fullproxy", give: func(t testing.TB) ruletest.Entry { return ruletest.L4Entry(t).Set("serviceArguments.sel", 10) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "sel=10 (wrr-hash) requires mode=4"},
		{name: "sel 6 needs udp", give: func(t testing.TB) ruletest.Entry { return ruletest.L4Entry(t).Set("serviceArguments.sel", 6) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "non-udp-n3-args error"},
		{name: "dsr needs hash selector (not LoxiLB's 200)", give: func(t testing.TB) ruletest.Entry {
			return ruletest.L4Entry(t).Set("serviceArguments.mode", 3).Set("endpoints.0.targetPort", 3000)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "Only Hash Selection criteria allowed for DSR mode"},
		{name: "dsr endpoints use the service port", give: func(t testing.TB) ruletest.Entry {
			return ruletest.L4Entry(t).Set("serviceArguments.mode", 3).Set("serviceArguments.sel", 1)
		}, wantStatus: bad, wantCode: 400, wantField: "endpoints.0.targetPort", wantMsg: "DSR (mode 3) endpoints must use the service port 3000, got 8000"},
		{name: "proxy protocol v2 needs tcp (not LoxiLB's 500)", give: func(t testing.TB) ruletest.Entry {
			return ruletest.L4Entry(t).Set("serviceArguments.protocol", "udp").Set("serviceArguments.proxyprotocolv2", true)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.proxyprotocolv2", wantMsg: "proxy-proto-v2 not tcp service error"},
		{name: "inactiveTimeOut above a day", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.inactiveTimeOut", 86401)
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.inactiveTimeOut", wantMsg: "service-args error: inactiveTimeOut is at most 86400"},
		{name: "secondary ips need sctp", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("secondaryIPs", []any{map[string]any{"secondaryIP": "127.0.0.5"}})
		}, wantStatus: bad, wantCode: 400, wantField: "secondaryIPs", wantMsg: "secondaryIP-args error: secondary IPs need protocol sctp"},
		{name: "at most 3 secondary ips", give: func(t testing.TB) ruletest.Entry {
			ips := []any{}
			for _, a := range []string{"127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8"} {
				ips = append(ips, map[string]any{"secondaryIP": a})
			}
			return ruletest.L4Entry(t).Set("serviceArguments.protocol", "sctp").Set("secondaryIPs", ips)
		}, wantStatus: bad, wantCode: 400, wantField: "secondaryIPs", wantMsg: "at most 3 secondary IPs, got 4"},
		{name: "secondary ip must parse", give: func(t testing.TB) ruletest.Entry {
			return ruletest.L4Entry(t).Set("serviceArguments.protocol", "sctp").Set("secondaryIPs", []any{map[string]any{"secondaryIP": "nope"}})
		}, wantStatus: bad, wantCode: 400, wantField: "secondaryIPs.0.secondaryIP", wantMsg: "malformed-secip error"},
		{name: "allowed source must be a prefix", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("allowedSources", []any{map[string]any{"prefix": "10.0.0.0/33"}})
		}, wantStatus: bad, wantCode: 400, wantField: "allowedSources.0.prefix", wantMsg: "rule-allowed-src error"},

		// ---- semantic: probes ----
		{name: "connect probe needs a probeport", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probetype", "http")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probeport", wantMsg: "probetype http needs a probeport"},
		{name: "ping probe takes no probeport", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probetype", "ping").Set("serviceArguments.probeport", 80)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probeport", wantMsg: "probetype ping takes no probeport"},
		{name: "probeport needs a probetype", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probeport", 80)
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probeport", wantMsg: "probeport 80 needs a probetype"},
		{name: "probe period at most a day", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probeTimeout", 86401)
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probeTimeout", wantMsg: "at most 86400"},
		{name: "probeRetries at most 100", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probeRetries", 101)
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probeRetries", wantMsg: "probeRetries is at most 100"},

		// ---- semantic: endpoints ----
		{name: "no endpoints", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("endpoints", []any{}) },
			wantStatus: bad, wantCode: 400, wantField: "endpoints", wantMsg: "endpoints-range error: a rule needs 1 to 32 endpoints, got 0"},
		{name: "33 endpoints", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("endpoints", ruletest.EndpointEntries(33))
		},
			wantStatus: bad, wantCode: 400, wantField: "endpoints", wantMsg: "endpoints-range error: a rule needs 1 to 32 endpoints, got 33"},
		{name: "endpoint ip must parse", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("endpoints.1.endpointIP", "worker-1")
		},
			wantStatus: bad, wantCode: 400, wantField: "endpoints.1.endpointIP", wantMsg: `malformed-lbep error: "worker-1" is not an IP address`},
		{name: "ipv4 vip cannot front ipv6 endpoint", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("endpoints.0.endpointIP", "::1") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.endpointIP", wantMsg: "malformed-service nat46 error"},
		{name: "monitorAddress must parse", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("endpoints.0.monitorAddress", "x")
		},
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.monitorAddress", wantMsg: "malformed-lbep error"},
		{name: "expectedCodes syntax", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("endpoints.0.expectedCodes", "200-100")
		},
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.expectedCodes", wantMsg: `expectedCodes "200-100"`},
		{name: "httpVersion 1.0 or 1.1", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("endpoints.0.httpVersion", "2") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.httpVersion", wantMsg: `httpVersion must be "1.0" or "1.1"`},
		{name: "httpMethod token", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("endpoints.0.httpMethod", "get") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.httpMethod"},
		{name: "urlPath without CR/LF", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("endpoints.0.urlPath", "/health\r\nX-Injected: 1")
		},
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.urlPath", wantMsg: "control character"},
		{name: "urlPath without spaces", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("endpoints.0.urlPath", "/a b") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.urlPath"},
		{name: "http probereq without CR/LF", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probetype", "http").Set("serviceArguments.probeport", 8000).
				Set("serviceArguments.probereq", "/health\n")
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probereq", wantMsg: "control character"},
		{name: "default-probe probereq without CR/LF", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probereq", "/x\ry")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probereq"},
		{name: "ping probe on a served mode:4 rule", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probetype", "ping")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.probetype", wantMsg: "not supported on a mode:4 rule llb serves"},
		{name: "sel 5 on a served mode:4 rule", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("serviceArguments.sel", 5) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.sel", wantMsg: "does not implement"},
		{name: "kvBlockSize above 4096", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvBlockSize", 100000)
		},
			wantStatus: unpr, wantCode: rule.CodeMax, wantField: "serviceArguments.kvBlockSize"},
		{name: "tcp probereq may carry CR/LF (it is raw bytes)", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.probetype", "tcp").Set("serviceArguments.probeport", 8000).
				Set("serviceArguments.probereq", "PING\r\n")
		}, wantStatus: ok},
		{name: "domainName is a host name", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("endpoints.0.domainName", "a b") },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.domainName"},

		// ---- semantic: octavia / tls ----
		{name: "session header applies to rr or persist", give: func(t testing.TB) ruletest.Entry {
			return ruletest.CHWBLEntry(t).Set("serviceArguments.session_header_name", "X-Session-ID")
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.session_header_name", wantMsg: "applies to sel 0 (rr) or 3 (persist), got sel 8"},
		{name: "session header syntax", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.session_header_name", "cookie:")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.session_header_name", wantMsg: "must be a header name"},
		{name: "path_prefix starts with slash", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.path_prefix", "v1")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.path_prefix"},
		{name: "path_match_mode needs a prefix", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.path_match_mode", "exact")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.path_match_mode", wantMsg: "needs a path_prefix"},
		{name: "hsts needs tls", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.hsts_max_age", 3600)
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.hsts_max_age", wantMsg: "hsts_max_age needs security 1"},
		{name: "mtls needs fullproxy", give: func(t testing.TB) ruletest.Entry {
			return ruletest.L4Entry(t).Set("serviceArguments.security", 2).Set("serviceArguments.mtls_backend", map[string]any{"verify_server_cert": true})
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode", wantMsg: "mTLS requires mode=fullproxy"},
		{name: "frontend mtls needs tls termination", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.mtls_frontend", map[string]any{"client_cert_mode": "required"})
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mtls_frontend", wantMsg: "frontend mTLS requires security=1"},
		{name: "backend mtls needs e2e tls", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.security", 1).Set("serviceArguments.mtls_backend", map[string]any{"verify_server_cert": true})
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mtls_backend", wantMsg: "backend mTLS requires security=2"},

		// ---- semantic: LLM ----
		{name: "llm fields need fullproxy", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("serviceArguments.mode", 0) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode",
			wantMsg: "pd-disagg requires mode=fullproxy; LLM fields pd_disagg_mode, pd_cache_aware_mode, kvExactMode, kvBlockSize, kvHashAlgo, kvZmqPort require mode=4 (fullproxy), got mode 0"},
		{name: "sse_mode needs fullproxy", give: func(t testing.TB) ruletest.Entry { return ruletest.L4Entry(t).Set("serviceArguments.sse_mode", true) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode", wantMsg: "LLM fields sse_mode require mode=4"},
		{name: "cb_enable needs fullproxy", give: func(t testing.TB) ruletest.Entry { return ruletest.L4Entry(t).Set("serviceArguments.cb_enable", true) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode", wantMsg: "cb_enable"},
		{name: "admission fields need fullproxy", give: func(t testing.TB) ruletest.Entry {
			return ruletest.L4Entry(t).Set("serviceArguments.fc_max_outstanding", 10)
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode", wantMsg: "fc_max_outstanding"},
		{name: "kv exact single-role needs fullproxy", give: func(t testing.TB) ruletest.Entry { return ruletest.L4Entry(t).Set("serviceArguments.kvExactMode", 3) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.mode", wantMsg: "kv-exact single-role mode requires mode=fullproxy"},
		{name: "p/d needs a decode endpoint", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("endpoints.1.ep_role", 1) },
			wantStatus: bad, wantCode: 400, wantField: "endpoints",
			wantMsg: "pd-disagg requires at least 1 prefill (ep_role=1) and 1 decode (ep_role=2) endpoint; got 2 prefill and 0 decode"},
		{name: "p/d needs a prefill endpoint", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("endpoints.0.ep_role", 0) },
			wantStatus: bad, wantCode: 400, wantField: "endpoints", wantMsg: "got 0 prefill and 1 decode"},
		{name: "p/d needs http1 backends", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.backend_protocol", "http2")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.backend_protocol", wantMsg: "pd-disagg requires backend_protocol http1"},
		{name: "cache-aware needs p/d", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.pd_cache_aware_mode", true)
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.pd_cache_aware_mode", wantMsg: "pd-cache-aware requires pd_disagg_mode=true"},
		{name: "p/d thresholds without p/d are stored and inert", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.pd_cache_threshold", 50).Set("serviceArguments.pd_session_ttl_sec", 60).Set("serviceArguments.pd_balance_abs_threshold", 4)
		}, wantStatus: ok}, // stored and inert without P/D, as in LoxiLB
		{name: "roles need p/d", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("endpoints.0.ep_role", 1) },
			wantStatus: bad, wantCode: 400, wantField: "endpoints.0.ep_role", wantMsg: "ep_role 1 needs pd_disagg_mode=true"},
		{name: "nixl port without p/d is stored and inert", give: func(t testing.TB) ruletest.Entry { return ruletest.SingleEntry(t).Set("endpoints.0.nixl_port", 5600) },
			wantStatus: ok},
		{name: "per-role admission caps without p/d are stored and inert", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.fc_decode_max_inflight", 4)
		},
			wantStatus: ok},
		{name: "kv exact mode 1 needs p/d", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvExactMode", 1)
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvExactMode",
			wantMsg: "kv-exact zmq mode requires pd_disagg_mode=true (use kvExactMode=3 for a single pool)"},
		{name: "kv exact mode 3 forbids p/d", give: func(t testing.TB) ruletest.Entry { return ruletest.PDEntry(t).Set("serviceArguments.kvExactMode", 3) },
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvExactMode",
			wantMsg: "kv-exact single-role mode is incompatible with pd-disagg (use kvExactMode=1 for P/D)"},
		{name: "kv exact mode 2 reserved", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvExactMode", 2)
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvExactMode", wantMsg: "kvExactMode 2 (nats) is reserved"},
		{name: "kv tuning with kv exact off is stored and inert", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvZmqPort", 5557).Set("serviceArguments.kvNoneHashSeed", "0")
		}, wantStatus: ok},
		{name: "every kv tuning key is accepted with kv exact off", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvBlockSize", 32).Set("serviceArguments.kvHashAlgo", "sha256_cbor").
				Set("serviceArguments.kvWarmupSec", 5).Set("serviceArguments.kvDpRankCount", 2).
				Set("serviceArguments.kvReplayPort", 5600).Set("serviceArguments.kvBlockKey", "tokens")
		}, wantStatus: ok},
		{name: "llamacpp keeps kv defaults", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvEngineType", "llamacpp").Set("serviceArguments.kvBlockSize", 32).
				Set("serviceArguments.kvZmqPort", 6000).Set("serviceArguments.kvDpRankCount", 2).Set("serviceArguments.kvHashAlgo", "xxhash_cbor")
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvBlockSize", wantMsg: "kvBlockSize is unsupported for llamacpp",
			wantAlso: []string{"kvZmqPort is unsupported for llamacpp", "kvDpRankCount is unsupported for llamacpp", "kvHashAlgo is unsupported for llamacpp"}},
		{name: "plain sglang proxy rule accepted", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvEngineType", "sglang")
		},
			wantStatus: ok},
		{name: "vllm rejects the sglang hash", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.kvHashAlgo", "sha256_sglang")
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvHashAlgo",
			wantMsg: `kv-hash-algo "sha256_sglang" is incompatible with kv-engine-type "vllm" (omit kvHashAlgo to take the engine default "sha256_cbor")`},
		{name: "sglang rejects the cbor hash", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvEngineType", "sglang").Set("serviceArguments.kvExactMode", 3).Set("serviceArguments.kvHashAlgo", "sha256_cbor")
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvHashAlgo", wantMsg: `incompatible with kv-engine-type "sglang"`},
		{name: "trtllm has no zmq port", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvEngineType", "trtllm").Set("serviceArguments.kvExactMode", 3).Set("serviceArguments.kvZmqPort", 6000)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvZmqPort", wantMsg: "kvZmqPort is not used by trtllm; omit it"},
		{name: "trtllm has no dp ranks", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvEngineType", "trtllm").Set("serviceArguments.kvExactMode", 3).Set("serviceArguments.kvDpRankCount", 2)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvDpRankCount", wantMsg: "kvDpRankCount is not used by trtllm"},
		{name: "llamacpp has no kv events", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvEngineType", "llamacpp").Set("serviceArguments.kvExactMode", 3)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvExactMode", wantMsg: "kvExactMode is unsupported for llamacpp"},
		{name: "llamacpp has no p/d", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.kvEngineType", "llamacpp").Set("serviceArguments.kvExactMode", 0).
				Del("serviceArguments.kvZmqPort").Del("serviceArguments.kvHashAlgo").Del("serviceArguments.kvBlockSize")
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.pd_disagg_mode", wantMsg: "pd_disagg_mode is unsupported for llamacpp"},
		{name: "bootstrap port only for sglang p/d", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.pdBootstrapPort", 8998)
		},
			wantStatus: bad, wantCode: 400, wantField: "serviceArguments.pdBootstrapPort",
			wantMsg: "pd-bootstrap-port requires pd_disagg_mode=true and kv-engine-type sglang"},
		{name: "sglang p/d with its bootstrap port accepted", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.kvEngineType", "sglang").Del("serviceArguments.kvHashAlgo").Set("serviceArguments.pdBootstrapPort", 9100)
		}, wantStatus: ok},
		{name: "sglang p/d with kv-exact on the prefill side accepted", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.kvEngineType", "sglang").Set("serviceArguments.kvHashAlgo", "sha256_sglang").
				Set("serviceArguments.kvExactMode", 1).Set("serviceArguments.kvDpRankCount", 2)
		}, wantStatus: ok},
		{name: "trtllm p/d accepted", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.kvEngineType", "trtllm").Del("serviceArguments.kvHashAlgo").Del("serviceArguments.kvZmqPort")
		}, wantStatus: ok},
		{name: "sglang kv-exact single pool accepted", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvEngineType", "sglang").Set("serviceArguments.kvExactMode", 3).
				Set("serviceArguments.kvDpRankCount", 3).Set("serviceArguments.kvZmqPort", 5561)
		}, wantStatus: ok},
		{name: "trtllm kv-exact single pool accepted", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvEngineType", "trtllm").Set("serviceArguments.kvExactMode", 3).
				Set("serviceArguments.kvBlockSize", 32).Set("serviceArguments.kvHashAlgo", "blockhash_trtllm")
		}, wantStatus: ok},
		{name: "trtllm has no replay port", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.kvEngineType", "trtllm").Set("serviceArguments.kvExactMode", 3).Set("serviceArguments.kvReplayPort", 5558)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvReplayPort", wantMsg: "kvReplayPort is not used by trtllm"},
		{name: "ring fields with another selector are stored and inert", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.sel", 9).Set("serviceArguments.chwbl_mean_load_factor", 150).Set("serviceArguments.chwbl_replication", 64)
		}, wantStatus: ok},
		{name: "prefix hash fields with another selector are stored and inert", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.chwbl_enable_cache_salt", true).Set("serviceArguments.chwbl_prefix_hash_level", 1).
				Set("serviceArguments.chwbl_prefix_hash_flags", 3)
		}, wantStatus: ok},
		{name: "ring fields accepted with wrr-hash", give: func(t testing.TB) ruletest.Entry {
			return ruletest.SingleEntry(t).Set("serviceArguments.sel", 10).Set("serviceArguments.chwbl_mean_load_factor", 125).Set("serviceArguments.chwbl_replication", 256).
				Set("serviceArguments.chwbl_prefix_hash_flags", 0).Set("serviceArguments.chwbl_enable_cache_salt", false)
		}, wantStatus: ok},
		{name: "dp rank ports fit in 16 bits", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.kvZmqPort", 65535).Set("serviceArguments.kvDpRankCount", 2)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvDpRankCount", wantMsg: "needs ports up to 65536"},
		{name: "replay ports do not overlap event ports", give: func(t testing.TB) ruletest.Entry {
			return ruletest.PDEntry(t).Set("serviceArguments.kvDpRankCount", 4).Set("serviceArguments.kvReplayPort", 5559)
		}, wantStatus: bad, wantCode: 400, wantField: "serviceArguments.kvReplayPort", wantMsg: "kvReplayPort 5559 overlaps the KV-event ports 5557..5560"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			body := r.give(t).JSON(t)
			var e rule.LoadbalanceEntry
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("decode: %v", err)
			}
			err := rule.Validate(&e)
			if r.wantStatus == ok {
				if err != nil {
					t.Fatalf("Validate = %v; want nil", err)
				}
				if _, err := rule.NormalizeEntry(&e); err != nil {
					t.Fatalf("NormalizeEntry = %v; want nil", err)
				}
				return
			}
			var ve *rule.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate = %v; want a *rule.ValidationError", err)
			}
			if got := ve.Status(); got != r.wantStatus {
				t.Fatalf("status: got %d; want %d; %v", got, r.wantStatus, ve)
			}
			code := r.wantStatus
			if schema := ve.OfStatus(unpr); len(schema) > 0 {
				code = schema[0].Code
			}
			if code != r.wantCode {
				t.Errorf("code: got %d; want %d", code, r.wantCode)
			}
			if r.wantField != "" && !slices.Contains(ve.Fields(), r.wantField) {
				t.Errorf("fields: got %v; want it to list %q", ve.Fields(), r.wantField)
			}
			for _, m := range append([]string{r.wantMsg}, r.wantAlso...) {
				if !strings.Contains(ve.Error(), m) {
					t.Errorf("problems: got %q; want them to contain %q", ve.Error(), m)
				}
			}
		})
	}
}

package main

import (
	"github.com/spf13/pflag"

	"github.com/llbproject/llb/rule"
)

// createAliases are the short flag names accepted beside loxicmd's.
var createAliases = map[string]string{
	"pd":             "pd-disagg",
	"cb":             "cb-enable",
	"sse":            "sse-mode",
	"pd-balance-abs": "pd-balance-abs-threshold",
}

// register defines the flags of "create lb".
func (o *createOpts) register(fs *pflag.FlagSet) {
	fs.StringVarP(&o.file, "file", "f", "", "post this JSON rule file as-is (\"-\": standard input)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the JSON that would be posted and exit")
	fs.StringVar(&o.tcp, "tcp", "", "TCP service port and default endpoint port, <port>[-<portMax>][:<targetPort>]")
	fs.StringVar(&o.udp, "udp", "", "UDP service port, as --tcp")
	fs.StringVar(&o.sctp, "sctp", "", "SCTP service port, as --tcp")
	fs.StringSliceVar(&o.endpoints, "endpoints", nil, "endpoints: IP:WEIGHT, IP:PORT:WEIGHT or IP[:PORT]:WEIGHT:ROLE[:NIXL], comma-separated")
	fs.StringSliceVar(&o.epRoles, "ep-role", nil, "per-endpoint role aligned with --endpoints: none|prefill|decode (or 0|1|2)")
	fs.IntSliceVar(&o.nixlPorts, "nixl-port", nil, "per-endpoint NIXL side-channel port aligned with --endpoints")
	fs.StringVar(&o.sel, "select", "rr", "endpoint selector: "+names(selectors))
	fs.StringVar(&o.mode, "mode", "fullproxy", "LB mode: "+names(modes))
	fs.StringVar(&o.security, "security", "", "TLS: "+names(securities))
	fs.BoolVar(&o.attach, "attachEP", false, "add the endpoints to the existing rule (oper 1)")
	fs.BoolVar(&o.detach, "detachEP", false, "remove the endpoints from the existing rule (oper 2)")
	fs.BoolVar(&o.adminDown, "admin-down", false, "create the rule paused (adminStateUp false)")
	fs.StringSliceVar(&o.sources, "sources", nil, "allowed client source CIDRs")
	fs.StringSliceVar(&o.secIPs, "secips", nil, "secondary IPs (SCTP multihoming)")

	f := &o.fields
	f.fs = fs
	type sa = rule.ServiceArguments
	// Core.
	f.str("name", "rule name", func(s *sa, v string) { s.Name = v })
	f.str("host", "L7 host key (part of the rule key)", func(s *sa, v string) { s.Host = v })
	f.int64("mark", "rule mark, serviceArguments.block (part of the rule key)", func(s *sa, v int64) { s.Block = v })
	f.boolean("bgp", "advertise the VIP over BGP", func(s *sa, v bool) { s.BGP = v })
	f.boolean("monitor", "probe the endpoints", func(s *sa, v bool) { s.Monitor = v })
	f.int64("inatimeout", "idle session timeout in seconds (inactiveTimeOut)", func(s *sa, v int64) { s.InactiveTimeOut = v })
	f.boolean("ppv2en", "send a PROXY v2 header to endpoints (tcp)", func(s *sa, v bool) { s.ProxyProtocolV2 = v })
	f.boolean("egress", "egress rule", func(s *sa, v bool) { s.Egress = v })
	f.str("probetype", "health probe: tcp|udp|sctp|http|https|ping|none", func(s *sa, v string) { s.ProbeType = v })
	f.int64("probeport", "health probe port", func(s *sa, v int64) { s.ProbePort = v })
	f.str("probereq", "probe request (HTTP path)", func(s *sa, v string) { s.ProbeReq = v })
	f.str("proberesp", "expected probe response (substring)", func(s *sa, v string) { s.ProbeResp = v })
	f.int64("probetimeout", "probe period in seconds (probeTimeout)", func(s *sa, v int64) { s.ProbeTimeout = v })
	f.int64("proberetries", "consecutive failures before an endpoint is inactive", func(s *sa, v int64) { s.ProbeRetries = v })
	f.int64("connection-limit", "concurrent connection ceiling (0 = unlimited)", func(s *sa, v int64) { s.ConnectionLimit = v })
	// L7.
	f.str("model-name", "model_name", func(s *sa, v string) { s.ModelName = v })
	f.str("path-prefix", "path_prefix, e.g. /v1", func(s *sa, v string) { s.PathPrefix = v })
	f.str("path-match-mode", "path_match_mode: disabled|prefix|exact", func(s *sa, v string) { s.PathMatchMode = ptr(v) })
	f.str("session-header-name", "session_header_name (sel rr or persist)", func(s *sa, v string) { s.SessionHeaderName = v })
	f.str("trace-type", "trace_type", func(s *sa, v string) { s.TraceType = v })
	f.str("backend-protocol", "backend_protocol: http1|http2|both", func(s *sa, v string) { s.BackendProtocol = ptr(v) })
	f.int64("hsts-max-age", "hsts_max_age in seconds", func(s *sa, v int64) { s.HSTSMaxAge = v })
	f.boolean("hsts-include-subdomains", "hsts_include_subdomains", func(s *sa, v bool) { s.HSTSIncludeSubdomains = v })
	f.boolean("hsts-preload", "hsts_preload", func(s *sa, v bool) { s.HSTSPreload = v })
	// SSE and breaker.
	f.boolean("sse-mode", "SSE streaming mode, sse_mode (alias --sse)", func(s *sa, v bool) { s.SSEMode = v })
	f.boolean("priority-scheduling", "the engines run vLLM's --scheduling-policy priority: set each request's priority from its class (llb), priority_scheduling", func(s *sa, v bool) { s.PriorityScheduling = v })
	f.int64("max-stream-duration", "max_stream_duration_sec", func(s *sa, v int64) { s.MaxStreamDurationSec = v })
	f.int64("backend-keepalive-interval", "backend_keepalive_interval_sec", func(s *sa, v int64) { s.BackendKeepaliveIntervalSec = v })
	f.boolean("cb-enable", "per-endpoint circuit breaker, cb_enable (alias --cb)", func(s *sa, v bool) { s.CBEnable = v })
	// CHWBL.
	f.int64("chwbl-hash-level", "chwbl_prefix_hash_level 1|2|3", func(s *sa, v int64) { s.ChwblPrefixHashLevel = ptr(v) })
	f.int64("chwbl-hash-flags", "chwbl_prefix_hash_flags bitmask 0-255 (0 = auto)", func(s *sa, v int64) { s.ChwblPrefixHashFlags = ptr(v) })
	f.int64("chwbl-load-factor", "chwbl_mean_load_factor 100-300 (% of mean load)", func(s *sa, v int64) { s.ChwblMeanLoadFactor = v })
	f.int64("chwbl-replication", "chwbl_replication, virtual nodes per endpoint", func(s *sa, v int64) { s.ChwblReplication = v })
	f.boolean("chwbl-cache-salt", "chwbl_enable_cache_salt", func(s *sa, v bool) { s.ChwblEnableCacheSalt = ptr(v) })
	// P/D.
	f.boolean("pd-disagg", "prefill/decode disaggregation, pd_disagg_mode (alias --pd)", func(s *sa, v bool) { s.PDDisaggMode = v })
	f.boolean("pd-cache-aware", "Tier-1 radix-trie affinity, pd_cache_aware_mode", func(s *sa, v bool) { s.PDCacheAwareMode = v })
	f.int64("pd-session-ttl", "Tier-0 session pin lifetime in seconds, pd_session_ttl_sec", func(s *sa, v int64) { s.PDSessionTTLSec = v })
	f.int64("pd-cache-threshold", "Tier-1 minimum match rate in percent, pd_cache_threshold", func(s *sa, v int64) { s.PDCacheThreshold = v })
	f.int64("pd-balance-abs-threshold", "Tier-1 imbalance guard, pd_balance_abs_threshold (alias --pd-balance-abs)", func(s *sa, v int64) { s.PDBalanceAbsThreshold = v })
	f.int64("pd-bootstrap-port", "pdBootstrapPort (sglang P/D)", func(s *sa, v int64) { s.PDBootstrapPort = v })
	// KV-exact.
	f.int64("kv-exact-mode", "Tier-1.5 KV-exact routing, kvExactMode: 0 off, 1 P/D, 3 single pool", func(s *sa, v int64) { s.KVExactMode = v })
	f.int64("kv-block-size", "kvBlockSize, tokens per block (vLLM --block-size)", func(s *sa, v int64) { s.KVBlockSize = v })
	f.str("kv-hash-algo", "kvHashAlgo: sha256_cbor|xxhash_cbor (best omitted)", func(s *sa, v string) { s.KVHashAlgo = v })
	f.int64("kv-zmq-port", "kvZmqPort, the engines' KV-event PUB port", func(s *sa, v int64) { s.KVZmqPort = v })
	f.int64("kv-warmup", "kvWarmupSec, Tier-1.5 warm-up after a feed connects", func(s *sa, v int64) { s.KVWarmupSec = v })
	f.str("kv-engine-type", "kvEngineType: vllm|sglang|trtllm|llamacpp (immutable)", func(s *sa, v string) { s.KVEngineType = v })
	f.int64("kv-dp-ranks", "kvDpRankCount, data-parallel ranks 1-8", func(s *sa, v int64) { s.KVDpRankCount = v })
	f.str("kv-none-hash-seed", "kvNoneHashSeed (llb): the workers' PYTHONHASHSEED", func(s *sa, v string) { s.KVNoneHashSeed = ptr(v) })
	f.int64("kv-replay-port", "kvReplayPort (llb): the workers' KV-event replay port", func(s *sa, v int64) { s.KVReplayPort = v })
	f.str("kv-block-key", "kvBlockKey (llb): hash|tokens", func(s *sa, v string) { s.KVBlockKey = v })
	// Admission (fc_*): sent when given; 0 or inherit resets a stored value.
	f.str("fc-mode", "fc_mode: off|observe|enforce|inherit", func(s *sa, v string) { s.FCMode = ptr(v) })
	f.int64("fc-max-outstanding", "fc_max_outstanding", func(s *sa, v int64) { s.FCMaxOutstanding = ptr(v) })
	f.int64("fc-ep-max-inflight", "fc_ep_max_inflight", func(s *sa, v int64) { s.FCEpMaxInflight = ptr(v) })
	f.int64("fc-prefill-max-inflight", "fc_prefill_max_inflight", func(s *sa, v int64) { s.FCPrefillMaxInflight = ptr(v) })
	f.int64("fc-decode-max-inflight", "fc_decode_max_inflight", func(s *sa, v int64) { s.FCDecodeMaxInflight = ptr(v) })
	f.int64("fc-max-queue-depth", "fc_max_queue_depth", func(s *sa, v int64) { s.FCMaxQueueDepth = ptr(v) })
	f.int64("fc-max-queue-wait-ms", "fc_max_queue_wait_ms", func(s *sa, v int64) { s.FCMaxQueueWaitMs = ptr(v) })
	f.int64("fc-telemetry-stale-ms", "fc_telemetry_stale_ms", func(s *sa, v int64) { s.FCTelemetryStaleMs = ptr(v) })
	f.str("fc-adaptive", "fc_adaptive: on|off|inherit", func(s *sa, v string) { s.FCAdaptive = ptr(v) })
	f.int64("fc-warmup-ms", "fc_warmup_ms", func(s *sa, v int64) { s.FCWarmupMs = ptr(v) })
	f.int64("fc-ttft-target-ms", "fc_ttft_target_ms", func(s *sa, v int64) { s.FCTTFTTargetMs = ptr(v) })
	f.int64("fc-tenant-max-share-pct", "fc_tenant_max_share_pct", func(s *sa, v int64) { s.FCTenantMaxSharePct = ptr(v) })
	f.str("fc-expose-headers", "fc_expose_headers: on|off|inherit", func(s *sa, v string) { s.FCExposeHeaders = ptr(v) })

	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if n, ok := createAliases[name]; ok {
			name = n
		}
		return pflag.NormalizedName(name)
	})
}

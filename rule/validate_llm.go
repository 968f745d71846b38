package rule

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/llbproject/llb/ladder"
)

func checkLLMSchema(c *Checker, sa *ServiceArguments) {
	c.Between(SAField("max_stream_duration_sec"), sa.MaxStreamDurationSec, 0, MaxInt32)
	c.Between(SAField("backend_keepalive_interval_sec"), sa.BackendKeepaliveIntervalSec, 0, MaxInt32)
	if sa.ChwblPrefixHashLevel != nil {
		c.OneOf(SAField("chwbl_prefix_hash_level"), *sa.ChwblPrefixHashLevel, 1, 2, 3)
	}
	if sa.ChwblPrefixHashFlags != nil {
		c.Between(SAField("chwbl_prefix_hash_flags"), *sa.ChwblPrefixHashFlags, 0, MaxUint8)
	}
	c.BetweenOrZero(SAField("chwbl_mean_load_factor"), sa.ChwblMeanLoadFactor, 100, 300)
	c.BetweenOrZero(SAField("chwbl_replication"), sa.ChwblReplication, 1, 1024)
	c.Between(SAField("pd_session_ttl_sec"), sa.PDSessionTTLSec, 0, MaxInt32)
	c.Between(SAField("pd_cache_threshold"), sa.PDCacheThreshold, 0, 100)
	c.Between(SAField("pd_balance_abs_threshold"), sa.PDBalanceAbsThreshold, 0, MaxUint8)
	c.Between(SAField("pdBootstrapPort"), sa.PDBootstrapPort, 0, MaxUint16)
	c.Between(SAField("kvExactMode"), sa.KVExactMode, KVExactOff, KVExactSingle)
	// LoxiLB takes any uint32; llb's block-hash chain computes blocks of
	// at most ladder.MaxKVBlockSize tokens (vLLM's are 16–256).
	c.BetweenOrZero(SAField("kvBlockSize"), sa.KVBlockSize, 1, ladder.MaxKVBlockSize)
	c.OneOfString(SAField("kvHashAlgo"), sa.KVHashAlgo, HashSHA256CBOR, HashXXHashCBOR, HashSHA256SGLang, HashBlockHashTRTLLM)
	c.BetweenOrZero(SAField("kvZmqPort"), sa.KVZmqPort, 1, MaxUint16)
	c.Between(SAField("kvWarmupSec"), sa.KVWarmupSec, 0, MaxUint32)
	c.OneOfString(SAField("kvEngineType"), sa.KVEngineType, EngineVLLM, EngineSGLang, EngineTRTLLM, EngineLlamaCPP)
	c.BetweenOrZero(SAField("kvDpRankCount"), sa.KVDpRankCount, 1, 8)
	c.Between(SAField("kvReplayPort"), sa.KVReplayPort, 0, MaxUint16)
	c.OneOfString(SAField("kvBlockKey"), sa.KVBlockKey, BlockKeyHash, BlockKeyTokens)
	if v := sa.MigrationLimit; v != nil {
		c.Between(SAField("migrationLimit"), *v, 0, MaxMigrationLimit)
	}
	if d := sa.KVTokenizerDir; d != "" && (!filepath.IsAbs(d) || len(d) > 4096 || strings.ContainsAny(d, "\x00\r\n")) {
		c.Semantic(SAField("kvTokenizerDir"), "kvTokenizerDir %q: want an absolute directory path on the llbd host", d)
	}
}

func checkAdmissionSchema(c *Checker, sa *ServiceArguments) {
	a := &sa.AdmissionArguments
	str := func(name string, v *string, allowed ...string) {
		if v == nil {
			return
		}
		if *v == "" {
			c.Add(SchemaProblem(SAField(name), CodeEnum, "should be one of %s, got \"\"", EnumList(allowed)))
			return
		}
		c.OneOfString(SAField(name), *v, allowed...)
	}
	num := func(name string, v *int64, hi int64) {
		if v != nil {
			c.Between(SAField(name), *v, 0, hi)
		}
	}
	str("fc_mode", a.FCMode, "off", "observe", "enforce", "inherit")
	num("fc_max_outstanding", a.FCMaxOutstanding, ladder.MaxRuleInflight)
	num("fc_ep_max_inflight", a.FCEpMaxInflight, ladder.MaxRuleInflight)
	num("fc_prefill_max_inflight", a.FCPrefillMaxInflight, ladder.MaxRuleInflight)
	num("fc_decode_max_inflight", a.FCDecodeMaxInflight, ladder.MaxRuleInflight)
	num("fc_max_queue_depth", a.FCMaxQueueDepth, 65536)
	num("fc_max_queue_wait_ms", a.FCMaxQueueWaitMs, 3600000)
	num("fc_telemetry_stale_ms", a.FCTelemetryStaleMs, 3600000)
	str("fc_adaptive", a.FCAdaptive, "on", "off", "inherit")
	num("fc_warmup_ms", a.FCWarmupMs, 3600000)
	num("fc_ttft_target_ms", a.FCTTFTTargetMs, 3600000)
	num("fc_tenant_max_share_pct", a.FCTenantMaxSharePct, 100)
	str("fc_expose_headers", a.FCExposeHeaders, "on", "off", "inherit")
}

// llmFieldsSet names every LLM, admission and llb-extension key that carries a
// value, in wire spelling.
func llmFieldsSet(sa *ServiceArguments) []string {
	var set []string
	add := func(name string, isSet bool) {
		if isSet {
			set = append(set, name)
		}
	}
	l, a, x := &sa.LLMArguments, &sa.AdmissionArguments, &sa.LLBArguments
	add("sse_mode", l.SSEMode)
	add("max_stream_duration_sec", l.MaxStreamDurationSec != 0)
	add("backend_keepalive_interval_sec", l.BackendKeepaliveIntervalSec != 0)
	add("cb_enable", l.CBEnable)
	add("chwbl_prefix_hash_level", l.ChwblPrefixHashLevel != nil)
	add("chwbl_prefix_hash_flags", l.ChwblPrefixHashFlags != nil)
	add("chwbl_mean_load_factor", l.ChwblMeanLoadFactor != 0)
	add("chwbl_replication", l.ChwblReplication != 0)
	add("chwbl_enable_cache_salt", l.ChwblEnableCacheSalt != nil)
	add("pd_disagg_mode", l.PDDisaggMode)
	add("pd_cache_aware_mode", l.PDCacheAwareMode)
	add("pd_session_ttl_sec", l.PDSessionTTLSec != 0)
	add("pd_cache_threshold", l.PDCacheThreshold != 0)
	add("pd_balance_abs_threshold", l.PDBalanceAbsThreshold != 0)
	add("pdBootstrapPort", l.PDBootstrapPort != 0)
	add("kvExactMode", l.KVExactMode != 0)
	add("kvBlockSize", l.KVBlockSize != 0)
	add("kvHashAlgo", l.KVHashAlgo != "")
	add("kvZmqPort", l.KVZmqPort != 0)
	add("kvWarmupSec", l.KVWarmupSec != 0)
	add("kvEngineType", l.KVEngineType != "")
	add("kvDpRankCount", l.KVDpRankCount != 0)
	add("kvNoneHashSeed", x.KVNoneHashSeed != nil)
	add("kvReplayPort", x.KVReplayPort != 0)
	add("kvBlockKey", x.KVBlockKey != "")
	add("kvTokenizerDir", x.KVTokenizerDir != "")
	add("migrationLimit", x.MigrationLimit != nil)
	add("priority_scheduling", x.PriorityScheduling)
	add("fc_mode", a.FCMode != nil)
	add("fc_max_outstanding", a.FCMaxOutstanding != nil)
	add("fc_ep_max_inflight", a.FCEpMaxInflight != nil)
	add("fc_prefill_max_inflight", a.FCPrefillMaxInflight != nil)
	add("fc_decode_max_inflight", a.FCDecodeMaxInflight != nil)
	add("fc_max_queue_depth", a.FCMaxQueueDepth != nil)
	add("fc_max_queue_wait_ms", a.FCMaxQueueWaitMs != nil)
	add("fc_telemetry_stale_ms", a.FCTelemetryStaleMs != nil)
	add("fc_adaptive", a.FCAdaptive != nil)
	add("fc_warmup_ms", a.FCWarmupMs != nil)
	add("fc_ttft_target_ms", a.FCTTFTTargetMs != nil)
	add("fc_tenant_max_share_pct", a.FCTenantMaxSharePct != nil)
	add("fc_expose_headers", a.FCExposeHeaders != nil)
	return set
}

// EngineOf is the effective kvEngineType ("" means vllm).
func EngineOf(sa *ServiceArguments) string {
	if sa.KVEngineType == "" {
		return EngineVLLM
	}
	return sa.KVEngineType
}

// hashAlgosFor lists the hash contracts an engine's events can match; the
// first is the engine default.
func hashAlgosFor(engine string) []string {
	switch engine {
	case EngineVLLM:
		return []string{HashSHA256CBOR, HashXXHashCBOR}
	case EngineSGLang:
		return []string{HashSHA256SGLang}
	case EngineTRTLLM:
		return []string{HashBlockHashTRTLLM}
	}
	return nil
}

func checkLLM(c *Checker, e *LoadbalanceEntry) {
	sa := e.ServiceArguments
	if set := llmFieldsSet(sa); len(set) > 0 && sa.Mode != ModeFullProxy {
		var lox []string
		if sa.PDDisaggMode {
			lox = append(lox, "pd-disagg requires mode=fullproxy")
		}
		if sa.KVExactMode == KVExactSingle {
			lox = append(lox, "kv-exact single-role mode requires mode=fullproxy")
		}
		lox = append(lox, fmt.Sprintf("LLM fields %s require mode=4 (fullproxy), got mode %d", strings.Join(set, ", "), sa.Mode))
		c.Semantic(SAField("mode"), "%s", strings.Join(lox, "; "))
	}
	checkPD(c, e)
	checkKV(c, sa)
}

func checkPD(c *Checker, e *LoadbalanceEntry) {
	sa := e.ServiceArguments
	pd := sa.PDDisaggMode
	var prefill, decode int
	for i, ep := range e.Endpoints {
		switch ep.EpRole {
		case RolePrefill:
			prefill++
		case RoleDecode:
			decode++
		}
		if !pd && ep.EpRole != RoleNone {
			c.Semantic(EPField(i, "ep_role"), "ep_role %d needs pd_disagg_mode=true (a single pool is role-less)", ep.EpRole)
		}
	}
	if pd && sa.Oper == 0 && (prefill == 0 || decode == 0) {
		c.Semantic("endpoints", "pd-disagg requires at least 1 prefill (ep_role=1) and 1 decode (ep_role=2) endpoint; got %d prefill and %d decode", prefill, decode)
	}
	if pd && sa.BackendProtocol != nil && *sa.BackendProtocol != "http1" {
		c.Semantic(SAField("backend_protocol"), "pd-disagg requires backend_protocol http1, got %q", *sa.BackendProtocol)
	}
	if sa.PDCacheAwareMode && !pd {
		c.Semantic(SAField("pd_cache_aware_mode"), "pd-cache-aware requires pd_disagg_mode=true")
	}
	// Tuning keys of a feature the rule does not use (pd_* thresholds
	// without P/D, kv* keys with kvExactMode 0, chwbl_* with another
	// selector, nixl_port on a single pool) are stored and inert, as in
	// LoxiLB: an operator can switch a feature off without deleting its
	// settings. Their ranges are still checked.
}

func checkKV(c *Checker, sa *ServiceArguments) {
	pd := sa.PDDisaggMode
	switch sa.KVExactMode {
	case KVExactZMQ:
		if !pd {
			c.Semantic(SAField("kvExactMode"), "kv-exact zmq mode requires pd_disagg_mode=true (use kvExactMode=3 for a single pool)")
		}
	case KVExactNATS:
		c.Semantic(SAField("kvExactMode"), "kvExactMode 2 (nats) is reserved and not implemented; use 1 (P/D) or 3 (single pool)")
	case KVExactSingle:
		if pd {
			c.Semantic(SAField("kvExactMode"), "kv-exact single-role mode is incompatible with pd-disagg (use kvExactMode=1 for P/D)")
		}
	}
	engine := EngineOf(sa)
	if algos := hashAlgosFor(engine); sa.KVHashAlgo != "" && len(algos) > 0 && !slices.Contains(algos, sa.KVHashAlgo) &&
		slices.Contains([]string{HashSHA256CBOR, HashXXHashCBOR, HashSHA256SGLang, HashBlockHashTRTLLM}, sa.KVHashAlgo) {
		c.Semantic(SAField("kvHashAlgo"), "kv-hash-algo %q is incompatible with kv-engine-type %q (omit kvHashAlgo to take the engine default %q)",
			sa.KVHashAlgo, engine, algos[0])
	}
	switch engine {
	case EngineTRTLLM:
		if sa.KVZmqPort != 0 && sa.KVZmqPort != DefaultKVZmqPort {
			c.Semantic(SAField("kvZmqPort"), "kvZmqPort is not used by trtllm; omit it")
		}
		if sa.KVDpRankCount > 1 {
			c.Semantic(SAField("kvDpRankCount"), "kvDpRankCount is not used by trtllm; omit it")
		}
	case EngineLlamaCPP:
		unsupported := func(name string, isSet bool) {
			if isSet {
				c.Semantic(SAField(name), "%s is unsupported for llamacpp (no KV event plane, no P/D)", name)
			}
		}
		unsupported("kvExactMode", sa.KVExactMode != 0)
		unsupported("pd_disagg_mode", pd)
		unsupported("kvHashAlgo", sa.KVHashAlgo != "")
		unsupported("kvZmqPort", sa.KVZmqPort != 0 && sa.KVZmqPort != DefaultKVZmqPort)
		unsupported("kvDpRankCount", sa.KVDpRankCount > 1)
		unsupported("kvBlockSize", sa.KVBlockSize != 0 && sa.KVBlockSize != DefaultKVBlockSize)
	}
	if sa.PDBootstrapPort != 0 && !(pd && engine == EngineSGLang) {
		c.Semantic(SAField("pdBootstrapPort"), "pd-bootstrap-port requires pd_disagg_mode=true and kv-engine-type sglang")
	}
	if engine == EngineTRTLLM && sa.KVReplayPort != 0 {
		c.Semantic(SAField("kvReplayPort"), "kvReplayPort is not used by trtllm (its events are drained over HTTP); omit it")
	}
	checkKVPorts(c, sa)
}

// checkKVPorts checks that the per-DP-rank port ranges fit and do not overlap.
func checkKVPorts(c *Checker, sa *ServiceArguments) {
	if sa.KVExactMode == KVExactOff {
		return
	}
	zmq, ranks := sa.KVZmqPort, sa.KVDpRankCount
	if zmq == 0 {
		zmq = DefaultKVZmqPort
	}
	if ranks < 1 {
		ranks = DefaultKVDpRankCount
	}
	if zmq+ranks-1 > MaxUint16 && zmq <= MaxUint16 {
		c.Semantic(SAField("kvDpRankCount"), "kvZmqPort %d with kvDpRankCount %d needs ports up to %d, beyond 65535", zmq, ranks, zmq+ranks-1)
	}
	if r := sa.KVReplayPort; r != 0 && r <= MaxUint16 {
		if r+ranks-1 > MaxUint16 {
			c.Semantic(SAField("kvReplayPort"), "kvReplayPort %d with kvDpRankCount %d needs ports up to %d, beyond 65535", r, ranks, r+ranks-1)
		}
		if r < zmq+ranks && zmq < r+ranks {
			c.Semantic(SAField("kvReplayPort"), "kvReplayPort %d overlaps the KV-event ports %d..%d (kvZmqPort + DP ranks)", r, zmq, zmq+ranks-1)
		}
	}
}

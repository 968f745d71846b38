package rule

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/llbproject/llb/ladder"
)

// Defaults of the data plane that LoxiLB's rule model leaves to the daemon.
// They are llb's; where LoxiLB has a value it is named.
const (
	// DefaultPrefillTimeout bounds the P/D prefill leg when
	// LLB_PD_PREFILL_TIMEOUT_SEC is unset (LoxiLB's 30 s; use ≥ 180 s for
	// 32k-token prompts).
	DefaultPrefillTimeout = 30 * time.Second
	// DefaultDecodeTimeout bounds the wait for the first event of a streamed
	// P/D decode leg when LLB_PD_DECODE_TIMEOUT_SEC is unset. LoxiLB names
	// the error (pd_decode_timeout) but publishes no value: a frozen decode
	// worker is left after a minute, and the request — the client has
	// nothing yet — goes to another pair.
	DefaultDecodeTimeout = 60 * time.Second
	// DefaultStreamIdleTimeout bounds the silence between two reads of a
	// response reaching the client when the rule has no timeoutMemberData
	// and LLB_PD_IDLE_TIMEOUT_SEC is unset: a stream from a frozen worker is
	// cut after it instead of lasting the max stream duration.
	DefaultStreamIdleTimeout = 60 * time.Second
	// DefaultProbeAttemptTimeout bounds one health probe (at most the
	// period). LoxiLB's IGW uses a 5 s client timeout; llb probes a GPU
	// worker's /health, which answers in milliseconds, and prefers to see a
	// hung one sooner.
	DefaultProbeAttemptTimeout = 2 * time.Second
	// DefaultProbePath is what a mode:4 rule probes without probereq.
	DefaultProbePath = "/health"
	// DefaultProbeMethod is the HTTP method of a probe without httpMethod.
	DefaultProbeMethod = "GET"
	// ProbeMaxBackoffPeriods caps the probe period of a down endpoint at
	// this many periods.
	ProbeMaxBackoffPeriods = 6
	// DefaultBreakerThresholdPD is the consecutive failures that open a P/D
	// rule's breaker (LoxiLB's control plane auto-arms P/D rules with 3).
	DefaultBreakerThresholdPD = 3
	// DefaultBreakerThreshold is the same for a single pool with cb_enable
	// (LoxiLB's data-plane default of 5).
	DefaultBreakerThreshold = 5
	// DefaultBreakerOpen is how long an open breaker waits before a
	// HALF_OPEN trial (LoxiLB's 30 s).
	DefaultBreakerOpen = 30 * time.Second
	// DefaultOriginErrThreshold is LLB_PD_ORIGIN_ERR_THRESHOLD's default.
	DefaultOriginErrThreshold = 3
	// DefaultMigrationLimit is how many times a request may move to
	// another endpoint when neither the rule (migrationLimit) nor
	// LLB_MIGRATION_LIMIT says (Dynamo's examples use 3).
	DefaultMigrationLimit = 3
	// MaxMigrationLimit bounds migrationLimit and LLB_MIGRATION_LIMIT.
	MaxMigrationLimit = 16
	// DefaultPersistTTL is the persist selector's (sel:3) sliding pin
	// lifetime (LoxiLB's persistence timeout of 10800 s; no rule field sets
	// it).
	DefaultPersistTTL = 10800 * time.Second
)

// Defaults are the daemon-wide values a rule inherits (the environment, read
// once by cmd/llbd). The zero value is every default.
type Defaults struct {
	// NoneHashSeed is LLB_KV_NONE_HASH_SEED: the workers' PYTHONHASHSEED
	// for rules without kvNoneHashSeed. "" is a valid seed, so the zero
	// value means "0", the value the vLLM deployment guides set, only when
	// NoneHashSeedSet is false.
	NoneHashSeed    string
	NoneHashSeedSet bool
	// PrefillTimeout, DecodeTimeout and StreamIdleTimeout are
	// LLB_PD_PREFILL_TIMEOUT_SEC, LLB_PD_DECODE_TIMEOUT_SEC and
	// LLB_PD_IDLE_TIMEOUT_SEC: 0 takes the Default* above, negative turns
	// the bound off (decode and idle only).
	PrefillTimeout, DecodeTimeout, StreamIdleTimeout time.Duration
	// OriginErrThreshold is LLB_PD_ORIGIN_ERR_THRESHOLD; nil takes
	// DefaultOriginErrThreshold, 0 disables origin demotion.
	OriginErrThreshold *int
	// TokenizerDir is --tokenizer-dir / LLB_TOKENIZER_DIR: the tokenizer
	// directory of rules without kvTokenizerDir ("" = the engines'
	// /tokenize).
	TokenizerDir string
	// MigrationLimit is LLB_MIGRATION_LIMIT, the migration limit of rules
	// without migrationLimit; nil takes DefaultMigrationLimit, 0 turns
	// migration off.
	MigrationLimit *int
}

// ErrNotServed classifies a rule that is valid and stored but that llb's
// data plane does not serve (an L4 mode, TLS termination, a non-TCP
// protocol, a port range). Compile wraps it with the reason.
var ErrNotServed = errors.New("rule: not served by llb's data plane")

// Compile turns a validated, normalized rule into what the data plane runs,
// with the daemon's defaults d. It fails only with ErrNotServed (the rule is
// stored but not served, and the error says why); a rule that passed Validate
// and NormalizeEntry never fails otherwise.
func Compile(r *Rule, d Defaults) (*Compiled, error) {
	if why := notServed(r); why != "" {
		return nil, fmt.Errorf("%w: %s", ErrNotServed, why)
	}
	sa := r.Entry.ServiceArguments
	eff := &r.Effective
	pd := eff.PD.Enabled
	c := &Compiled{
		Key:               r.Key.String(),
		VIP:               r.Key.VIP,
		Port:              r.Key.Port,
		Paused:            !eff.AdminUp,
		Route:             Route{Host: r.Key.Host, PathPrefix: r.Key.PathPrefix, PathMode: r.Key.PathMatchMode, Model: r.Key.ModelName},
		SessionHeaderName: sa.SessionHeaderName,
		PrefixHash:        PrefixHash{Level: eff.CHWBL.Level, Flags: int(eff.CHWBL.Flags)},
		Spec: ladder.ServiceSpec{
			Name:                r.Key.String(),
			Selector:            ladder.SelectorKind(sa.Sel),
			PDDisagg:            pd,
			CacheAware:          eff.PD.CacheAware,
			SessionTTL:          eff.PD.SessionTTL,
			CacheThresholdPct:   eff.PD.CacheThresholdPct,
			BalanceAbsThreshold: eff.PD.BalanceAbsThreshold,
			KVExactMode:         ladder.KVExactMode(eff.KV.Mode),
			KVBlockSize:         eff.KV.BlockSize,
			KVWarmup:            eff.KV.Warmup,
			Admission:           admissionSpec(&eff.Admission),
			PersistTTL:          DefaultPersistTTL,
		},
		Engine: eff.KV.Engine,
		KV: KVContract{
			Algo:         eff.KV.HashAlgo,
			BlockSize:    eff.KV.BlockSize,
			Seed:         seedOf(eff, d),
			TokenKeyed:   eff.KV.BlockKey == BlockKeyTokens,
			TokenizerDir: cmp.Or(eff.KV.TokenizerDir, d.TokenizerDir),
		},
		Timeouts: Timeouts{
			Connect:    eff.ConnectTimeout,
			Prefill:    orDuration(d.PrefillTimeout, DefaultPrefillTimeout),
			Decode:     optional(d.DecodeTimeout, DefaultDecodeTimeout),
			StreamIdle: optional(d.StreamIdleTimeout, DefaultStreamIdleTimeout),
			MaxStream:  eff.MaxStreamDuration,
		},
		Probe: Probe{
			Type:           cmp.Or(sa.ProbeType, ProbeHTTP), // a mode:4 rule probes GET /health by default
			Request:        sa.ProbeReq,
			Response:       sa.ProbeResp,
			Period:         eff.ProbePeriod,
			AttemptTimeout: min(DefaultProbeAttemptTimeout, eff.ProbePeriod),
			Retries:        eff.ProbeRetries,
			MaxBackoff:     ProbeMaxBackoffPeriods * eff.ProbePeriod,
		},
		MigrationLimit: DefaultMigrationLimit,
		Breaker: Breaker{
			Enabled:            eff.BreakerEnabled,
			Threshold:          DefaultBreakerThreshold,
			OriginErrThreshold: DefaultOriginErrThreshold,
			OpenFor:            DefaultBreakerOpen,
		},
	}
	if pd {
		c.Breaker.Threshold = DefaultBreakerThresholdPD
	}
	if d.OriginErrThreshold != nil {
		c.Breaker.OriginErrThreshold = *d.OriginErrThreshold
	}
	switch {
	case sa.MigrationLimit != nil:
		c.MigrationLimit = int(*sa.MigrationLimit)
	case d.MigrationLimit != nil:
		c.MigrationLimit = *d.MigrationLimit
	}
	// The priority field set is vLLM's (an integer, lower first).
	// TensorRT-LLM's is another field (a float in [0, 1], in recent
	// versions only): vLLM's integer would be refused; SGLang orders its
	// priorities by its own flag and llama.cpp has none. So only a vLLM
	// rule gets it.
	c.APIKeys, c.EnginePriority = sa.SSEMode, sa.PriorityScheduling && eff.KV.Engine == EngineVLLM
	c.BootstrapPort = eff.PD.BootstrapPort
	if !sa.SSEMode { // sse_mode suppresses timeoutMemberData
		c.Timeouts.Data = time.Duration(sa.TimeoutMemberData) * time.Millisecond
	}
	for i, ep := range eff.Endpoints {
		src := &r.Entry.Endpoints[i]
		ce := CompiledEndpoint{
			Addr:     ep.Addr,
			NixlPort: ep.NixlPort,
			Spec:     ladder.EndpointSpec{Addr: ep.Addr.String(), Role: ep.Role, Weight: ep.Weight, Backup: ep.Backup},
			Probe: EndpointProbe{
				Target:        netip.AddrPortFrom(ep.ProbeAddr, cmp.Or(uint16(sa.ProbePort), ep.Addr.Port())),
				Method:        cmp.Or(src.HTTPMethod, DefaultProbeMethod),
				Path:          probePath(cmp.Or(src.URLPath, sa.ProbeReq, DefaultProbePath)),
				ExpectedCodes: src.ExpectedCodes, HTTPVersion: src.HTTPVersion, DomainName: src.DomainName,
			},
		}
		mirrored, _ := eff.MirrorsKV(i)
		switch {
		case mirrored && eff.KV.Engine == EngineTRTLLM:
			// TensorRT-LLM publishes nothing: its serving port's POST
			// /kv_cache_events is drained (every attention-DP rank in one).
			ce.Feeds = []Feed{{Endpoint: "http://" + ep.Addr.String() + "/kv_cache_events"}}
		case mirrored:
			host := ep.Addr.Addr().String()
			for rank := 0; rank < max(eff.KV.DPRanks, 1); rank++ {
				f := Feed{Rank: rank, Endpoint: feedEndpoint(host, int(eff.KV.ZmqPort), rank)}
				if eff.KV.ReplayPort != 0 {
					f.ReplayEndpoint = feedEndpoint(host, int(eff.KV.ReplayPort), rank)
				}
				ce.Feeds = append(ce.Feeds, f)
			}
		}
		c.Endpoints = append(c.Endpoints, ce)
	}
	return c, nil
}

// notServed says why llb's data plane does not serve r ("" when it does).
func notServed(r *Rule) string { return notServedWhy(r.Entry.ServiceArguments) }

// notServedWhy says why llb's data plane does not serve a rule with these
// arguments ("" when it does). Validate holds a served rule to what the
// data plane implements; a rule it does not serve is stored as LoxiLB
// would.
func notServedWhy(sa *ServiceArguments) string {
	switch {
	case sa.Mode != ModeFullProxy:
		return fmt.Sprintf("mode %d is an L4 mode; llb's data plane serves fullproxy (mode 4) rules only", sa.Mode)
	case sa.Security != 0:
		return "TLS termination (security 1/2) is not served by llb's data plane yet"
	case sa.Protocol != ProtoTCP:
		return fmt.Sprintf("protocol %q is not served by llb's data plane (tcp only)", sa.Protocol)
	case sa.PortMax != 0:
		return "port ranges are not served by llb's data plane"
	}
	return ""
}

// seedOf is the rule's NONE_HASH seed: kvNoneHashSeed, else the daemon's.
func seedOf(eff *Effective, d Defaults) string {
	switch {
	case eff.KV.NoneHashSeed != nil:
		return *eff.KV.NoneHashSeed
	case d.NoneHashSeedSet:
		return d.NoneHashSeed
	}
	return DefaultNoneHashSeed
}

// DefaultNoneHashSeed is the NONE_HASH seed when neither the rule nor
// LLB_KV_NONE_HASH_SEED sets one: "0", the PYTHONHASHSEED the vLLM and
// llm-d deployment guides set.
const DefaultNoneHashSeed = "0"

// admissionSpec maps the rule's fc_* admission fields onto the ladder's
// per-rule overrides (0 inherits the LLB_PD_* environment). fc_mode "off"
// is not a per-rule kill switch here: the environment still applies.
func admissionSpec(a *EffectiveAdmission) ladder.AdmissionSpec {
	perEP := a.PrefillMaxInflight
	if perEP == 0 {
		perEP = a.EpMaxInflight
	}
	return ladder.AdmissionSpec{
		MaxInflightPerEP: perEP,
		QueueDepthPerEP:  min(a.MaxQueueDepth, ladder.MaxQueueDepthPerEP),
		MaxPark:          a.MaxQueueWait,
		MaxTotalInflight: int64(a.MaxOutstanding),
	}
}

// probePath is p as an HTTP path: with a leading "/" (probereq "health"
// probes /health).
func probePath(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "/" + p
	}
	return p
}

// feedEndpoint is the ZMQ address of a rank's publisher:
// tcp://<ip>:<port+rank> (IPv6 addresses bracketed).
func feedEndpoint(ip string, port, rank int) string {
	return "tcp://" + net.JoinHostPort(ip, strconv.Itoa(port+rank))
}

func orDuration(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}

// optional resolves a bound that may be turned off: 0 → def, negative → 0
// (no bound).
func optional(v, def time.Duration) time.Duration {
	switch {
	case v < 0:
		return 0
	case v == 0:
		return def
	}
	return v
}

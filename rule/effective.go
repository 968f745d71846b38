package rule

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/llbproject/llb/ladder"
)

// Effective is what a rule means to the data plane: every value resolved,
// every LoxiLB default applied, durations as time.Duration. It is derived from
// the rule's Entry by NormalizeEntry and never set by hand.
type Effective struct {
	// AdminUp is adminStateUp (absent → true). A paused rule takes no new requests.
	AdminUp bool
	// Endpoints are the endpoints in rule order; an index here is the
	// endpoint's stable index (ep_idx).
	Endpoints []EffectiveEndpoint
	// InactiveTimeout is the idle session timeout (inactiveTimeOut; 0 → 240 s
	// for tcp/sctp, 20 s otherwise).
	InactiveTimeout time.Duration
	// ProbePeriod is the probe interval (probeTimeout; 0 → 5 s, llb's
	// default where LoxiLB has 60 s).
	ProbePeriod time.Duration
	// ProbeRetries is consecutive failures before an endpoint goes inactive (0 → 2).
	ProbeRetries int
	// ConnectTimeout is the backend connect timeout (timeoutMemberConnect; 0 → 500 ms).
	ConnectTimeout time.Duration
	// MaxStreamDuration caps a stream (max_stream_duration_sec; 0 → 24 h).
	MaxStreamDuration time.Duration
	// BackendKeepalive is TCP keepalive idle on backend sockets; 0 = off.
	BackendKeepalive time.Duration
	// BreakerEnabled is cb_enable, or forced on for P/D rules (LoxiLB's
	// control plane auto-arms the breaker for P/D).
	BreakerEnabled bool
	// CHWBL is the prefix-hash ring configuration (sel 8, 9, 10).
	CHWBL EffectiveCHWBL
	// PD is the P/D ladder configuration; PD.Enabled is pd_disagg_mode.
	PD EffectivePD
	// KV is the Tier-1.5 configuration; KV.Mode 0 = off.
	KV EffectiveKV
	// Admission is the flow-control configuration; zero limits mean "inherit
	// the daemon default".
	Admission EffectiveAdmission
}

// EffectiveEndpoint is one endpoint, parsed.
type EffectiveEndpoint struct {
	// Addr is endpointIP:targetPort.
	Addr netip.AddrPort
	// Weight is 0–255.
	Weight uint8
	// Role is the P/D role (ep_role).
	Role ladder.Role
	// NixlPort is the NIXL side-channel port (nixl_port; 0 → targetPort).
	NixlPort uint16
	// Backup marks a standby endpoint.
	Backup bool
	// ProbeAddr is what health probes target: monitorAddress, else endpointIP.
	ProbeAddr netip.Addr
}

// EffectiveCHWBL is the bounded-load prefix-hash configuration.
type EffectiveCHWBL struct {
	// Level is the prefix-hash level 1–3 (absent → 1).
	Level int
	// Flags is the field-inclusion bitmask (0 = auto).
	Flags uint8
	// MeanLoadFactorPct is the load bound in percent of mean (absent → 175).
	MeanLoadFactorPct int
	// Replication is virtual nodes per endpoint (absent → 100).
	Replication int
	// RequireCacheSalt refuses requests without cache_salt.
	RequireCacheSalt bool
}

// EffectivePD is the P/D ladder configuration.
type EffectivePD struct {
	// Enabled is pd_disagg_mode.
	Enabled bool
	// CacheAware turns on Tier 1 (pd_cache_aware_mode).
	CacheAware bool
	// SessionTTL is the Tier-0 pin lifetime (0 → 300 s).
	SessionTTL time.Duration
	// CacheThresholdPct is Tier 1's minimum match rate in percent (0 → 20).
	CacheThresholdPct int
	// BalanceAbsThreshold is Tier 1's imbalance guard (0 → 3).
	BalanceAbsThreshold int
	// BootstrapPort is SGLang's bootstrap port (0 → 8998); SGLang only.
	BootstrapPort uint16
}

// EffectiveKV is the Tier-1.5 configuration.
type EffectiveKV struct {
	// Mode is kvExactMode.
	Mode ladder.KVExactMode
	// Engine is kvEngineType (absent → vllm).
	Engine string
	// HashAlgo is kvHashAlgo, or the engine's default contract.
	HashAlgo string
	// BlockSize is tokens per block (0 → 16).
	BlockSize int
	// ZmqPort is the KV-event PUB port of DP rank 0 (0 → 5557).
	ZmqPort uint16
	// ReplayPort is the replay ROUTER port of DP rank 0; 0 = no replay.
	ReplayPort uint16
	// DPRanks is the data-parallel rank count (0 → 1).
	DPRanks int
	// Warmup is the Tier-1.5 warm-up window (0 → 30 s).
	Warmup time.Duration
	// NoneHashSeed is the rule's PYTHONHASHSEED; nil = the daemon default.
	NoneHashSeed *string
	// BlockKey is BlockKeyHash (default) or BlockKeyTokens.
	BlockKey string
	// TokenizerDir is kvTokenizerDir; "" = the daemon default.
	TokenizerDir string
}

// EffectiveAdmission is the flow-control configuration. A zero limit or
// duration and the mode/switch value "inherit" mean "use the daemon default".
type EffectiveAdmission struct {
	// Mode is off, observe, enforce or inherit.
	Mode string
	// MaxOutstanding caps the rule's total in-flight requests.
	MaxOutstanding int
	// EpMaxInflight caps in-flight requests per endpoint.
	EpMaxInflight int
	// PrefillMaxInflight caps in-flight requests per prefill endpoint.
	PrefillMaxInflight int
	// DecodeMaxInflight caps in-flight requests per decode endpoint.
	DecodeMaxInflight int
	// MaxQueueDepth bounds parked requests.
	MaxQueueDepth int
	// MaxQueueWait bounds a parked request's wait (5 s when a depth is set without one).
	MaxQueueWait time.Duration
	// TelemetryStale is when endpoint telemetry counts as stale (0 → 30 s).
	TelemetryStale time.Duration
	// Adaptive is on, off or inherit.
	Adaptive string
	// Warmup is the adaptive controller's warm-up.
	Warmup time.Duration
	// TTFTTarget is the adaptive controller's TTFT target.
	TTFTTarget time.Duration
	// TenantMaxSharePct caps one tenant's share of capacity.
	TenantMaxSharePct int
	// ExposeHeaders is on, off or inherit.
	ExposeHeaders string
}

func (e Effective) clone() Effective {
	e.Endpoints = slices.Clone(e.Endpoints)
	if e.KV.NoneHashSeed != nil {
		e.KV.NoneHashSeed = ptr(*e.KV.NoneHashSeed)
	}
	return e
}

func seconds(n int64) time.Duration      { return time.Duration(n) * time.Second }
func milliseconds(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func orDefault(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

// effectiveOf resolves e, which must have passed Validate and normalization.
func effectiveOf(e *LoadbalanceEntry) (Effective, error) {
	sa := e.ServiceArguments
	eff := Effective{
		AdminUp:           sa.AdminStateUp == nil || *sa.AdminStateUp,
		ProbePeriod:       seconds(orDefault(sa.ProbeTimeout, DefaultProbePeriodSec)),
		ProbeRetries:      int(orDefault(sa.ProbeRetries, DefaultProbeRetries)),
		ConnectTimeout:    milliseconds(orDefault(sa.TimeoutMemberConnect, DefaultConnectTimeoutMs)),
		MaxStreamDuration: seconds(orDefault(sa.MaxStreamDurationSec, DefaultMaxStreamDurationSec)),
		BackendKeepalive:  seconds(sa.BackendKeepaliveIntervalSec),
		BreakerEnabled:    sa.CBEnable || sa.PDDisaggMode,
	}
	idle := int64(DefaultInactiveNSTimeoutSec)
	if sa.Protocol == ProtoTCP || sa.Protocol == ProtoSCTP {
		idle = DefaultInactiveTimeoutSec
	}
	eff.InactiveTimeout = seconds(orDefault(sa.InactiveTimeOut, idle))
	for i, ep := range e.Endpoints {
		a, err := ParseIP(derefString(ep.EndpointIP))
		if err != nil {
			return Effective{}, fmt.Errorf("endpoints.%d.endpointIP: %w", i, err)
		}
		port := uint16(derefInt(ep.TargetPort))
		ee := EffectiveEndpoint{
			Addr:      netip.AddrPortFrom(a, port),
			Weight:    uint8(derefInt(ep.Weight)),
			Role:      ladder.Role(ep.EpRole),
			NixlPort:  uint16(orDefault(ep.NixlPort, int64(port))),
			Backup:    ep.Backup != nil && *ep.Backup,
			ProbeAddr: a,
		}
		if ep.MonitorAddress != "" {
			if m, err := ParseIP(ep.MonitorAddress); err == nil {
				ee.ProbeAddr = m
			}
		}
		eff.Endpoints = append(eff.Endpoints, ee)
	}
	eff.CHWBL = EffectiveCHWBL{
		Level:             int(orDefault(derefInt(sa.ChwblPrefixHashLevel), DefaultChwblLevel)),
		Flags:             uint8(derefInt(sa.ChwblPrefixHashFlags)),
		MeanLoadFactorPct: int(orDefault(sa.ChwblMeanLoadFactor, DefaultChwblMeanLoadFactor)),
		Replication:       int(orDefault(sa.ChwblReplication, DefaultChwblReplication)),
		RequireCacheSalt:  sa.ChwblEnableCacheSalt != nil && *sa.ChwblEnableCacheSalt,
	}
	eff.PD = EffectivePD{
		Enabled:             sa.PDDisaggMode,
		CacheAware:          sa.PDCacheAwareMode,
		SessionTTL:          seconds(orDefault(sa.PDSessionTTLSec, DefaultPDSessionTTLSec)),
		CacheThresholdPct:   int(orDefault(sa.PDCacheThreshold, DefaultPDCacheThreshold)),
		BalanceAbsThreshold: int(orDefault(sa.PDBalanceAbsThreshold, DefaultPDBalanceAbsThreshold)),
		BootstrapPort:       uint16(orDefault(sa.PDBootstrapPort, DefaultPDBootstrapPort)),
	}
	engine := EngineOf(sa)
	hashAlgo := sa.KVHashAlgo
	if algos := hashAlgosFor(engine); hashAlgo == "" && len(algos) > 0 {
		hashAlgo = algos[0]
	}
	eff.KV = EffectiveKV{
		Mode:         ladder.KVExactMode(sa.KVExactMode),
		Engine:       engine,
		HashAlgo:     hashAlgo,
		BlockSize:    int(orDefault(sa.KVBlockSize, DefaultKVBlockSize)),
		ZmqPort:      uint16(orDefault(sa.KVZmqPort, DefaultKVZmqPort)),
		ReplayPort:   uint16(sa.KVReplayPort),
		DPRanks:      int(orDefault(sa.KVDpRankCount, DefaultKVDpRankCount)),
		Warmup:       seconds(orDefault(sa.KVWarmupSec, DefaultKVWarmupSec)),
		BlockKey:     BlockKeyHash,
		TokenizerDir: sa.KVTokenizerDir,
	}
	if sa.KVNoneHashSeed != nil {
		eff.KV.NoneHashSeed = ptr(*sa.KVNoneHashSeed)
	}
	if sa.KVBlockKey != "" {
		eff.KV.BlockKey = sa.KVBlockKey
	}
	eff.Admission = effectiveAdmission(&sa.AdmissionArguments)
	return eff, nil
}

func effectiveAdmission(a *AdmissionArguments) EffectiveAdmission {
	str := func(p *string) string {
		if p == nil {
			return "inherit"
		}
		return *p
	}
	num := func(p *int64) int64 { return derefInt(p) }
	ad := EffectiveAdmission{
		Mode:               str(a.FCMode),
		MaxOutstanding:     int(num(a.FCMaxOutstanding)),
		EpMaxInflight:      int(num(a.FCEpMaxInflight)),
		PrefillMaxInflight: int(num(a.FCPrefillMaxInflight)),
		DecodeMaxInflight:  int(num(a.FCDecodeMaxInflight)),
		MaxQueueDepth:      int(num(a.FCMaxQueueDepth)),
		MaxQueueWait:       milliseconds(num(a.FCMaxQueueWaitMs)),
		TelemetryStale:     milliseconds(orDefault(num(a.FCTelemetryStaleMs), DefaultFCTelemetryStaleMs)),
		Adaptive:           str(a.FCAdaptive),
		Warmup:             milliseconds(num(a.FCWarmupMs)),
		TTFTTarget:         milliseconds(num(a.FCTTFTTargetMs)),
		TenantMaxSharePct:  int(num(a.FCTenantMaxSharePct)),
		ExposeHeaders:      str(a.FCExposeHeaders),
	}
	if ad.MaxQueueDepth > 0 && ad.MaxQueueWait == 0 {
		ad.MaxQueueWait = milliseconds(DefaultFCQueueWaitMs)
	}
	return ad
}

// MirrorsKV reports whether the data plane mirrors endpoint ep's KV events
// (its Tier-1.5 inventory), and when not, why, in one sentence: with
// kvExactMode 1 only prefill endpoints publish, with kvExactMode 3 every
// endpoint does, and without KV-exact none does.
func (e *Effective) MirrorsKV(ep int) (bool, string) {
	if ep < 0 || ep >= len(e.Endpoints) {
		return false, fmt.Sprintf("the rule has no endpoint %d", ep)
	}
	switch e.KV.Mode {
	case ladder.KVSinglePool:
		return true, ""
	case ladder.KVPrefill:
		if role := e.Endpoints[ep].Role; role != ladder.RolePrefill {
			return false, fmt.Sprintf("endpoint %d is a %s endpoint (ep_role %d): with kvExactMode 1 only prefill endpoints (ep_role 1) publish KV events",
				ep, role, role)
		}
		return true, ""
	}
	return false, fmt.Sprintf("the rule has kvExactMode %d: llb mirrors KV events only with kvExactMode 1 (prefill endpoints) or 3 (every endpoint)", e.KV.Mode)
}

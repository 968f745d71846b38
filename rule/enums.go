package rule

import (
	"github.com/llbproject/llb/ladder"
)

// Protocols (serviceArguments.protocol).
const (
	ProtoTCP  = "tcp"
	ProtoUDP  = "udp"
	ProtoSCTP = "sctp"
	ProtoICMP = "icmp"
)

// Endpoint selectors (serviceArguments.sel), as the wire's integers; the
// enum itself is ladder.SelectorKind.
const (
	SelRR       = int64(ladder.SelRR)
	SelHash     = int64(ladder.SelHash)
	SelPriority = int64(ladder.SelPriority)
	SelPersist  = int64(ladder.SelPersist)
	SelLC       = int64(ladder.SelLeastConn)
	SelN2       = int64(ladder.SelN2)
	SelN3       = int64(ladder.SelN3)
	SelReserved = int64(ladder.SelReserved)
	SelCHWBL    = int64(ladder.SelCHWBL)
	SelGPUAware = int64(ladder.SelGPUAware)
	SelWRRHash  = int64(ladder.SelWeightedCHWBL)
)

// selName is loxicmd's name for a selector.
func selName(sel int64) string { return ladder.SelectorKind(sel).String() }

// LB modes (serviceArguments.mode).
const (
	ModeDNAT       = 0
	ModeOneArm     = 1
	ModeFullNAT    = 2
	ModeDSR        = 3
	ModeFullProxy  = 4
	ModeHostOneArm = 5
)

// Endpoint P/D roles (endpoints[].ep_role), as the wire's integers; the enum
// itself is ladder.Role.
const (
	RoleNone    = int64(ladder.RoleNone)
	RolePrefill = int64(ladder.RolePrefill)
	RoleDecode  = int64(ladder.RoleDecode)
)

// KV-exact modes (serviceArguments.kvExactMode), as the wire's integers; the
// enum itself is ladder.KVExactMode.
const (
	KVExactOff    = int64(ladder.KVOff)
	KVExactZMQ    = int64(ladder.KVPrefill)
	KVExactNATS   = int64(ladder.KVNATS)
	KVExactSingle = int64(ladder.KVSinglePool)
)

// KV engine types (serviceArguments.kvEngineType).
const (
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
	EngineTRTLLM   = "trtllm"
	EngineLlamaCPP = "llamacpp"
)

// KV block-hash contracts (serviceArguments.kvHashAlgo).
const (
	HashSHA256CBOR      = "sha256_cbor"
	HashXXHashCBOR      = "xxhash_cbor"
	HashSHA256SGLang    = "sha256_sglang"
	HashBlockHashTRTLLM = "blockhash_trtllm"
)

// Block keying of the KV mirror (serviceArguments.kvBlockKey, an llb extension).
const (
	BlockKeyHash   = "hash"
	BlockKeyTokens = "tokens"
)

// Probe types (serviceArguments.probetype).
const (
	ProbeTCP   = "tcp"
	ProbeUDP   = "udp"
	ProbeSCTP  = "sctp"
	ProbeHTTP  = "http"
	ProbeHTTPS = "https"
	ProbePing  = "ping"
	ProbeNone  = "none"
)

// Defaults LoxiLB applies to zero values (loxilb-compat.md §1.3, §4).
const (
	DefaultKVBlockSize           = 16
	DefaultKVZmqPort             = 5557
	DefaultKVWarmupSec           = 30
	DefaultKVDpRankCount         = 1
	DefaultPDSessionTTLSec       = 300
	DefaultPDCacheThreshold      = 20
	DefaultPDBalanceAbsThreshold = 3
	DefaultPDBootstrapPort       = 8998
	DefaultChwblLevel            = 1
	DefaultChwblMeanLoadFactor   = 175
	DefaultChwblReplication      = 100
	DefaultMaxStreamDurationSec  = 86400
	// DefaultProbePeriodSec is the probe period of a rule without
	// probeTimeout. LoxiLB's is 60 s, which lets a dead GPU worker take
	// traffic for a minute; llb probes every 5 s.
	DefaultProbePeriodSec       = 5
	DefaultProbeRetries         = 2
	DefaultInactiveTimeoutSec   = 240
	DefaultInactiveNSTimeoutSec = 20
	DefaultConnectTimeoutMs     = 500
	DefaultFCQueueWaitMs        = 5000
	DefaultFCTelemetryStaleMs   = 30000
	MaxEndpoints                = ladder.MaxEndpoints
	MaxSecondaryIPs             = 3
	MaxInactiveTimeoutSec       = 86400
	MaxProbePeriodSec           = 86400
	MaxProbeRetries             = 100
)

package rule

import "fmt"

// Protocols (serviceArguments.protocol).
const (
	ProtoTCP  = "tcp"
	ProtoUDP  = "udp"
	ProtoSCTP = "sctp"
	ProtoICMP = "icmp"
)

// Endpoint selectors (serviceArguments.sel).
const (
	SelRR       = 0
	SelHash     = 1
	SelPriority = 2
	SelPersist  = 3
	SelLC       = 4
	SelN2       = 5
	SelN3       = 6
	SelReserved = 7
	SelCHWBL    = 8
	SelGPUAware = 9
	SelWRRHash  = 10
)

// selName is loxicmd's name for a selector.
func selName(sel int64) string {
	switch sel {
	case SelRR:
		return "rr"
	case SelHash:
		return "hash"
	case SelPriority:
		return "priority"
	case SelPersist:
		return "persist"
	case SelLC:
		return "lc"
	case SelN2:
		return "n2"
	case SelN3:
		return "n3"
	case SelReserved:
		return "reserved"
	case SelCHWBL:
		return "chwbl"
	case SelGPUAware:
		return "gpuaware"
	case SelWRRHash:
		return "wrr-hash"
	}
	return fmt.Sprintf("sel%d", sel)
}

// LB modes (serviceArguments.mode).
const (
	ModeDNAT       = 0
	ModeOneArm     = 1
	ModeFullNAT    = 2
	ModeDSR        = 3
	ModeFullProxy  = 4
	ModeHostOneArm = 5
)

// Endpoint P/D roles (endpoints[].ep_role).
const (
	RoleNone    = 0
	RolePrefill = 1
	RoleDecode  = 2
)

// KV-exact modes (serviceArguments.kvExactMode).
const (
	KVExactOff    = 0
	KVExactZMQ    = 1
	KVExactNATS   = 2
	KVExactSingle = 3
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
	DefaultProbePeriodSec        = 60
	DefaultProbeRetries          = 2
	DefaultInactiveTimeoutSec    = 240
	DefaultInactiveNSTimeoutSec  = 20
	DefaultConnectTimeoutMs      = 500
	DefaultFCQueueWaitMs         = 5000
	DefaultFCTelemetryStaleMs    = 30000
	MaxEndpoints                 = 32
	MaxSecondaryIPs              = 3
	MaxInactiveTimeoutSec        = 86400
	MaxProbePeriodSec            = 86400
	MaxProbeRetries              = 100
)

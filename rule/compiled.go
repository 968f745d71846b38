package rule

import (
	"net/netip"
	"time"

	"github.com/llbproject/llb/ladder"
)

// Compiled is a valid rule as the data plane runs it: every default applied
// (LoxiLB's, llb's and the daemon's), every enum typed, every address parsed.
// Compile builds it; the gateway, the actors and the ladder read it and
// apply no default of their own. Read-only once built.
type Compiled struct {
	// Key is the rule key as RuleKey.String prints it: the metric label
	// "service" and the log field "rule".
	Key string
	// VIP and Port are where the rule listens (externalIP, port).
	VIP  netip.Addr
	Port uint16
	// Paused is adminStateUp:false: the listener stays bound but every new
	// request is answered 503 service_unavailable.
	Paused bool
	// Route is which requests on VIP:port the rule takes when several
	// rules share it (LoxiLB's host, path_prefix, path_match_mode and
	// model_name).
	Route Route
	// Endpoints are the rule's endpoints in stored order; an index is the
	// endpoint's identity everywhere (ladder decisions, metrics ep_idx).
	Endpoints []CompiledEndpoint
	// Spec is the ladder's view of the rule: selector, P/D, tiers,
	// admission.
	Spec ladder.ServiceSpec
	// Engine is kvEngineType (vllm when absent): how the engines are
	// spoken to, their P/D dialect first, and what a migrated request's
	// continuation may carry.
	Engine string
	// KV is the Tier-1.5 hash contract (meaningful when Spec.KVExactMode
	// is on).
	KV KVContract
	// PrefixHash configures the single-pool prefix hash (sel 8, 9, 10).
	PrefixHash PrefixHash
	// SessionHeaderName is session_header_name: where the persist (sel:3)
	// key comes from ("<Header>", "cookie:<name>", "query:<param>",
	// "basic-auth"; "" = the client IP).
	SessionHeaderName string
	// Timeouts are the data plane's bounds.
	Timeouts Timeouts
	// Probe is the rule's health-probe settings.
	Probe Probe
	// Breaker configures the per-endpoint circuit breakers.
	Breaker Breaker
	// MigrationLimit is how many times one request may be sent on to
	// another endpoint after its worker died, froze or dropped the
	// connection (migrationLimit, else LLB_MIGRATION_LIMIT, else
	// DefaultMigrationLimit); 0 = never: a broken stream is cut.
	MigrationLimit int
	// APIKeys is sse_mode: the rule checks API keys and tenant limits
	// whenever llbd holds at least one key (LoxiLB enforces them on
	// sse_mode rules).
	APIKeys bool
	// EnginePriority is priority_scheduling: the gateway sets the body's
	// "priority" from the request's class.
	EnginePriority bool
	// BootstrapPort is SGLang's disaggregation bootstrap port
	// (pdBootstrapPort, 0 → DefaultPDBootstrapPort): the bootstrap_port
	// the SGLang P/D dialect names with each prefill endpoint's address.
	BootstrapPort uint16
}

// Route is the part of a rule's key that picks, among the rules on one
// VIP:port, the rule a request goes to (gateway.RuleTable).
type Route struct {
	// Host is the Host header the rule takes ("" = any).
	Host string
	// PathPrefix and PathMode restrict the request path: PathPrefix with
	// its descendants ("prefix"), PathPrefix alone ("exact"); any path
	// when PathMode is "".
	PathPrefix, PathMode string
	// Model is the model the rule takes (X-Model, else the body's model);
	// "" is the wildcard rule.
	Model string
}

// Restricts reports whether the route narrows the requests its rule takes
// by path or model. A rule alone on its VIP:port that does not takes every
// request, whatever its host (as llb did before it shared addresses: a
// host equal to the VIP is common in LoxiLB's examples).
func (r Route) Restricts() bool { return r.PathMode != "" || r.Model != "" }

// CompiledEndpoint is one endpoint of a Compiled rule.
type CompiledEndpoint struct {
	// Addr is endpointIP:targetPort, where the OpenAI API listens.
	Addr netip.AddrPort
	// NixlPort is the NIXL side-channel port (nixl_port; 0 → targetPort).
	NixlPort uint16
	// Spec is the ladder's view (address, role, weight, backup).
	Spec ladder.EndpointSpec
	// Probe holds the endpoint's own health-monitor fields.
	Probe EndpointProbe
	// Feeds are the endpoint's KV-event subscriptions, one per DP rank;
	// empty when the endpoint publishes none (decode endpoints, KV off).
	Feeds []Feed
}

// Role is the endpoint's P/D role.
func (e *CompiledEndpoint) Role() ladder.Role { return e.Spec.Role }

// EndpointProbe is how one endpoint is probed: the rule's probe settings
// with the endpoint's own health-monitor fields (REST endpoints[]) applied
// over them, every default resolved.
type EndpointProbe struct {
	// Target is the probed address: monitorAddress (else the endpoint's
	// IP) at probeport (else the endpoint's targetPort).
	Target netip.AddrPort
	// Method is the HTTP method: httpMethod, else GET.
	Method string
	// Path is the HTTP path: the endpoint's urlPath, else the rule's
	// probereq, else DefaultProbePath; it always starts with "/".
	Path string
	// ExpectedCodes lists accepted statuses: "200", "200,202", "200-204";
	// "" means any 2xx (ParseExpectedCodes).
	ExpectedCodes string
	// HTTPVersion is "1.0" or "1.1"; informational (probes speak HTTP/1.1).
	HTTPVersion string
	// DomainName sets the Host header and TLS SNI.
	DomainName string
}

// Feed is one KV-event subscription (one endpoint, one DP rank).
type Feed struct {
	// Rank is the data-parallel rank.
	Rank int
	// Endpoint is the publisher's ZMQ address, "tcp://<ip>:<kvZmqPort+rank>"
	// (vLLM, SGLang), or a TensorRT-LLM endpoint's drain,
	// "http://<ip>:<targetPort>/kv_cache_events" (one for every rank).
	Endpoint string
	// ReplayEndpoint is the publisher's replay ROUTER address ("" = none).
	ReplayEndpoint string
}

// KVContract is how Tier-1.5 block keys are computed, matching the engines'.
type KVContract struct {
	// Algo is the vLLM hash contract: "sha256_cbor" or "xxhash_cbor".
	// Ignored when TokenKeyed.
	Algo string
	// BlockSize is tokens per KV block (vLLM --block-size).
	BlockSize int
	// Seed is the engines' PYTHONHASHSEED (kvNoneHashSeed, else the
	// daemon's LLB_KV_NONE_HASH_SEED); "" is a valid seed.
	Seed string
	// TokenKeyed keys blocks by llb's own hash of their token ids
	// (kvBlockKey "tokens") instead of recomputing vLLM's digests.
	TokenKeyed bool
	// TokenizerDir is the Hugging Face tokenizer directory (or a root of
	// them named by served model) prompts are tokenized with in process
	// (kvTokenizerDir, else --tokenizer-dir); "" calls the engines'
	// /tokenize.
	TokenizerDir string
}

// PrefixHash configures the prefix hash of the single-pool selectors.
type PrefixHash struct {
	// Level is chwbl_prefix_hash_level (1, 2 or 3): how much of the prompt
	// the hash covers — 256, 1024 or 4096 bytes.
	Level int
	// Flags is chwbl_prefix_hash_flags (0 = auto): bit 0 folds the LoRA
	// name in, bit 3 cache_salt; auto folds both.
	Flags int
}

// Timeouts are a rule's data-plane bounds. Zero means "no bound" only where
// the field says so; Compile fills every default.
type Timeouts struct {
	// Connect bounds each upstream dial (timeoutMemberConnect).
	Connect time.Duration
	// Data is timeoutMemberData: the longest an endpoint may stay silent
	// while a response is awaited or read; 0 = not set (then Decode and
	// StreamIdle apply). Already 0 when sse_mode suppresses it.
	Data time.Duration
	// Prefill bounds the P/D prefill leg (LLB_PD_PREFILL_TIMEOUT_SEC).
	Prefill time.Duration
	// Decode bounds the wait for the first event of a streamed P/D decode
	// leg (LLB_PD_DECODE_TIMEOUT_SEC); 0 = no bound.
	Decode time.Duration
	// StreamIdle bounds the silence between reads of a response reaching
	// the client (LLB_PD_IDLE_TIMEOUT_SEC); 0 = no bound.
	StreamIdle time.Duration
	// MaxStream is max_stream_duration_sec: a whole-request deadline.
	MaxStream time.Duration
}

// Probe is a rule's health-probe settings.
type Probe struct {
	// Type is "http", "https", "tcp" or "none" (an unset probetype is
	// "http": a mode:4 rule probes GET /health by default).
	Type string
	// Request is probereq: a tcp probe's payload (an HTTP probe's path is
	// each endpoint's EndpointProbe.Path).
	Request string
	// Response is proberesp: a substring the answer must contain.
	Response string
	// Period is the probe period (probeTimeout, which LoxiLB uses as the
	// period).
	Period time.Duration
	// AttemptTimeout bounds one probe (at most Period).
	AttemptTimeout time.Duration
	// Retries is the consecutive failures that mark an endpoint down.
	Retries int
	// MaxBackoff caps the probe period while an endpoint is down (the wait
	// grows by Period per failure, as LoxiLB's grows by 20 s):
	// ProbeMaxBackoffPeriods × Period.
	MaxBackoff time.Duration
}

// Breaker configures a rule's per-endpoint circuit breakers.
type Breaker struct {
	// Enabled is cb_enable, forced on for P/D rules.
	Enabled bool
	// Threshold is the consecutive transport failures that open a breaker.
	Threshold int
	// OriginErrThreshold is the consecutive origin 5xx answers that open
	// it (LLB_PD_ORIGIN_ERR_THRESHOLD); 0 = never.
	OriginErrThreshold int
	// OpenFor is the OPEN window before a HALF_OPEN trial.
	OpenFor time.Duration
}

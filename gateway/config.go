package gateway

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
)

// ErrInvalidConfig classifies every RuleConfig problem; test with errors.Is.
var ErrInvalidConfig = errors.New("gateway: invalid rule config")

// Defaults applied when a RuleConfig field is zero.
const (
	// DefaultConnectTimeout is the dial timeout when timeoutMemberConnect is
	// 0 (LoxiLB's 500 ms).
	DefaultConnectTimeout = 500 * time.Millisecond
	// DefaultPrefillTimeout is the P/D prefill deadline when neither the
	// rule nor LLB_PD_PREFILL_TIMEOUT_SEC sets one (30 s; use ≥ 180 s for
	// 32k-token contexts).
	DefaultPrefillTimeout = 30 * time.Second
	// DefaultMaxStreamDuration is the whole-request cap when
	// max_stream_duration_sec is 0 (LoxiLB's 86400 s).
	DefaultMaxStreamDuration = 24 * time.Hour
	// DefaultTokenizeTimeout bounds the Tier-1.5 /tokenize call (the
	// inventory client's own default; the lower of the two applies).
	DefaultTokenizeTimeout = inventory.DefaultTokenizeTimeout
	// DefaultDecodeTimeout bounds the wait for the first event of a
	// streamed P/D decode leg (LLB_PD_DECODE_TIMEOUT_SEC; LoxiLB names the
	// error pd_decode_timeout but publishes no value). A frozen decode
	// worker is then left after a minute, and the request — the client has
	// nothing yet — is sent to another pair.
	DefaultDecodeTimeout = 60 * time.Second
	// DefaultStreamIdleTimeout bounds the silence between two reads of a
	// response that is reaching the client (LLB_PD_IDLE_TIMEOUT_SEC), when
	// the rule sets no timeoutMemberData: a stream from a frozen worker is
	// cut after it instead of lasting the max stream duration (24 h).
	DefaultStreamIdleTimeout = 60 * time.Second
	// DefaultBodyReadTimeout bounds reading a request body.
	DefaultBodyReadTimeout = 60 * time.Second
	// DefaultMaxConnectRetries is how many other endpoints a single-pool
	// request tries after a connect failure.
	DefaultMaxConnectRetries = 2
	// DefaultPrefixHashLevel is chwbl_prefix_hash_level's default.
	DefaultPrefixHashLevel = 1
	// MaxKVParamsBytes bounds the kv_transfer_params taken from a prefill
	// response (LoxiLB's 64 KiB); larger params are dropped and the decode
	// leg recomputes the prefill.
	MaxKVParamsBytes = 64 << 10
	// DefaultPrefillResponseLimit bounds the prefill leg's response body.
	DefaultPrefillResponseLimit = 8 << 20
)

// EndpointConfig is one rule endpoint as the data plane needs it. Its index
// in RuleConfig.Endpoints is its identity (ladder decisions, Avoid bits).
type EndpointConfig struct {
	// Addr is endpointIP:targetPort, where the OpenAI API listens.
	Addr netip.AddrPort
	// NixlPort is the worker's NIXL side-channel port (nixl_port; 0 means
	// targetPort). Informational for the data plane: vLLM carries the
	// side-channel address inside kv_transfer_params itself.
	NixlPort uint16
	// Role is ep_role: none (single pool or P/D rescue), prefill or decode.
	Role ladder.Role
	// Probe holds the endpoint-level health-monitor overrides.
	Probe EndpointProbe
}

// HasherConfig says how Tier-1.5 block keys are computed when Deps.Hasher
// is nil (the runtime normally builds one hasher per rule and shares it
// with the inventory mirror, passing it in Deps).
type HasherConfig struct {
	// Algo is kvHashAlgo: "sha256_cbor" or "xxhash_cbor"; "" means
	// sha256_cbor. Ignored when TokenKeyed.
	Algo string
	// BlockSize is kvBlockSize in tokens; 0 means 16.
	BlockSize int
	// Seed is the workers' PYTHONHASHSEED (kvNoneHashSeed or
	// LLB_KV_NONE_HASH_SEED); "" is a valid seed.
	Seed string
	// TokenKeyed selects llb's own token-keyed chain (kvBlockKey "tokens")
	// instead of recomputing vLLM's digests.
	TokenKeyed bool
}

// Build returns the ChainHasher the settings describe.
func (h HasherConfig) Build() (inventory.ChainHasher, error) {
	bs := h.BlockSize
	if bs == 0 {
		bs = ladder.DefaultKVBlockSize
	}
	if h.TokenKeyed {
		return inventory.NewTokenHasher(bs)
	}
	algo := inventory.AlgoSHA256CBOR
	if h.Algo != "" {
		a, err := inventory.ParseAlgo(h.Algo)
		if err != nil {
			return nil, err
		}
		algo = a
	}
	return inventory.NewHasher(algo, bs, h.Seed)
}

// RuleConfig is everything the data plane needs for one mode:4 rule. The
// runtime builds it from the REST rule; it is read-only once a Listener is
// built from it.
type RuleConfig struct {
	// Name labels the rule in metrics (service="…") and logs; usually the
	// rule key or name.
	Name string
	// VIP is externalIP; the listener binds VIP:Port. The unspecified
	// address binds every interface.
	VIP netip.Addr
	// Port is the rule's port (0 picks a free port; tests use it).
	Port uint16
	// Endpoints are the rule's endpoints, in rule order (1–32).
	Endpoints []EndpointConfig
	// PDDisagg is pd_disagg_mode: decisions with a decode endpoint run the
	// two-leg NIXL protocol.
	PDDisagg bool
	// KVExactMode is kvExactMode: 1 (P/D) or 3 (single pool) makes the
	// gateway tokenize and hash the prompt for Tier 1.5.
	KVExactMode ladder.KVExactMode
	// Hasher describes the block-key chain (see HasherConfig).
	Hasher HasherConfig
	// PrefixHashLevel is chwbl_prefix_hash_level (1, 2 or 3; 0 means 1): how
	// much of the prompt the CHWBL prefix hash covers — 256, 1024 or 4096
	// bytes of the completion prompt, or of the chat rendering up to and
	// including the first user message (see PrefixSpan).
	PrefixHashLevel int
	// PrefixHashFlags is chwbl_prefix_hash_flags (0–255; 0 = auto). Bit 0
	// folds the LoRA name into the prefix hash, bit 3 cache_salt; auto folds
	// both. Bits 1, 2 and 4–7 (image, audio, tools, session, RAG) are
	// accepted and ignored.
	PrefixHashFlags int
	// SessionHeaderName is session_header_name: the persist (sel:3) key's
	// source — "<Header>", "cookie:<name>", "query:<param>" or "basic-auth";
	// "" keys on the client IP. A request without the value falls back to
	// the client IP.
	SessionHeaderName string
	// ConnectTimeout is timeoutMemberConnect; 0 means 500 ms.
	ConnectTimeout time.Duration
	// DataTimeout is timeoutMemberData: the longest the backend may stay
	// silent while a response is read; 0 disables it. Ignored when SSEMode
	// (SSE streams may idle between tokens).
	DataTimeout time.Duration
	// PrefillTimeout bounds the P/D prefill leg (connect to full JSON); 0
	// means 30 s. Fill it from LLB_PD_PREFILL_TIMEOUT_SEC or
	// pd_prefill_timeout_sec.
	PrefillTimeout time.Duration
	// DecodeTimeout bounds the wait for the first byte of a streamed P/D
	// decode leg (when timeoutMemberData is not set); 0 means
	// DefaultDecodeTimeout, negative disables it.
	DecodeTimeout time.Duration
	// StreamIdleTimeout bounds the silence between reads of a response
	// reaching the client (when timeoutMemberData is not set); 0 means
	// DefaultStreamIdleTimeout, negative disables it.
	StreamIdleTimeout time.Duration
	// MaxStreamDuration is max_stream_duration_sec: a per-request deadline
	// covering routing, both legs and the whole stream; 0 means 24 h. The
	// server itself has no write timeout, so long SSE streams live exactly
	// this long.
	MaxStreamDuration time.Duration
	// SSEMode is sse_mode: suppresses DataTimeout.
	SSEMode bool
	// Paused is adminStateUp:false: the listener stays bound but every new
	// request is answered 503 service_unavailable (with Retry-After); the
	// requests in flight when the rule was paused finish.
	Paused bool
	// BodyLimit caps request bodies in bytes; 0 means 16 MiB. Larger bodies
	// get 413.
	BodyLimit int64
	// BodyReadTimeout bounds reading a request body; 0 means 60 s.
	BodyReadTimeout time.Duration
	// TokenizeTimeout bounds the Tier-1.5 /tokenize call; 0 means 500 ms.
	// A timeout is a Tier-1.5 guard (tokenize), never a client error.
	TokenizeTimeout time.Duration
	// TokenizerDir is the Hugging Face tokenizer directory (or a root of
	// them named by served model) Tier 1.5 tokenizes with in process
	// (kvTokenizerDir or --tokenizer-dir); "" calls the engines'
	// /tokenize. See tokenizer.LocalConfig.Dir and ruleTokenizer.
	TokenizerDir string
	// MaxConnectRetries is how many other endpoints a request tries after a
	// connect failure before any byte reached the client; 0 means 2, a
	// negative value disables retries. The P/D prefill leg always gets
	// exactly one retry (LoxiLB's rule).
	MaxConnectRetries int
	// HideBackendAddrs keeps endpoint addresses out of what clients see:
	// X-Llb-Route has no prefill_addr/decode_addr, and error bodies no
	// upstream error text. Operators still find both in the access log.
	HideBackendAddrs bool
	// AccessLog writes the access log line of every request at Info; off,
	// the line is Debug detail (seen with --log-level debug).
	AccessLog bool
	// HopID identifies this llb instance in the X-Llb-Hop header of every
	// forwarded request and probe; a request arriving with it has looped
	// and gets 508. "" mints a random one per handler (the runtime passes
	// the daemon's, so every rule of one process shares it).
	HopID string
	// TrustForwardedHeaders keeps the client's X-Forwarded-For chain and
	// appends to it; by default llb replaces X-Forwarded-* with its own view.
	TrustForwardedHeaders bool
	// LoRAOf is the LoRA hook: it returns the LoRA adapter name a request's
	// model names, or "" for a base model. nil means no LoRA adapters. The
	// name is folded into the Tier-1.5 extra keys and the prefix hash.
	LoRAOf func(model string) string
	// Probe is the rule's health-probe settings.
	Probe ProbeConfig
}

// Validate reports every problem at once (errors.Join of errors wrapping
// ErrInvalidConfig).
func (c *RuleConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidConfig))
	}
	if !c.VIP.IsValid() {
		bad("externalIP", "not set")
	}
	if n := len(c.Endpoints); n == 0 || n > ladder.MaxEndpoints {
		bad("endpoints", "%d endpoints; a rule needs 1–%d", n, ladder.MaxEndpoints)
	}
	var prefill, decode int
	for i, ep := range c.Endpoints {
		if !ep.Addr.IsValid() || ep.Addr.Port() == 0 {
			bad(fmt.Sprintf("endpoints[%d]", i), "address %q is not ip:port", ep.Addr)
		}
		switch ep.Role {
		case ladder.RolePrefill:
			prefill++
		case ladder.RoleDecode:
			decode++
		case ladder.RoleNone:
		default:
			bad(fmt.Sprintf("endpoints[%d].ep_role", i), "%d is out of range 0–2", ep.Role)
		}
		if err := ep.Probe.validate(); err != nil {
			bad(fmt.Sprintf("endpoints[%d]", i), "%v", err)
		}
	}
	if c.PDDisagg && (prefill == 0 || decode == 0) {
		bad("endpoints", "pd_disagg_mode needs a prefill and a decode endpoint; have %d and %d", prefill, decode)
	}
	switch c.KVExactMode {
	case ladder.KVOff:
	case ladder.KVPrefill:
		if !c.PDDisagg {
			bad("kvExactMode", "1 needs pd_disagg_mode")
		}
	case ladder.KVSinglePool:
		if c.PDDisagg {
			bad("kvExactMode", "3 forbids pd_disagg_mode")
		}
	default:
		bad("kvExactMode", "%d is not supported (0, 1 or 3)", c.KVExactMode)
	}
	if c.PrefixHashLevel < 0 || c.PrefixHashLevel > 3 {
		bad("chwbl_prefix_hash_level", "%d is out of range 1–3", c.PrefixHashLevel)
	}
	if c.PrefixHashFlags < 0 || c.PrefixHashFlags > 255 {
		bad("chwbl_prefix_hash_flags", "%d is out of range 0–255", c.PrefixHashFlags)
	}
	if _, err := parseSessionHeader(c.SessionHeaderName); err != nil {
		bad("session_header_name", "%v", err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"timeoutMemberConnect", c.ConnectTimeout}, {"timeoutMemberData", c.DataTimeout},
		{"prefill timeout", c.PrefillTimeout}, {"max_stream_duration_sec", c.MaxStreamDuration},
		{"body read timeout", c.BodyReadTimeout}, {"tokenize timeout", c.TokenizeTimeout},
	} {
		if d.v < 0 {
			bad(d.name, "must not be negative")
		}
	}
	if c.BodyLimit < 0 {
		bad("body limit", "must not be negative")
	}
	if err := c.Probe.validate(); err != nil {
		bad("probe", "%v", err)
	}
	return errors.Join(errs...)
}

// Effective values (defaults applied).

func (c *RuleConfig) connectTimeout() time.Duration {
	return orDefault(c.ConnectTimeout, DefaultConnectTimeout)
}

func (c *RuleConfig) prefillTimeout() time.Duration {
	return orDefault(c.PrefillTimeout, DefaultPrefillTimeout)
}

func (c *RuleConfig) maxStreamDuration() time.Duration {
	return orDefault(c.MaxStreamDuration, DefaultMaxStreamDuration)
}

func (c *RuleConfig) decodeTimeout() time.Duration {
	if c.DecodeTimeout < 0 {
		return 0
	}
	return orDefault(c.DecodeTimeout, DefaultDecodeTimeout)
}

func (c *RuleConfig) streamIdleTimeout() time.Duration {
	if c.StreamIdleTimeout < 0 {
		return 0
	}
	return orDefault(c.StreamIdleTimeout, DefaultStreamIdleTimeout)
}

func (c *RuleConfig) tokenizeTimeout() time.Duration {
	return orDefault(c.TokenizeTimeout, DefaultTokenizeTimeout)
}

func (c *RuleConfig) bodyReadTimeout() time.Duration {
	return orDefault(c.BodyReadTimeout, DefaultBodyReadTimeout)
}

func (c *RuleConfig) dataTimeout() time.Duration {
	if c.SSEMode {
		return 0
	}
	return c.DataTimeout
}

func (c *RuleConfig) bodyLimit() int64 {
	if c.BodyLimit <= 0 {
		return DefaultBodyLimit
	}
	return c.BodyLimit
}

func (c *RuleConfig) maxConnectRetries() int {
	switch {
	case c.MaxConnectRetries < 0:
		return 0
	case c.MaxConnectRetries == 0:
		return DefaultMaxConnectRetries
	}
	return c.MaxConnectRetries
}

func orDefault(v, d time.Duration) time.Duration {
	if v <= 0 {
		return d
	}
	return v
}

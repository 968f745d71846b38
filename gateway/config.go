package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/tokenizer"
)

// ErrInvalidConfig classifies a rule the gateway cannot run: one that did
// not come from rule.Compile (the rule package validates every field), or
// settings it cannot use. Test with errors.Is.
var ErrInvalidConfig = errors.New("gateway: invalid rule config")

// Defaults of the daemon-wide Options (a rule's own bounds come compiled,
// see rule.Timeouts).
const (
	// DefaultTokenizeTimeout bounds the Tier-1.5 /tokenize call (the
	// tokenizer client's own default; the lower of the two applies).
	DefaultTokenizeTimeout = tokenizer.DefaultRemoteTimeout
	// DefaultBodyReadTimeout bounds reading a request body.
	DefaultBodyReadTimeout = 60 * time.Second
	// DefaultMaxConnectRetries is how many other endpoints a single-pool
	// request tries after a connect failure.
	DefaultMaxConnectRetries = 2
	// MaxKVParamsBytes bounds the kv_transfer_params taken from a prefill
	// response (LoxiLB's 64 KiB); larger params are dropped and the decode
	// leg recomputes the prefill.
	MaxKVParamsBytes = 64 << 10
	// DefaultPrefillResponseLimit bounds the prefill leg's response body.
	DefaultPrefillResponseLimit = 8 << 20
)

// Options are the data plane's daemon-wide settings, the same for every
// rule of one llbd (a rule's own meaning is its *rule.Compiled). The zero
// value is every default.
type Options struct {
	// BodyLimit caps request bodies in bytes; 0 means DefaultBodyLimit
	// (16 MiB). Larger bodies get 413.
	BodyLimit int64
	// BodyReadTimeout bounds reading a request body; 0 means 60 s.
	BodyReadTimeout time.Duration
	// TokenizeTimeout bounds the Tier-1.5 /tokenize call; 0 means 500 ms.
	// A timeout is a Tier-1.5 guard (tokenize), never a client error.
	TokenizeTimeout time.Duration
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
	// and gets 508. "" mints a random one per handler (the daemon passes
	// its own, so every rule of one process shares it).
	HopID string
	// TrustForwardedHeaders keeps the client's X-Forwarded-For chain and
	// appends to it; by default llb replaces X-Forwarded-* with its own view.
	TrustForwardedHeaders bool
	// ClientSendTimeout is the send bound: a client that accepts no byte of
	// its answer for this long has its connection closed (an h2c stream
	// reset; a stream's upstream leg ends with it, reported client-gone)
	// and counted in llb_client_send_timeouts_total. 0 means
	// DefaultClientSendTimeout (60 s); a negative value turns it off,
	// leaving the max stream duration as the only bound. See sendbound.go.
	ClientSendTimeout time.Duration
}

// withDefaults fills the zero fields.
func (o Options) withDefaults() Options {
	if o.BodyLimit <= 0 {
		o.BodyLimit = DefaultBodyLimit
	}
	if o.BodyReadTimeout <= 0 {
		o.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if o.TokenizeTimeout <= 0 {
		o.TokenizeTimeout = DefaultTokenizeTimeout
	}
	switch {
	case o.MaxConnectRetries < 0:
		o.MaxConnectRetries = 0
	case o.MaxConnectRetries == 0:
		o.MaxConnectRetries = DefaultMaxConnectRetries
	}
	if o.HopID == "" {
		o.HopID = NewHopID()
	}
	if o.ClientSendTimeout == 0 {
		o.ClientSendTimeout = DefaultClientSendTimeout
	}
	return o
}

// checkCompiled refuses a rule that did not come from rule.Compile: the
// gateway applies no default of its own, so a zero bound would end every
// request at once. The rule package has checked everything else.
func checkCompiled(c *rule.Compiled) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidConfig))
	}
	if c == nil {
		return fmt.Errorf("no compiled rule: %w", ErrInvalidConfig)
	}
	if !c.VIP.IsValid() {
		bad("externalIP", "not set")
	}
	if n := len(c.Endpoints); n == 0 || n > ladder.MaxEndpoints {
		bad("endpoints", "%d endpoints; a rule needs 1–%d", n, ladder.MaxEndpoints)
	}
	for i := range c.Endpoints {
		if a := c.Endpoints[i].Addr; !a.IsValid() || a.Port() == 0 {
			bad(fmt.Sprintf("endpoints[%d]", i), "address %q is not ip:port", a)
		}
	}
	t := &c.Timeouts
	if t.Connect <= 0 || t.MaxStream <= 0 || (c.Spec.PDDisagg && t.Prefill <= 0) {
		bad("timeouts", "connect %v, max stream %v, prefill %v: not compiled (rule.Compile fills every bound)", t.Connect, t.MaxStream, t.Prefill)
	}
	if t.Data < 0 || t.Decode < 0 || t.StreamIdle < 0 {
		bad("timeouts", "negative bound")
	}
	return errors.Join(errs...)
}

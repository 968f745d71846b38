package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/llbproject/llb/actors"
)

// Upstream transport: one tuned http.Transport per listener, shared by all
// of the rule's requests and legs (keep-alive pools per endpoint).

// Transport defaults.
const (
	// DefaultMaxIdleConnsPerHost keeps enough warm connections per endpoint
	// for a busy worker (net/http's default of 2 would redial constantly).
	DefaultMaxIdleConnsPerHost = 256
	// DefaultIdleConnTimeout closes idle upstream connections.
	DefaultIdleConnTimeout = 90 * time.Second
)

// TransportConfig tunes NewTransport.
type TransportConfig struct {
	// ConnectTimeout bounds each dial; 0 means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// MaxIdleConnsPerHost; 0 means DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
	// IdleConnTimeout; 0 means DefaultIdleConnTimeout.
	IdleConnTimeout time.Duration
}

// NewTransport returns the upstream transport: HTTP/1.1 with keep-alives,
// a bounded dial, no proxy from the environment, and no transparent
// compression (Accept-Encoding is the client's business and bodies are
// relayed as the backend sent them). No response-header timeout: prefill
// and time-to-first-token are bounded per request instead.
func NewTransport(cfg TransportConfig) *http.Transport {
	d := &net.Dialer{Timeout: orDefault(cfg.ConnectTimeout, DefaultConnectTimeout), KeepAlive: 30 * time.Second}
	perHost := cfg.MaxIdleConnsPerHost
	if perHost <= 0 {
		perHost = DefaultMaxIdleConnsPerHost
	}
	return &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		MaxIdleConns:        0, // no global cap; per-host caps bound it (≤ 32 endpoints)
		MaxIdleConnsPerHost: perHost,
		IdleConnTimeout:     orDefault(cfg.IdleConnTimeout, DefaultIdleConnTimeout),
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     32 << 10,
		ReadBufferSize:      32 << 10,
	}
}

// classifyUpstream classifies an upstream round-trip or body-read error for
// the breaker. clientCtx is the inbound request's context: when it is done
// the client left, which is no one's fault.
func classifyUpstream(err error, clientCtx context.Context) actors.Failure {
	if clientCtx.Err() != nil {
		return actors.FailClientGone
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return actors.FailConnect
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return actors.FailConnect
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return actors.FailTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return actors.FailTimeout
	}
	return actors.FailReset
}

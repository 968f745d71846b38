package gateway

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Listener serving: one HTTP server per mode:4 rule on externalIP:port.

// Server timeouts. None of them bounds a response: long SSE streams are
// bounded per request (RuleConfig.MaxStreamDuration, DataTimeout).
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout closes keep-alive client connections idle this long.
	DefaultIdleTimeout = 120 * time.Second
)

// ErrBind classifies a listener that could not bind its address; the
// runtime reports it in the rule's REST status (other rules keep running).
var ErrBind = errors.New("gateway: cannot listen")

// Listener is one rule's HTTP listener: HTTP/1.1 and cleartext HTTP/2 with
// prior knowledge (h2c), serving the rule's Handler.
//
// Lifecycle: NewListener → Start (once) → Shutdown or Close (once; later
// calls return the first result). Safe for concurrent use.
type Listener struct {
	h      atomic.Pointer[Handler] // the handler new requests get
	addr   netip.AddrPort
	srv    *http.Server
	base   context.Context
	cancel context.CancelCauseFunc // cuts every request with errCut

	mu      sync.Mutex // guards ln, started, serveErr, retired
	ln      net.Listener
	retired []*Handler // replaced handlers that may still be serving
	started bool
	done    chan struct{} // closed when Serve returned
	served  error

	stopOnce sync.Once
	stopErr  error
}

// NewListener validates cfg and builds the rule's listener (not yet bound).
func NewListener(cfg RuleConfig, deps Deps) (*Listener, error) {
	h, err := NewHandler(cfg, deps)
	if err != nil {
		return nil, err
	}
	return newListener(h), nil
}

// newListener builds an unbound listener serving h on h's VIP:port.
func newListener(h *Handler) *Listener {
	base, cancel := context.WithCancelCause(context.Background())
	l := &Listener{addr: netip.AddrPortFrom(h.cfg.VIP, h.cfg.Port), base: base, cancel: cancel, done: make(chan struct{})}
	l.h.Store(h)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	l.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.h.Load().ServeHTTP(w, r) }),
		Protocols:         &protos,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          log.New(&serverErrorLog{log: h.log}, "", 0),
	}
	return l
}

// Handler returns the handler new requests get.
func (l *Listener) Handler() *Handler { return l.h.Load() }

// Swap makes h serve every request accepted from now on (a rule replace
// with a new configuration, on the same VIP:port) and returns the handler
// it replaces. Requests already inside the old handler finish there; wait
// for them with old.Drain before releasing what the old handler uses.
func (l *Listener) Swap(h *Handler) (old *Handler) {
	old = l.h.Swap(h)
	l.mu.Lock()
	l.retired = append(l.retired, old)
	l.mu.Unlock()
	return old
}

// Start binds VIP:port and serves in the background. A bind failure is
// returned (wrapping ErrBind and the OS error) and leaves nothing running.
func (l *Listener) Start() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return fmt.Errorf("gateway: listener %s already started", l.addr)
	}
	ln, err := net.Listen("tcp", l.addr.String())
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrBind, l.addr, err)
	}
	l.ln, l.started = ln, true
	go func() {
		err := l.srv.Serve(ln)
		l.mu.Lock()
		if !errors.Is(err, http.ErrServerClosed) {
			l.served = err
		}
		l.mu.Unlock()
		close(l.done)
	}()
	return nil
}

// Addr returns the bound address (useful with port 0), or nil before Start.
func (l *Listener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		return nil
	}
	return l.ln.Addr()
}

// Done is closed when the server stopped serving (after Shutdown/Close, or
// when accepting failed); Err then tells why.
func (l *Listener) Done() <-chan struct{} { return l.done }

// Err returns the error that stopped serving, nil after a requested stop.
func (l *Listener) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.served
}

// Shutdown stops accepting, lets in-flight requests and streams finish
// until ctx ends, then cuts what remains (their upstream legs are
// cancelled and reported as client-gone). When it returns, every handler
// has returned (up to CutGrace after the cut), so no Report or Finish
// follows. It returns ctx.Err() when it had to cut streams, nil when
// everything drained.
func (l *Listener) Shutdown(ctx context.Context) error {
	l.stopOnce.Do(func() {
		err := l.srv.Shutdown(ctx)
		if err != nil {
			l.cancel(errCut) // cancel upstream legs so handlers return now
			_ = l.srv.Close()
		}
		l.cancel(errCut)
		l.stopErr = err
		l.waitServe()
		l.waitHandlers()
	})
	return l.stopErr
}

// errCut is the cause of the request contexts a listener cancels when it
// cuts what is still in flight (a drain deadline, Close). A handler whose
// request was cut aborts the client connection: the client is still there
// and must not take the cut for a complete answer (an empty 200, or a
// stream ended cleanly without its [DONE]).
var errCut = errors.New("gateway: listener stopped; in-flight request cut")

// CutGrace bounds how long Shutdown and Close wait for cut handlers to
// return (they report their legs and finish their tickets on the way out).
const CutGrace = 5 * time.Second

// waitHandlers waits up to CutGrace for every handler to return, so no
// Report or Finish reaches the router after Shutdown/Close returned.
func (l *Listener) waitHandlers() {
	l.mu.Lock()
	hs := append([]*Handler{l.h.Load()}, l.retired...)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), CutGrace)
	defer cancel()
	for _, h := range hs {
		if err := h.Drain(ctx); err != nil {
			h.log.Warn().Dur("grace", CutGrace).Msg("handlers still running after shutdown")
		}
		if h.ownRT != nil {
			h.ownRT.CloseIdleConnections()
		}
	}
}

// Drain waits until no request is inside h (or ctx ends, returning its
// error). New requests may still enter h unless it was swapped out.
func (h *Handler) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() { h.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the listener immediately, cutting in-flight requests, and
// waits (up to CutGrace) for their handlers to return.
func (l *Listener) Close() error {
	l.stopOnce.Do(func() {
		l.cancel(errCut)
		l.stopErr = l.srv.Close()
		l.waitServe()
		l.waitHandlers()
	})
	return l.stopErr
}

func (l *Listener) waitServe() {
	l.mu.Lock()
	started := l.started
	l.mu.Unlock()
	if started {
		<-l.done
	}
}

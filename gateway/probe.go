package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/llbproject/llb/rule"
)

// Health probes: single-shot probe functions built from a compiled rule's
// probe settings (rule.Probe, rule.EndpointProbe; the rule package owns
// their defaults and checks). The consecutive-failure state machine and the
// schedule (period, retries, backoff) belong to the endpoint actor.
// Probe types are rule.ProbeHTTP, rule.ProbeHTTPS (the server certificate
// is not verified: probes check liveness, not identity, as LoxiLB's tls
// probe does; DomainName sets SNI and Host), rule.ProbeTCP (a connect,
// optionally sending Request and expecting Response) and rule.ProbeNone.

// maxProbeBody bounds how much of a probe answer is searched for Response.
const maxProbeBody = 64 << 10

// Probe errors; every probe failure wraps one of them (errors.Is) inside a
// *ProbeError.
var (
	// ErrProbeOff: the rule does not probe (probetype none); NewProbe
	// returns no function.
	ErrProbeOff = errors.New("gateway: probing is off")
	// ErrProbeConnect: the endpoint refused or could not be reached.
	ErrProbeConnect = errors.New("gateway: probe could not connect")
	// ErrProbeTimeout: the probe did not finish within its timeout.
	ErrProbeTimeout = errors.New("gateway: probe timed out")
	// ErrProbeStatus: the HTTP status is not an expected code.
	ErrProbeStatus = errors.New("gateway: probe got an unexpected status")
	// ErrProbeBody: the answer does not contain the expected response.
	ErrProbeBody = errors.New("gateway: probe answer lacks the expected response")
	// ErrProbeIO: the connection broke while probing.
	ErrProbeIO = errors.New("gateway: probe connection failed")
)

// ProbeError is one failed probe.
type ProbeError struct {
	// Target is the probed address, ip:port.
	Target string
	// Kind is one of the ErrProbe* sentinels.
	Kind error
	// Detail says what was seen ("status 503", the dial error, ...).
	Detail string
}

// Error renders "probe <target>: <kind>: <detail>" ("probe: …" without a
// target).
func (e *ProbeError) Error() string {
	if e.Target == "" {
		return "probe: " + e.Kind.Error() + ": " + e.Detail
	}
	return "probe " + e.Target + ": " + e.Kind.Error() + ": " + e.Detail
}

// Unwrap returns Kind.
func (e *ProbeError) Unwrap() error { return e.Kind }

// Timeout reports whether the probe only timed out (ErrProbeTimeout): the
// endpoint may be loaded rather than gone, which the endpoint's health
// state machine weighs less than a refusal.
func (e *ProbeError) Timeout() bool { return e.Kind == ErrProbeTimeout }

// Probe checks one endpoint once; nil means healthy. It honours ctx and
// its own attempt timeout, whichever ends first.
type Probe func(ctx context.Context) error

// probeBoundKey is a context key: a time.Duration that replaces a probe's
// own attempt timeout (EndpointWatch.Probe reads a late answer past it).
type probeBoundKey struct{}

// bound is the probe's own timeout: d, or the one ctx carries.
func bound(ctx context.Context, d time.Duration) time.Duration {
	if b, ok := ctx.Value(probeBoundKey{}).(time.Duration); ok && b > 0 {
		return b
	}
	return d
}

// NewProbe builds endpoint ep's probe from the rule's settings p and the
// endpoint's overrides; hopID goes in the X-Llb-Hop header of HTTP probes
// (a probe that loops back into llb is answered 508 and fails instead of
// being forwarded again). It returns ErrProbeOff for probetype none and an
// error wrapping ErrInvalidConfig for settings the rule package would have
// refused.
func NewProbe(p rule.Probe, ep *rule.CompiledEndpoint, hopID string) (Probe, error) {
	if p.Type == rule.ProbeNone {
		return nil, ErrProbeOff
	}
	if p.Period <= 0 || p.AttemptTimeout <= 0 || !ep.Probe.Target.IsValid() {
		return nil, fmt.Errorf("probe period %v, attempt timeout %v, target %v: not compiled: %w", p.Period, p.AttemptTimeout, ep.Probe.Target, ErrInvalidConfig)
	}
	target := ep.Probe.Target.String()
	timeout := p.AttemptTimeout
	switch p.Type {
	case rule.ProbeTCP:
		tp := &tcpProbe{target: target, timeout: timeout, send: []byte(p.Request), expect: []byte(p.Response)}
		return tp.run, nil
	case rule.ProbeHTTP, rule.ProbeHTTPS:
	default:
		return nil, fmt.Errorf("probetype %q is not served on a mode:4 rule: %w", p.Type, ErrInvalidConfig)
	}
	codes, err := rule.ParseExpectedCodes(ep.Probe.ExpectedCodes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	scheme := "http"
	tr := &http.Transport{
		Proxy:              nil,
		DisableKeepAlives:  true, // every probe proves a fresh connection
		DisableCompression: true,
		DialContext:        (&net.Dialer{}).DialContext, // the attempt's context bounds the dial
	}
	if p.Type == rule.ProbeHTTPS {
		scheme = "https"
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, ServerName: ep.Probe.DomainName} //nolint:gosec // liveness probe, see above
	}
	hp := &httpProbe{
		url: scheme + "://" + target + ep.Probe.Path, target: target, method: ep.Probe.Method, host: ep.Probe.DomainName,
		codes: codes, expect: []byte(p.Response), timeout: timeout, rt: tr, hop: hopID,
	}
	return hp.run, nil
}

type httpProbe struct {
	url, target, method, host string
	hop                       string
	codes                     []rule.CodeRange
	expect                    []byte
	timeout                   time.Duration
	rt                        http.RoundTripper
}

func (p *httpProbe) fail(kind error, detail string) error {
	return &ProbeError{Target: p.target, Kind: kind, Detail: detail}
}

func (p *httpProbe) run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, bound(ctx, p.timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, p.method, p.url, nil)
	if err != nil {
		return p.fail(ErrProbeIO, err.Error())
	}
	if p.host != "" {
		req.Host = p.host
	}
	req.Header.Set("User-Agent", "llb-probe")
	if p.hop != "" {
		req.Header.Set(HeaderHop, p.hop)
	}
	resp, err := p.rt.RoundTrip(req)
	if err != nil {
		return p.fail(probeKind(ctx, err), err.Error())
	}
	defer resp.Body.Close()
	ok := false
	for _, c := range p.codes {
		if resp.StatusCode >= c.Lo && resp.StatusCode <= c.Hi {
			ok = true
			break
		}
	}
	if !ok {
		return p.fail(ErrProbeStatus, "status "+strconv.Itoa(resp.StatusCode))
	}
	if len(p.expect) == 0 {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody))
	if err != nil {
		return p.fail(probeKind(ctx, err), err.Error())
	}
	if !bytes.Contains(body, p.expect) {
		return p.fail(ErrProbeBody, fmt.Sprintf("want %q in the first %d bytes", p.expect, maxProbeBody))
	}
	return nil
}

type tcpProbe struct {
	target       string
	timeout      time.Duration
	send, expect []byte
}

func (p *tcpProbe) fail(kind error, detail string) error {
	return &ProbeError{Target: p.target, Kind: kind, Detail: detail}
}

func (p *tcpProbe) run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, bound(ctx, p.timeout))
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", p.target)
	if err != nil {
		return p.fail(probeKind(ctx, err), err.Error())
	}
	defer conn.Close()
	if len(p.send) == 0 && len(p.expect) == 0 {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if len(p.send) > 0 {
		if _, err := conn.Write(p.send); err != nil {
			return p.fail(probeKind(ctx, err), err.Error())
		}
	}
	if len(p.expect) == 0 {
		return nil
	}
	buf := make([]byte, 0, 4<<10)
	for len(buf) < maxProbeBody {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := conn.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if bytes.Contains(buf, p.expect) {
			return nil
		}
		if err != nil {
			if err == io.EOF {
				return p.fail(ErrProbeBody, fmt.Sprintf("connection closed without %q", p.expect))
			}
			return p.fail(probeKind(ctx, err), err.Error())
		}
	}
	return p.fail(ErrProbeBody, fmt.Sprintf("want %q in the first %d bytes", p.expect, maxProbeBody))
}

// probeKind classifies a probe I/O error.
func probeKind(ctx context.Context, err error) error {
	var ne net.Error
	switch {
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return ErrProbeTimeout
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return ErrProbeConnect
	}
	return ErrProbeIO
}

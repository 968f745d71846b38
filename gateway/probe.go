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
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Health probes: single-shot probe functions built from a rule's probe
// fields. The consecutive-failure state machine and the schedule (period,
// retries, backoff) belong to the endpoint actor; ProbeConfig carries the
// period and retry count for it.

// Probe types (REST probetype) the data plane supports.
const (
	// ProbeHTTP is an HTTP GET (by default) expecting a 2xx answer.
	ProbeHTTP = "http"
	// ProbeHTTPS is ProbeHTTP over TLS. The server certificate is not
	// verified (probes check liveness, not identity; LoxiLB's tls probe does
	// the same); DomainName sets SNI and Host.
	ProbeHTTPS = "https"
	// ProbeTCP is a TCP connect, optionally sending Request and expecting
	// Response in the answer.
	ProbeTCP = "tcp"
	// ProbeNone disables probing.
	ProbeNone = "none"
)

// Probe defaults.
const (
	// DefaultProbePath is what a mode:4 rule probes without probereq.
	DefaultProbePath = "/health"
	// DefaultProbePeriod is probeTimeout's default (LoxiLB: it is the period).
	DefaultProbePeriod = 60 * time.Second
	// DefaultProbeRetries is probeRetries' default.
	DefaultProbeRetries = 2
	// DefaultProbeAttemptTimeout bounds one probe (IGW's 5 s client timeout).
	DefaultProbeAttemptTimeout = 5 * time.Second
	// maxProbeBody bounds how much of a probe answer is searched for
	// Response.
	maxProbeBody = 64 << 10
)

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

// Error renders "probe <target>: <kind>: <detail>".
func (e *ProbeError) Error() string {
	return "probe " + e.Target + ": " + e.Kind.Error() + ": " + e.Detail
}

// Unwrap returns Kind.
func (e *ProbeError) Unwrap() error { return e.Kind }

// ProbeConfig is a rule's probe settings (REST serviceArguments).
type ProbeConfig struct {
	// Type is probetype: "http", "https", "tcp", "none"; "" means the mode:4
	// default, an HTTP GET /health expecting 2xx.
	Type string
	// Port is probeport; 0 probes the endpoint's own port.
	Port uint16
	// Request is probereq: the HTTP path (a leading "/" is added), or for
	// tcp a payload to send after connecting.
	Request string
	// Response is proberesp: a substring the answer body must contain; ""
	// checks nothing beyond the status.
	Response string
	// Period is probeTimeout, which LoxiLB uses as the probe period; 0 means
	// 60 s. For the scheduler (the endpoint actor).
	Period time.Duration
	// Retries is probeRetries: consecutive failures before the endpoint is
	// marked down; 0 means 2. For the scheduler.
	Retries int
	// AttemptTimeout bounds one probe; 0 means 5 s, capped at Period.
	AttemptTimeout time.Duration
	// HopID is sent in the X-Llb-Hop header of HTTP probes (the rule's
	// RuleConfig.HopID): a probe that loops back into llb is answered 508
	// and fails, instead of being forwarded again.
	HopID string
}

// EndpointProbe holds an endpoint's own health-monitor fields (REST
// endpoints[]); each overrides the rule's when set.
type EndpointProbe struct {
	// MonitorAddress is probed instead of the endpoint's IP.
	MonitorAddress string
	// HTTPMethod is the HTTP method; "" means GET.
	HTTPMethod string
	// URLPath overrides the rule's probereq path.
	URLPath string
	// ExpectedCodes lists accepted statuses: "200", "200,202", "200-204";
	// "" means any 2xx.
	ExpectedCodes string
	// HTTPVersion is "1.0" or "1.1"; informational (probes speak HTTP/1.1).
	HTTPVersion string
	// DomainName sets the Host header and TLS SNI.
	DomainName string
}

func (p *EndpointProbe) validate() error {
	var errs []error
	if p.MonitorAddress != "" {
		if _, err := netip.ParseAddr(p.MonitorAddress); err != nil {
			errs = append(errs, fmt.Errorf("monitorAddress %q is not an IP address", p.MonitorAddress))
		}
	}
	if _, err := parseExpectedCodes(p.ExpectedCodes); err != nil {
		errs = append(errs, err)
	}
	switch p.HTTPVersion {
	case "", "1.0", "1.1":
	default:
		errs = append(errs, fmt.Errorf("httpVersion %q: want 1.0 or 1.1", p.HTTPVersion))
	}
	if p.HTTPMethod != "" && strings.ContainsAny(p.HTTPMethod, " \t\r\n") {
		errs = append(errs, fmt.Errorf("httpMethod %q is not a method token", p.HTTPMethod))
	}
	if err := checkHTTPPath(p.URLPath); err != nil {
		errs = append(errs, fmt.Errorf("urlPath %w", err))
	}
	return errors.Join(errs...)
}

// checkHTTPPath refuses a probe path with a control character or a space:
// it cannot go on a request line, and the endpoint would stay down forever.
func checkHTTPPath(p string) error {
	if i := strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ' ' }); i >= 0 {
		return fmt.Errorf("%q holds a control character or space at byte %d", p, i)
	}
	return nil
}

func (c *ProbeConfig) validate() error {
	var errs []error
	switch c.Type {
	case "", ProbeHTTP, ProbeHTTPS, ProbeTCP, ProbeNone:
	default:
		errs = append(errs, fmt.Errorf("probetype %q is not supported on a mode:4 rule (http, https, tcp or none)", c.Type))
	}
	if c.Period < 0 || c.AttemptTimeout < 0 {
		errs = append(errs, errors.New("probe period and timeout must not be negative"))
	}
	if c.Type != ProbeTCP {
		if err := checkHTTPPath(c.Request); err != nil {
			errs = append(errs, fmt.Errorf("probereq %w", err))
		}
	}
	if c.Retries < 0 || c.Retries > 100 {
		errs = append(errs, fmt.Errorf("probeRetries %d is out of range 0–100", c.Retries))
	}
	return errors.Join(errs...)
}

// PeriodOrDefault returns Period, or 60 s when it is 0.
func (c *ProbeConfig) PeriodOrDefault() time.Duration { return orDefault(c.Period, DefaultProbePeriod) }

// RetriesOrDefault returns Retries, or 2 when it is 0.
func (c *ProbeConfig) RetriesOrDefault() int {
	if c.Retries <= 0 {
		return DefaultProbeRetries
	}
	return c.Retries
}

func (c *ProbeConfig) attemptTimeout() time.Duration {
	return min(orDefault(c.AttemptTimeout, DefaultProbeAttemptTimeout), c.PeriodOrDefault())
}

// codeRange is an inclusive status range.
type codeRange struct{ lo, hi int }

// parseExpectedCodes parses "200", "200,202", "200-204" (combinations too);
// "" means 200–299.
func parseExpectedCodes(s string) ([]codeRange, error) {
	if strings.TrimSpace(s) == "" {
		return []codeRange{{200, 299}}, nil
	}
	var out []codeRange
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		lo, hi, isRange := strings.Cut(f, "-")
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err1 != nil || err2 != nil || a < 100 || b > 599 || a > b {
			return nil, fmt.Errorf("expectedCodes %q: want codes 100–599 like 200, 200,202 or 200-204", s)
		}
		out = append(out, codeRange{a, b})
	}
	return out, nil
}

// Probe checks one endpoint once; nil means healthy. It honours ctx and
// its own attempt timeout, whichever ends first.
type Probe func(ctx context.Context) error

// NewProbe builds ep's probe from the rule's settings and the endpoint's
// overrides. It returns ErrProbeOff for probetype none and an error
// wrapping ErrInvalidConfig for unusable settings.
func NewProbe(rule ProbeConfig, ep EndpointConfig) (Probe, error) {
	if err := errors.Join(rule.validate(), ep.Probe.validate()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if rule.Type == ProbeNone {
		return nil, ErrProbeOff
	}
	host := ep.Addr.Addr()
	if ep.Probe.MonitorAddress != "" {
		host, _ = netip.ParseAddr(ep.Probe.MonitorAddress) // validated above
	}
	port := ep.Addr.Port()
	if rule.Port != 0 {
		port = rule.Port
	}
	target := netip.AddrPortFrom(host, port).String()
	timeout := rule.attemptTimeout()
	if rule.Type == ProbeTCP {
		p := &tcpProbe{target: target, timeout: timeout, send: []byte(rule.Request), expect: []byte(rule.Response)}
		return p.run, nil
	}
	codes, _ := parseExpectedCodes(ep.Probe.ExpectedCodes) // validated above
	path := rule.Request
	if ep.Probe.URLPath != "" {
		path = ep.Probe.URLPath
	}
	if path == "" {
		path = DefaultProbePath
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	scheme := "http"
	tr := &http.Transport{
		Proxy:              nil,
		DisableKeepAlives:  true, // every probe proves a fresh connection
		DisableCompression: true,
		DialContext:        (&net.Dialer{Timeout: timeout}).DialContext,
	}
	if rule.Type == ProbeHTTPS {
		scheme = "https"
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, ServerName: ep.Probe.DomainName} //nolint:gosec // liveness probe, see ProbeHTTPS
	}
	method := ep.Probe.HTTPMethod
	if method == "" {
		method = http.MethodGet
	}
	p := &httpProbe{
		url: scheme + "://" + target + path, target: target, method: method, host: ep.Probe.DomainName,
		codes: codes, expect: []byte(rule.Response), timeout: timeout, rt: tr, hop: rule.HopID,
	}
	return p.run, nil
}

type httpProbe struct {
	url, target, method, host string
	hop                       string
	codes                     []codeRange
	expect                    []byte
	timeout                   time.Duration
	rt                        http.RoundTripper
}

func (p *httpProbe) fail(kind error, detail string) error {
	return &ProbeError{Target: p.target, Kind: kind, Detail: detail}
}

func (p *httpProbe) run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
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
		if resp.StatusCode >= c.lo && resp.StatusCode <= c.hi {
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
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
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

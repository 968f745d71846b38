package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/llbproject/llb/restapi"
)

// maxResponseBytes bounds a response body read from llbd.
const maxResponseBytes = 64 << 20

// client is an HTTP client of llbd's REST API.
type client struct {
	base    *url.URL // scheme://host[:port][/prefix], no trailing slash
	token   string   // bearer token; "" sends none
	http    *http.Client
	timeout time.Duration
}

// response is one answer from llbd.
type response struct {
	status int
	header http.Header
	body   []byte
}

// client builds the REST client from the global options on first use.
func (a *app) client() (*client, error) {
	if a.cl != nil {
		return a.cl, nil
	}
	c, warn, err := newClient(a.opts)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		fmt.Fprintln(a.stderr, "llbctl: warning: "+warn)
	}
	a.cl = c
	return c, nil
}

// newClient checks the connection options and builds a client. warn, when
// not empty, is a security warning for the user.
func newClient(o globalOpts) (c *client, warn string, err error) {
	base, err := parseServer(o.server)
	if err != nil {
		return nil, "", err
	}
	https := base.Scheme == "https"
	if !https && (o.tlsCA != "" || o.insecure) {
		return nil, "", usagef("--tls-ca and --insecure need an https:// --server (got %s)", base)
	}
	if o.tlsCA != "" && o.insecure {
		return nil, "", usagef("give --tls-ca or --insecure, not both")
	}
	c = &client{base: base, timeout: o.timeout}
	if o.tokenFile != "" {
		tok, err := restapi.LoadToken(o.tokenFile)
		if err != nil {
			return nil, "", usagef("--token-file: %v", err)
		}
		c.token = tok
		if !https && !isLoopback(base.Hostname()) {
			warn = fmt.Sprintf("the bearer token travels in clear text to %s; use an https:// --server", base.Host)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if o.tlsCA != "" {
		pem, err := os.ReadFile(o.tlsCA)
		if err != nil {
			return nil, "", usagef("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "", usagef("--tls-ca %s holds no PEM certificate", o.tlsCA)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	if o.insecure {
		tr.TLSClientConfig.InsecureSkipVerify = true
	}
	c.http = &http.Client{
		Transport: tr,
		// llbd never redirects; following one could send the token elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, warn, nil
}

// parseServer reads --server: a URL, or host:port taken as http://host:port.
func parseServer(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, usagef("--server is empty")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, usagef("--server %q is not a URL: %v", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, usagef("--server %q: the scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, usagef("--server %q has no host", s)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, usagef("--server %q: give scheme://host:port[/prefix] only (use --token-file for credentials)", s)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// isLoopback reports whether host names the local machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// do sends one request to path (already escaped, starting with "/") and
// reads the whole answer. Transport failures are *connError; the status is
// not judged here.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body []byte) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	target := c.base.String() + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, usagef("building the request for %s: %v", target, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, c.connErr(ctx, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes+1))
	if err != nil {
		return nil, c.connErr(ctx, err)
	}
	if len(b) > maxResponseBytes {
		return nil, &answerError{fmt.Errorf("%s %s: the answer is larger than %d MiB", method, path, maxResponseBytes>>20)}
	}
	if res.StatusCode == http.StatusBadRequest && bytes.HasPrefix(b, []byte("Client sent an HTTP request to an HTTPS server")) {
		return nil, &connError{server: c.base.String(), err: errors.New("llbd speaks HTTPS"),
			hint: "use an https:// --server, with --tls-ca FILE for its certificate"}
	}
	return &response{status: res.StatusCode, header: res.Header, body: b}, nil
}

// connError is a failure to talk to llbd at all (exit 2).
type connError struct {
	server string
	err    error
	hint   string
}

// Error is one sentence with a hint at the fix.
func (e *connError) Error() string {
	msg := fmt.Sprintf("cannot talk to llbd at %s: %v", e.server, e.err)
	if e.hint != "" {
		msg += " (" + e.hint + ")"
	}
	return msg
}

// Unwrap returns the cause.
func (e *connError) Unwrap() error { return e.err }

// connErr classifies a transport error and names the likely fix.
func (c *client) connErr(ctx context.Context, err error) error {
	e := &connError{server: c.base.String(), err: err}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		e.err = urlErr.Err
	}
	var dnsErr *net.DNSError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var certErr x509.CertificateInvalidError
	var recErr tls.RecordHeaderError
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || isTimeout(err):
		e.err = fmt.Errorf("no answer within %s", c.timeout)
		e.hint = "is llbd overloaded or the address wrong? raise --timeout"
	case errors.Is(err, context.Canceled):
		e.err = errors.New("interrupted")
	case errors.Is(err, syscall.ECONNREFUSED):
		e.err = errors.New("connection refused")
		e.hint = "is llbd running and listening there? set --server or " + envServer
	case errors.As(err, &dnsErr):
		e.err = fmt.Errorf("cannot resolve %q", dnsErr.Name)
		e.hint = "check --server or " + envServer
	case errors.As(err, &unknownCA):
		e.err = errors.New("its TLS certificate is signed by an unknown authority")
		e.hint = "pass the CA with --tls-ca FILE, or --insecure in a lab"
	case errors.As(err, &hostErr):
		e.err = fmt.Errorf("its TLS certificate is not valid for %s: %v", c.base.Hostname(), hostErr)
		e.hint = "use the host name the certificate names in --server"
	case errors.As(err, &certErr):
		e.err = fmt.Errorf("its TLS certificate is invalid: %v", certErr)
	case errors.As(err, &recErr) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		e.err = errors.New("it did not answer TLS")
		e.hint = "llbd probably speaks plain HTTP: use an http:// --server"
	}
	return e
}

// isTimeout reports a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Package etcdconn is how llb connects to etcd: the endpoint list, TLS and
// credentials behind the --etcd-* flags, validated once and turned into an
// etcd v3 client configuration. The rule store (rulestore) and the cluster
// member (replica) share it, so both talk to the same etcd the same way.
package etcdconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Defaults.
const (
	// DefaultDialTimeout bounds the first connection to an endpoint.
	DefaultDialTimeout = 2 * time.Second
	// DefaultRequestTimeout bounds one store call that has no earlier
	// deadline of its own.
	DefaultRequestTimeout = 2 * time.Second
)

// Config says how to reach etcd.
type Config struct {
	// Endpoints are client URLs (http://host:port or https://host:port);
	// at least one. --etcd-endpoints / LLB_ETCD_ENDPOINTS, comma-separated.
	Endpoints []string
	// CAFile verifies the servers' certificates (PEM); empty uses the
	// system roots when any endpoint is https. --etcd-cacert.
	CAFile string
	// CertFile and KeyFile are this client's certificate and key (PEM) for
	// servers that require client certificates; both or neither.
	// --etcd-cert, --etcd-key.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the servers' certificates.
	ServerName string
	// Username and Password authenticate with etcd's auth; both or neither.
	Username, Password string
	// DialTimeout bounds connecting; 0 means DefaultDialTimeout.
	DialTimeout time.Duration
	// RequestTimeout bounds a single call without an earlier deadline;
	// 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New("etcdconn: no etcd endpoints (--etcd-endpoints URL,URL)"))
	}
	for _, e := range c.Endpoints {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			errs = append(errs, fmt.Errorf("etcdconn: endpoint %q is not an http:// or https:// URL with a host", e))
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("etcdconn: --etcd-cert and --etcd-key go together"))
	}
	if (c.Username == "") != (c.Password == "") {
		errs = append(errs, errors.New("etcdconn: etcd username and password go together"))
	}
	if c.DialTimeout < 0 || c.RequestTimeout < 0 {
		errs = append(errs, errors.New("etcdconn: negative timeout"))
	}
	return errors.Join(errs...)
}

// ParseEndpoints splits a comma-separated endpoint list, dropping blanks.
func ParseEndpoints(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// Timeout returns the request timeout in force.
func (c *Config) Timeout() time.Duration {
	if c.RequestTimeout > 0 {
		return c.RequestTimeout
	}
	return DefaultRequestTimeout
}

// ClientConfig validates c and builds the etcd client configuration: TLS
// when an endpoint is https or files are given, etcd's own logging off (llb
// reports etcd trouble itself). The dial does not block: a client built
// while etcd is down works once etcd is back, and its calls fail with the
// callers' deadlines meanwhile.
func (c *Config) ClientConfig() (clientv3.Config, error) {
	if err := c.Validate(); err != nil {
		return clientv3.Config{}, err
	}
	dial := c.DialTimeout
	if dial == 0 {
		dial = DefaultDialTimeout
	}
	cfg := clientv3.Config{
		Endpoints:            append([]string(nil), c.Endpoints...),
		DialTimeout:          dial,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Username:             c.Username,
		Password:             c.Password,
		Logger:               zap.NewNop(),
		DialOptions:          []grpc.DialOption{FastReconnect()},
	}
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return clientv3.Config{}, err
	}
	cfg.TLS = tlsCfg
	return cfg, nil
}

// FastReconnect caps gRPC's reconnect back-off at 500 ms. With gRPC's
// default (up to 120 s, growing through an outage) a client could come back
// to a restarted etcd seconds after it is up — longer than a 3 s membership
// lease, which etcd extends only once at its leader election.
func FastReconnect() grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
		MinConnectTimeout: time.Second,
	})
}

// New connects a client.
func (c *Config) New() (*clientv3.Client, error) {
	cfg, err := c.ClientConfig()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdconn: connect to %s: %w", strings.Join(c.Endpoints, ","), err)
	}
	return cli, nil
}

func (c *Config) tlsConfig() (*tls.Config, error) {
	https := false
	for _, e := range c.Endpoints {
		if strings.HasPrefix(e, "https://") {
			https = true
		}
	}
	if !https && c.CAFile == "" && c.CertFile == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("etcdconn: read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcdconn: CA file %s holds no PEM certificate", c.CAFile)
		}
		t.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcdconn: load client certificate: %w", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

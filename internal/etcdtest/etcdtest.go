// Package etcdtest starts real etcd servers (Debian's etcd-server, the etcd
// binary on PATH) on loopback addresses for tests: one member or a
// three-member cluster, each member on its own 127.x address, with helpers
// to kill, freeze (SIGSTOP), thaw and restart members on the same address
// and data directory. Tests that need etcd call Start and are skipped with a
// clear message when the binary is missing (`make deps` installs it).
//
// Nothing here is linked into llbd; it is for tests and soak drivers only.
package etcdtest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary is the etcd executable looked up on PATH.
const Binary = "etcd"

// Options shape a test cluster.
type Options struct {
	// Members is the member count: 1 (default) or 3.
	Members int
	// Host is the first member's loopback address; member i uses the
	// address Host+i in its last octet. Default: a random 127.x.y.1 so
	// concurrently running test binaries do not collide.
	Host string
	// ClientPort and PeerPort are the ports every member binds on its own
	// address; defaults 2379 and 2380.
	ClientPort, PeerPort int
	// Log receives the members' stderr; nil discards it.
	Log io.Writer
	// CertFile and KeyFile, when set, make every member serve clients
	// over TLS (https:// client URLs) with this certificate.
	CertFile, KeyFile string
}

// Cluster is a running etcd test cluster.
type Cluster struct {
	dir     string
	members []*Member
	log     io.Writer
}

// Member is one etcd server process.
type Member struct {
	Name      string
	Host      string
	ClientURL string
	PeerURL   string
	dataDir   string
	args      []string
	log       io.Writer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Available reports whether the etcd binary is on PATH.
func Available() bool {
	_, err := exec.LookPath(Binary)
	return err == nil
}

// Start starts a cluster for t and stops it at cleanup. It skips t when the
// etcd binary is missing and fails t when etcd does not become healthy.
func Start(t testing.TB, opt Options) *Cluster {
	t.Helper()
	if !Available() {
		t.Skip("etcd binary not on PATH: install Debian's etcd-server (make deps does) to run this test")
	}
	c, err := StartDir(t.TempDir(), opt)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// StartDir starts a cluster with its data under dir. The caller must Close it.
func StartDir(dir string, opt Options) (*Cluster, error) {
	if opt.Members == 0 {
		opt.Members = 1
	}
	if opt.Members != 1 && opt.Members != 3 {
		return nil, fmt.Errorf("etcdtest: %d members (want 1 or 3)", opt.Members)
	}
	if opt.ClientPort == 0 {
		opt.ClientPort = 2379
	}
	if opt.PeerPort == 0 {
		opt.PeerPort = 2380
	}
	base, err := baseAddr(opt.Host)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, log: opt.Log}
	scheme := "http://"
	if opt.CertFile != "" {
		scheme = "https://"
	}
	var initial []string
	for i := 0; i < opt.Members; i++ {
		h := addrPlus(base, i)
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			Host:      h,
			ClientURL: scheme + net.JoinHostPort(h, strconv.Itoa(opt.ClientPort)),
			PeerURL:   "http://" + net.JoinHostPort(h, strconv.Itoa(opt.PeerPort)),
			dataDir:   filepath.Join(dir, fmt.Sprintf("m%d.etcd", i)),
			log:       opt.Log,
		}
		c.members = append(c.members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.members {
		m.args = []string{
			"--name", m.Name,
			"--data-dir", m.dataDir,
			"--listen-client-urls", m.ClientURL,
			"--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL,
			"--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", filepath.Base(dir),
			"--heartbeat-interval", "50",
			"--election-timeout", "500",
			"--logger", "zap",
			"--log-level", "error",
		}
		if opt.CertFile != "" {
			m.args = append(m.args, "--cert-file", opt.CertFile, "--key-file", opt.KeyFile)
		}
		if err := m.start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitHealthy(20 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// baseAddr parses host or picks a random 127.a.b.1.
func baseAddr(host string) (net.IP, error) {
	if host == "" {
		n := time.Now().UnixNano() ^ int64(os.Getpid())<<20
		return net.IPv4(127, byte(10+n%200), byte((n>>8)%250+1), 1), nil
	}
	ip := net.ParseIP(host).To4()
	if ip == nil || ip[0] != 127 {
		return nil, fmt.Errorf("etcdtest: host %q is not an IPv4 loopback address", host)
	}
	return ip, nil
}

func addrPlus(base net.IP, i int) string {
	ip := append(net.IP(nil), base.To4()...)
	ip[3] += byte(i)
	return ip.String()
}

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.ClientURL
	}
	return out
}

// Member returns member i.
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// Members returns the member count.
func (c *Cluster) Members() int { return len(c.members) }

// Close kills every member.
func (c *Cluster) Close() {
	for _, m := range c.members {
		m.Kill()
	}
}

// KillAll SIGKILLs every member (an outage of the whole store).
func (c *Cluster) KillAll() {
	for _, m := range c.members {
		m.Kill()
	}
}

// RestartAll restarts every stopped member and waits for health.
func (c *Cluster) RestartAll(timeout time.Duration) error {
	for _, m := range c.members {
		if !m.Running() {
			if err := m.Restart(); err != nil {
				return err
			}
		}
	}
	return c.WaitHealthy(timeout)
}

// WaitHealthy waits until every running member answers /health with
// "health":"true".
func (c *Cluster) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, m := range c.members {
		if !m.Running() {
			continue
		}
		for {
			if ok, _ := m.Healthy(); ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("etcdtest: member %s at %s not healthy after %v", m.Name, m.ClientURL, timeout)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cmd := exec.Command(Binary, m.args...)
	cmd.Stdout = m.log
	cmd.Stderr = m.log
	if m.log == nil {
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcdtest: start %s: %w", m.Name, err)
	}
	m.cmd = cmd
	done := make(chan struct{})
	m.done = done
	go func() { _ = cmd.Wait(); close(done) }()
	return nil
}

// Running reports whether the member's process is alive (frozen counts).
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// Kill SIGKILLs the member and waits for it to exit.
func (m *Member) Kill() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-done
}

// Stop freezes the member (SIGSTOP).
func (m *Member) Stop() error { return m.signal(syscall.SIGSTOP) }

// Cont thaws a frozen member (SIGCONT).
func (m *Member) Cont() error { return m.signal(syscall.SIGCONT) }

func (m *Member) signal(sig syscall.Signal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return errors.New("etcdtest: member not started")
	}
	return m.cmd.Process.Signal(sig)
}

// Restart starts a killed member again on its address and data directory.
func (m *Member) Restart() error {
	if m.Running() {
		return fmt.Errorf("etcdtest: member %s is still running", m.Name)
	}
	// The restarted member rejoins the cluster it was part of.
	for i, a := range m.args {
		if a == "--initial-cluster-state" {
			m.args[i+1] = "existing"
		}
	}
	return m.start()
}

// Healthy asks the member's /health endpoint.
func (m *Member) Healthy() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return health(ctx, m.ClientURL)
}

func health(ctx context.Context, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return false, err
	}
	// The harness only asks whether the member is up; the clients under
	// test verify the certificate.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return false, fmt.Errorf("etcdtest: %s/health: %w", url, err)
	}
	return h.Health == "true", nil
}

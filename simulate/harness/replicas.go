package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llbproject/llb/simulate/fleet"
)

// Replicas runs one rule on several llbd processes, the trace spread
// round-robin over them (request i goes to replica i mod N): either
// independent replicas, each given the rule, or one router in cluster mode
// (docs/scale-out.md), the rule posted to the first and reaching the others
// through etcd. Every replica has its own loopback address: its REST API,
// its cluster address and (--data-bind) the rule's listener.
type Replicas struct {
	// N is the number of llbd processes; 0 or 1 runs one, as without
	// Replicas.
	N int
	// Cluster, when set, makes the replicas one router; nil leaves them
	// independent.
	Cluster *ClusterConfig
	// BaseIP is replica 0's address; replica i takes the i-th next one.
	// Default 127.0.77.1.
	BaseIP string
}

// ClusterConfig is the cluster mode of Replicas.
type ClusterConfig struct {
	// Etcd are the etcd client URLs (--etcd-endpoints).
	Etcd []string
	// Name prefixes the cluster name; every run gets a fresh cluster (a
	// random suffix), so runs sharing an etcd never see each other's rules.
	// Default "bench".
	Name string
}

// DefaultReplicaBaseIP is Replicas.BaseIP's default.
const DefaultReplicaBaseIP = "127.0.77.1"

// replicaAddrs are the N replicas' addresses.
func (r *Replicas) addrs() ([]string, error) {
	base := r.BaseIP
	if base == "" {
		base = DefaultReplicaBaseIP
	}
	a, err := netip.ParseAddr(base)
	if err != nil || !a.Is4() || !a.IsLoopback() {
		return nil, fmt.Errorf("replica base address %q: want an IPv4 loopback address: %w", base, ErrConfig)
	}
	out := make([]string, r.N)
	for i := range out {
		out[i] = a.String()
		a = a.Next()
	}
	return out, nil
}

// runReplicas is Run with Replicas.N > 1.
func runReplicas(ctx context.Context, c *RunConfig, fl *fleet.Fleet) (*Result, error) {
	if c.Daemon.Attach != "" {
		return nil, fmt.Errorf("replicas: llbd is started by the harness, not attached: %w", ErrConfig)
	}
	ips, err := c.Replicas.addrs()
	if err != nil {
		return nil, err
	}
	port, err := freePort(ips[0])
	if err != nil {
		return nil, fmt.Errorf("vip port: %w: %w", ErrDaemon, err)
	}
	var cluster []string
	if cl := c.Replicas.Cluster; cl != nil {
		if len(cl.Etcd) == 0 {
			return nil, fmt.Errorf("replicas: cluster mode without etcd endpoints: %w", ErrConfig)
		}
		name := cl.Name
		if name == "" {
			name = "bench"
		}
		var b [4]byte
		_, _ = rand.Read(b[:])
		cluster = []string{"--cluster-name", name + "-" + hex.EncodeToString(b[:]), "--etcd-endpoints", strings.Join(cl.Etcd, ",")}
	}
	ds := make([]*Daemon, 0, len(ips))
	defer func() {
		for _, d := range ds {
			_ = d.Stop(15 * time.Second)
		}
	}()
	for i, ip := range ips {
		dir, err := os.MkdirTemp(c.WorkDir, fmt.Sprintf("llbd-%s-r%d-", safeName(c.Strategy.Name), i))
		if err != nil {
			return nil, fmt.Errorf("llbd state dir: %w: %w", ErrDaemon, err)
		}
		args := []string{"--data-bind", ip}
		if cluster != nil {
			cport, err := freePort(ip)
			if err != nil {
				return nil, fmt.Errorf("cluster port: %w: %w", ErrDaemon, err)
			}
			args = append(args, cluster...)
			args = append(args, "--cluster-advertise", net.JoinHostPort(ip, strconv.Itoa(cport)))
		}
		rport, err := freePort(ip)
		if err != nil {
			return nil, fmt.Errorf("rest port: %w: %w", ErrDaemon, err)
		}
		d, err := StartDaemon(ctx, DaemonConfig{
			Bin: c.Daemon.Bin, Env: c.Strategy.EnvList(), StateDir: dir, Listen: net.JoinHostPort(ip, strconv.Itoa(rport)),
			LogPath: filepath.Join(dir, "llbd.log"), LogLevel: c.Daemon.LogLevel, Args: args,
		})
		if err != nil {
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		ds = append(ds, d)
	}
	// The rule's externalIP is its identity; every replica listens on its
	// own address (--data-bind) on the rule's port.
	rule, err := c.rule(fl, ips[0], port)
	if err != nil {
		return nil, err
	}
	for i, d := range ds {
		if cluster != nil && i > 0 {
			break // the others apply it from etcd
		}
		if err := d.PostRule(ctx, rule); err != nil {
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
	}
	urls := make([]string, len(ds))
	for i, d := range ds {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := d.WaitActive(actx, ips[0], port)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		urls[i] = "http://" + net.JoinHostPort(ips[i], strconv.Itoa(port))
	}
	cpu := func() time.Duration {
		var sum time.Duration
		for _, d := range ds {
			sum += d.CPU()
		}
		return sum
	}
	return measured(ctx, c, fl, daemonProbe{cpu: cpu, pred: predictionReader(ds...)}, urls...)
}

// validateReplicas reports Replicas problems.
func (r *Replicas) validate() error {
	if r.N < 0 {
		return fmt.Errorf("replicas: %d (want >= 0)", r.N)
	}
	if r.N > 1 {
		if _, err := r.addrs(); err != nil {
			return err
		}
	}
	if r.Cluster != nil && len(r.Cluster.Etcd) == 0 {
		return errors.New("replicas: cluster mode without etcd endpoints")
	}
	return nil
}

package replica

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/etcdconn"
	"github.com/llbproject/llb/rulestore"
)

// Defaults of Config.
const (
	DefaultLeaseTTL        = 3 * time.Second
	DefaultGossipInterval  = 100 * time.Millisecond
	DefaultPublishInterval = 100 * time.Millisecond
	DefaultLookupTimeout   = 5 * time.Millisecond
	DefaultTeachInterval   = 50 * time.Millisecond
	DefaultTeachBatchBytes = 256 << 10
	DefaultTeachMaxPrompt  = 256 << 10
	DefaultTeachMaxPending = 4 << 20
	DefaultRejoinBackoff   = 200 * time.Millisecond
	maxRejoinBackoff       = 5 * time.Second
	// DefaultIdleShard is how long an empty session shard stays activated.
	DefaultIdleShard = 10 * time.Minute
)

// Config configures a Member.
type Config struct {
	// ClusterName names the cluster (--cluster-name / LLB_CLUSTER_NAME);
	// replicas with the same name and etcd form one router. Required.
	ClusterName string
	// Advertise is this replica's cluster address HOST:PORT
	// (--cluster-advertise / LLB_CLUSTER_ADVERTISE): the remote listens
	// on it and peers dial it. The port must be free; the host must be an
	// address peers reach (not 0.0.0.0). Required.
	Advertise string
	// Etcd is how to reach etcd (--etcd-endpoints and TLS flags). Required.
	Etcd etcdconn.Config
	// LeaseTTL is the membership lease (whole seconds, ≥ 1 s): a replica
	// that stops renewing (killed, frozen) is dropped this long after, and
	// its session shards reactivate elsewhere. Default 3 s.
	LeaseTTL time.Duration
	// GossipInterval is protoactor's gossip round; load values reach peers
	// within about two rounds. Default 100 ms.
	GossipInterval time.Duration
	// PublishInterval is how often own load is gossiped when it changed.
	// Default 100 ms.
	PublishInterval time.Duration
	// LookupTimeout bounds a session lookup whose context has no earlier
	// deadline. Default 5 ms.
	LookupTimeout time.Duration
	// TeachInterval, TeachBatchBytes: a trie batch leaves when it is this
	// old or this large. TeachMaxPrompt: longer prompts are not taught.
	// TeachMaxPending: bytes waiting beyond this are dropped (counted).
	TeachInterval                                    time.Duration
	TeachBatchBytes, TeachMaxPrompt, TeachMaxPending int
	// IdleShard passivates an empty session shard after this long without
	// messages. Default 10 min.
	IdleShard time.Duration
	// RejoinBackoff is the first pause before another join attempt; it
	// doubles up to 5 s while attempts fail. Default 200 ms.
	RejoinBackoff time.Duration
	// Log receives membership transitions (Info) and trouble (Warn), and
	// protoactor's own lines at Warn and above.
	Log zerolog.Logger
	// OnHealth, when set, receives peers' breaker/probe transitions as
	// they arrive (from an actor goroutine: must not block).
	OnHealth func(from string, t []HealthTransition)
	// OnTrie, when set, receives peers' trie inserts (from an actor
	// goroutine: must not block).
	OnTrie func(from string, ins []TrieInsert)
	// OnKVDrain, when set, receives the bodies a peer drained from a
	// TensorRT-LLM endpoint's /kv_cache_events (from an actor goroutine:
	// must not block).
	OnKVDrain func(from string, d KVDrain)
	// OnUsage, when set, receives a peer's totals of the shared limit
	// buckets (from an actor goroutine: must not block long).
	OnUsage func(from string, us []BucketUsage)
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.LeaseTTL, DefaultLeaseTTL)
	def(&c.GossipInterval, DefaultGossipInterval)
	def(&c.PublishInterval, DefaultPublishInterval)
	def(&c.LookupTimeout, DefaultLookupTimeout)
	def(&c.TeachInterval, DefaultTeachInterval)
	def(&c.IdleShard, DefaultIdleShard)
	def(&c.RejoinBackoff, DefaultRejoinBackoff)
	if c.TeachBatchBytes == 0 {
		c.TeachBatchBytes = DefaultTeachBatchBytes
	}
	if c.TeachMaxPrompt == 0 {
		c.TeachMaxPrompt = DefaultTeachMaxPrompt
	}
	if c.TeachMaxPending == 0 {
		c.TeachMaxPending = DefaultTeachMaxPending
	}
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if err := rulestore.ValidClusterName(c.ClusterName); err != nil {
		errs = append(errs, fmt.Errorf("replica: --cluster-name: %w", err))
	}
	if _, _, err := splitAdvertise(c.Advertise); err != nil {
		errs = append(errs, err)
	}
	if err := c.Etcd.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.LeaseTTL != 0 && (c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0) {
		errs = append(errs, fmt.Errorf("replica: lease TTL %v: want whole seconds, at least 1 s", c.LeaseTTL))
	}
	for name, d := range map[string]time.Duration{
		"gossip interval": c.GossipInterval, "publish interval": c.PublishInterval,
		"lookup timeout": c.LookupTimeout, "teach interval": c.TeachInterval,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("replica: negative %s %v", name, d))
		}
	}
	return errors.Join(errs...)
}

// splitAdvertise parses HOST:PORT with a concrete host and a port.
func splitAdvertise(a string) (string, int, error) {
	host, ps, err := net.SplitHostPort(a)
	if err != nil {
		return "", 0, fmt.Errorf("replica: --cluster-advertise %q: want HOST:PORT: %w", a, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("replica: --cluster-advertise %q: port must be 1-65535", a)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "", 0, fmt.Errorf("replica: --cluster-advertise %q: want an address peers can reach, not an unspecified one", a)
	}
	return host, port, nil
}

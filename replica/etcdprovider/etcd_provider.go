// Package etcdprovider is protoactor-go's etcd cluster provider
// (cluster/clusterproviders/etcd at the pseudo-version in go.mod), patched
// for llb. PATCH.md lists every change and why; upstream.diff is the diff.
package etcdprovider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of the options.
const (
	// DefaultLeaseTTL is upstream's fixed lease TTL.
	DefaultLeaseTTL = 3 * time.Second
	// DefaultCallTimeout bounds every etcd call the provider makes.
	DefaultCallTimeout = 2 * time.Second
	// DefaultRetryInterval is upstream's pause between retries.
	DefaultRetryInterval = 1 * time.Second
)

// Option configures a Provider.
type Option func(*Provider)

// WithLeaseTTL sets the membership lease TTL (whole seconds, at least 1 s):
// a member that stops renewing is removed by the others this long after.
func WithLeaseTTL(d time.Duration) Option {
	return func(p *Provider) {
		if d >= time.Second {
			p.keepAliveTTL = d
		}
	}
}

// WithCallTimeout bounds each etcd call (fetch, register, deregister,
// lease checks).
func WithCallTimeout(d time.Duration) Option {
	return func(p *Provider) {
		if d > 0 {
			p.callTimeout = d
		}
	}
}

// WithRetryInterval sets the pause between retries of a failed watch or
// lease check.
func WithRetryInterval(d time.Duration) Option {
	return func(p *Provider) {
		if d > 0 {
			p.retryInterval = d
		}
	}
}

// WithOnLeaseLost sets the callback run once, from a provider goroutine,
// when this member's lease is gone (expired on the server, or its key was
// deleted). The provider then stops renewing and watching: the member has
// been removed by its peers and blocked under its id, and must rejoin with
// a fresh id (a new actor system).
func WithOnLeaseLost(f func(reason string)) Option {
	return func(p *Provider) { p.onLeaseLost = f }
}

// WithOnHealth sets the callback run on every change of the provider's
// view of etcd: a non-nil error when a call fails, nil when calls succeed
// again.
func WithOnHealth(f func(err error)) Option {
	return func(p *Provider) { p.onHealth = f }
}

type Provider struct {
	leaseID       clientv3.LeaseID
	cluster       *cluster.Cluster
	baseKey       string
	clusterName   string
	deregistered  bool
	shutdown      atomic.Bool
	self          *Node
	mu            sync.Mutex       // guards members
	members       map[string]*Node // all, contains self.
	client        *clientv3.Client
	ownClient     bool
	ctx           context.Context // ends at Shutdown or lease loss
	cancel        context.CancelFunc
	keepAliveTTL  time.Duration
	retryInterval time.Duration
	callTimeout   time.Duration
	revision      uint64

	onLeaseLost func(reason string)
	onHealth    func(err error)
	lost        atomic.Bool
	healthMu    sync.Mutex
	clusterErr  error // guarded by healthMu
}

func New(opts ...Option) (*Provider, error) {
	return NewWithConfig("/protoactor", clientv3.Config{
		Endpoints:   []string{"127.0.0.1:2379"},
		DialTimeout: time.Second * 5,
	}, opts...)
}

// NewWithConfig connects its own client (closed at Shutdown).
func NewWithConfig(baseKey string, cfg clientv3.Config, opts ...Option) (*Provider, error) {
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, err
	}
	p := NewWithClient(baseKey, client, opts...)
	p.ownClient = true
	return p, nil
}

// NewWithClient uses client, which stays the caller's.
func NewWithClient(baseKey string, client *clientv3.Client, opts ...Option) *Provider {
	p := &Provider{
		client:        client,
		keepAliveTTL:  DefaultLeaseTTL,
		retryInterval: DefaultRetryInterval,
		callTimeout:   DefaultCallTimeout,
		baseKey:       baseKey,
		members:       map[string]*Node{},
	}
	for _, o := range opts {
		o(p)
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

func (p *Provider) init(c *cluster.Cluster) error {
	p.cluster = c
	addr := p.cluster.ActorSystem.Address()
	host, port, err := splitHostPort(addr)
	if err != nil {
		return err
	}

	p.cluster = c
	p.clusterName = p.cluster.Config.Name
	memberID := p.cluster.ActorSystem.ID
	knownKinds := c.GetClusterKinds()
	nodeName := fmt.Sprintf("%v@%v", p.clusterName, memberID)
	p.self = NewNode(nodeName, host, port, knownKinds)
	// llb: the member id is the actor system's id, as gossip and the block
	// list use it (upstream used "cluster@id": gossip sent to itself and
	// heartbeat blocking never matched).
	p.self.ID = memberID
	p.self.SetMeta("id", p.getID())
	return nil
}

func (p *Provider) StartMember(c *cluster.Cluster) error {
	if err := p.init(c); err != nil {
		return err
	}

	// fetch memberlist
	nodes, rev, err := p.fetchNodes()
	if err != nil {
		return err
	}
	// register self
	if err := p.registerService(); err != nil {
		return err
	}
	// initialize members
	p.updateNodesWithSelf(nodes)
	p.publishClusterTopologyEvent()
	p.startWatching(rev)
	p.startKeepAlive()
	return nil
}

func (p *Provider) StartClient(c *cluster.Cluster) error {
	if err := p.init(c); err != nil {
		return err
	}
	nodes, rev, err := p.fetchNodes()
	if err != nil {
		return err
	}
	// initialize members
	p.updateNodes(nodes)
	p.publishClusterTopologyEvent()
	p.startWatching(rev)
	return nil
}

// Shutdown stops renewing and watching and revokes the lease, so peers see
// the member leave at once (bounded by the call timeout).
func (p *Provider) Shutdown(graceful bool) error {
	p.shutdown.Store(true)
	p.cancel()
	var err error
	if !p.deregistered && !p.lost.Load() && p.self != nil {
		err = p.deregisterService()
		if err != nil {
			p.logger().Warn("deregisterMember", slog.Any("error", err))
		}
		p.deregistered = true
	}
	if p.ownClient {
		_ = p.client.Close()
	}
	return err
}

func (p *Provider) logger() *slog.Logger {
	if p.cluster != nil {
		return p.cluster.Logger()
	}
	return slog.Default()
}

func (p *Provider) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(p.ctx, p.callTimeout)
}

// health records the outcome of an etcd call and reports transitions.
func (p *Provider) health(err error) {
	if err != nil && p.ctx.Err() != nil {
		return // shutting down: not etcd's fault
	}
	p.healthMu.Lock()
	changed := (err == nil) != (p.clusterErr == nil)
	p.clusterErr = err
	p.healthMu.Unlock()
	if changed && p.onHealth != nil {
		p.onHealth(err)
	}
}

// leaseLost stops the provider and reports once.
func (p *Provider) leaseLost(reason string) {
	if p.shutdown.Load() || !p.lost.CompareAndSwap(false, true) {
		return
	}
	p.logger().Warn("membership lease lost", slog.String("reason", reason))
	p.cancel()
	if p.onLeaseLost != nil {
		p.onLeaseLost(reason)
	}
}

// keepAlive renews the lease. When the client gives up on it (no answer
// within the TTL, e.g. etcd unreachable), the server decides: a lease that
// is still alive (etcd was down, and extends leases when a leader is
// elected) is renewed again; a lease that is gone is reported lost,
// instead of upstream's re-registration under an id the peers have blocked.
func (p *Provider) keepAlive() {
	lease := p.getLeaseID()
	for p.ctx.Err() == nil {
		kaCh, err := p.client.KeepAlive(p.ctx, lease)
		if err == nil {
			for resp := range kaCh {
				if resp != nil {
					p.health(nil)
				}
			}
		}
		if p.ctx.Err() != nil {
			return
		}
		for p.ctx.Err() == nil {
			ctx, cancel := p.callCtx()
			ttl, err := p.client.TimeToLive(ctx, lease)
			cancel()
			if errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && ttl.TTL <= 0) {
				p.leaseLost("lease expired")
				return
			}
			if err == nil {
				p.health(nil)
				break
			}
			p.health(fmt.Errorf("etcd lease check: %w", err))
			sleep(p.ctx, p.retryInterval/4)
		}
	}
}

func (p *Provider) startKeepAlive() {
	go p.keepAlive()
}

func (p *Provider) getID() string {
	return p.self.ID
}

func (p *Provider) getEtcdKey() string {
	return p.buildKey(p.clusterName, p.getID())
}

func (p *Provider) registerService() error {
	data, err := p.self.Serialize()
	if err != nil {
		return err
	}
	leaseId, err := p.newLeaseID()
	if err != nil {
		return err
	}
	p.setLeaseID(leaseId)
	ctx, cancel := p.callCtx()
	defer cancel()
	_, err = p.client.Put(ctx, p.getEtcdKey(), string(data), clientv3.WithLease(leaseId))
	p.health(err)
	return err
}

func (p *Provider) deregisterService() error {
	ctx, cancel := context.WithTimeout(context.Background(), p.callTimeout)
	defer cancel()
	if lease := p.getLeaseID(); lease > 0 {
		if _, err := p.client.Revoke(ctx, lease); err == nil {
			return nil
		}
	}
	_, err := p.client.Delete(ctx, p.getEtcdKey())
	return err
}

// handleWatchResponse returns the member changes in resp, and whether this
// member's own key was deleted.
func (p *Provider) handleWatchResponse(resp clientv3.WatchResponse) (map[string]*Node, bool) {
	changes := map[string]*Node{}
	selfDeleted := false
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range resp.Events {
		key := string(ev.Kv.Key)
		nodeId, err := getNodeID(key, "/")
		if err != nil {
			p.logger().Warn("Invalid member.", slog.String("key", key))
			continue
		}

		switch ev.Type {
		case clientv3.EventTypePut:
			node, err := NewNodeFromBytes(ev.Kv.Value)
			if err != nil {
				p.logger().Warn("Invalid member.", slog.String("key", key))
				continue
			}
			if p.self.Equal(node) {
				continue
			}
			changes[nodeId] = node
		case clientv3.EventTypeDelete:
			if nodeId == p.self.ID {
				selfDeleted = true
				continue
			}
			node, ok := p.members[nodeId]
			if !ok {
				continue
			}
			cloned := *node
			cloned.SetAlive(false)
			changes[nodeId] = &cloned
		}
	}
	p.revision = uint64(resp.Header.GetRevision())
	return changes, selfDeleted
}

// watch follows the member keys from the revision after rev. Any break
// (compaction, no leader, a lost stream) is followed by a full re-fetch
// that replaces the member set, so a change missed meanwhile (upstream
// re-watched from "now" and kept stale members) is not missed.
func (p *Provider) watch(rev int64) {
	prefix := p.buildKey(p.clusterName) + "/"
	for p.ctx.Err() == nil {
		if rev == 0 {
			nodes, r, err := p.fetchNodes()
			if err != nil {
				sleep(p.ctx, p.retryInterval/4)
				continue
			}
			if !containsID(nodes, p.self.ID) {
				p.leaseLost("own member key missing")
				return
			}
			p.replaceNodes(nodes)
			p.publishClusterTopologyEvent()
			rev = r
		}
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(p.ctx))
		stream := p.client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range stream {
			if err := resp.Err(); err != nil || resp.CompactRevision > 0 {
				if err == nil {
					err = fmt.Errorf("revision %d compacted", resp.CompactRevision)
				}
				p.health(fmt.Errorf("etcd member watch: %w", err))
				break
			}
			changes, selfDeleted := p.handleWatchResponse(resp)
			if selfDeleted {
				cancel()
				p.leaseLost("own member key deleted")
				return
			}
			rev = resp.Header.Revision
			if len(changes) > 0 {
				p.updateNodesWithChanges(changes)
				p.publishClusterTopologyEvent()
			}
		}
		cancel()
		rev = 0
		sleep(p.ctx, p.retryInterval/4)
	}
}

func (p *Provider) startWatching(rev int64) {
	go p.watch(rev)
}

// GetHealthStatus returns an error if the cluster health status has problems
func (p *Provider) GetHealthStatus() error {
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	if p.lost.Load() {
		return errors.New("etcd membership lease lost")
	}
	return p.clusterErr
}

// LeaseID returns the membership lease (0 before registration).
func (p *Provider) LeaseID() int64 { return int64(p.getLeaseID()) }

func (p *Provider) buildKey(names ...string) string {
	return strings.Join(append([]string{p.baseKey}, names...), "/")
}

func (p *Provider) fetchNodes() ([]*Node, int64, error) {
	key := p.buildKey(p.clusterName) + "/"
	ctx, cancel := p.callCtx()
	defer cancel()
	resp, err := p.client.Get(ctx, key, clientv3.WithPrefix())
	p.health(err)
	if err != nil {
		return nil, 0, fmt.Errorf("etcd member list: %w", err)
	}
	var nodes []*Node
	for _, v := range resp.Kvs {
		n := Node{}
		if err := n.Deserialize(v.Value); err != nil {
			p.logger().Warn("Invalid member.", slog.String("key", string(v.Key)))
			continue
		}
		nodes = append(nodes, &n)
	}
	p.revision = uint64(resp.Header.GetRevision())
	return nodes, resp.Header.GetRevision(), nil
}

func containsID(nodes []*Node, id string) bool {
	for _, n := range nodes {
		if n.ID == id {
			return true
		}
	}
	return false
}

func (p *Provider) updateNodes(members []*Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range members {
		p.members[n.ID] = n
	}
}

func (p *Provider) replaceNodes(members []*Node) {
	p.mu.Lock()
	p.members = map[string]*Node{}
	p.mu.Unlock()
	p.updateNodesWithSelf(members)
}

func (p *Provider) updateNodesWithSelf(members []*Node) {
	p.updateNodes(members)
	p.mu.Lock()
	p.members[p.self.ID] = p.self
	p.mu.Unlock()
}

func (p *Provider) updateNodesWithChanges(changes map[string]*Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for memberId, member := range changes {
		p.members[memberId] = member
		if !member.IsAlive() {
			delete(p.members, memberId)
		}
	}
}

func (p *Provider) createClusterTopologyEvent() []*cluster.Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	res := make([]*cluster.Member, 0, len(p.members))
	for _, m := range p.members {
		res = append(res, m.MemberStatus())
	}
	return res
}

func (p *Provider) publishClusterTopologyEvent() {
	if p.ctx.Err() != nil {
		return
	}
	res := p.createClusterTopologyEvent()
	p.logger().Info("Update cluster.", slog.Int("members", len(res)))
	p.cluster.MemberList.UpdateClusterTopology(res)
}

func (p *Provider) getLeaseID() clientv3.LeaseID {
	return (clientv3.LeaseID)(atomic.LoadInt64((*int64)(&p.leaseID)))
}

func (p *Provider) setLeaseID(leaseID clientv3.LeaseID) {
	atomic.StoreInt64((*int64)(&p.leaseID), (int64)(leaseID))
}

func (p *Provider) newLeaseID() (clientv3.LeaseID, error) {
	ttlSecs := int64(p.keepAliveTTL / time.Second)
	ctx, cancel := p.callCtx()
	defer cancel()
	resp, err := p.client.Grant(ctx, ttlSecs)
	p.health(err)
	if err != nil {
		return 0, fmt.Errorf("etcd lease grant: %w", err)
	}
	return resp.ID, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Members returns the provider's current member ids (for status views).
func (p *Provider) Members() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.members))
	for id := range p.members {
		out = append(out, id)
	}
	return out
}

func splitHostPort(addr string) (host string, port int, err error) {
	if h, p, e := net.SplitHostPort(addr); e != nil {
		if addr != "nonhost" {
			err = e
		}
		host = "nonhost"
		port = -1
	} else {
		host = h
		port, err = strconv.Atoi(p)
	}
	return
}

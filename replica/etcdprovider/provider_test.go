package etcdprovider

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/llbproject/llb/internal/etcdconn"
	"github.com/llbproject/llb/internal/etcdtest"
)

// member is one cluster member in this test process.
type member struct {
	c        *cluster.Cluster
	p        *Provider
	lost     atomic.Value // reason string
	lostN    atomic.Int32
	unhealth atomic.Int32
}

func quiet(*actor.ActorSystem) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func client(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{etcdconn.FastReconnect()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func startMember(t *testing.T, eps []string, name string, opts ...Option) (*member, error) {
	t.Helper()
	m := &member{}
	opts = append([]Option{
		WithCallTimeout(time.Second),
		WithRetryInterval(400 * time.Millisecond),
		WithOnLeaseLost(func(r string) { m.lost.Store(r); m.lostN.Add(1) }),
		WithOnHealth(func(err error) {
			if err != nil {
				m.unhealth.Add(1)
			}
		}),
	}, opts...)
	m.p = NewWithClient("/test", client(t, eps), opts...)
	system := actor.NewActorSystem(actor.WithLoggerFactory(quiet))
	cfg := cluster.Configure(name, m.p, disthash.New(), remote.Configure("127.0.0.1", freePort(t)))
	m.c = cluster.New(system, cfg)
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err, _ = r.(error)
				if err == nil {
					err = context.DeadlineExceeded
				}
			}
		}()
		m.c.StartMember()
	}()
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { m.c.Shutdown(false) })
	return m, nil
}

func mustStart(t *testing.T, eps []string, name string, opts ...Option) *member {
	t.Helper()
	m, err := startMember(t, eps, name, opts...)
	if err != nil {
		t.Fatalf("start member: %v", err)
	}
	return m
}

func (m *member) ids() []string {
	var out []string
	for _, x := range m.c.MemberList.Members().Members() {
		out = append(out, x.Id)
	}
	slices.Sort(out)
	return out
}

func waitFor(t *testing.T, what string, d time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sameIDs(ms ...*member) func() bool {
	return func() bool {
		want := []string{}
		for _, m := range ms {
			want = append(want, m.c.ActorSystem.ID)
		}
		slices.Sort(want)
		for _, m := range ms {
			if !slices.Equal(m.ids(), want) {
				return false
			}
		}
		return true
	}
}

func TestProvider_MemberIDIsTheActorSystemID(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t, etcdtest.Options{})
	a := mustStart(t, e.Endpoints(), "c1")
	b := mustStart(t, e.Endpoints(), "c1")
	waitFor(t, "both members in both views", 5*time.Second, sameIDs(a, b))
	resp, err := client(t, e.Endpoints()).Get(context.Background(), "/test/c1/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	slices.Sort(keys)
	want := []string{"/test/c1/" + a.c.ActorSystem.ID, "/test/c1/" + b.c.ActorSystem.ID}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("etcd keys %q; want %q", keys, want)
	}
}

func TestProvider_ClusterNamesArePrefixFree(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t, etcdtest.Options{})
	a := mustStart(t, e.Endpoints(), "a")
	ab := mustStart(t, e.Endpoints(), "ab")
	time.Sleep(300 * time.Millisecond) // negative check: give a wrong view time to appear
	if got := a.ids(); len(got) != 1 {
		t.Fatalf("cluster a sees %q; want only itself", got)
	}
	if got := ab.ids(); len(got) != 1 {
		t.Fatalf("cluster ab sees %q; want only itself", got)
	}
}

// TestProvider_LeaseLossIsReportedOnce: a revoked lease (what a long stall
// leads to) is reported to the caller, the member does not re-register
// under its blocked id, and the peer drops it.
func TestProvider_LeaseLossIsReportedOnce(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t, etcdtest.Options{})
	a := mustStart(t, e.Endpoints(), "c1")
	b := mustStart(t, e.Endpoints(), "c1")
	waitFor(t, "both members in both views", 5*time.Second, sameIDs(a, b))
	if _, err := client(t, e.Endpoints()).Revoke(context.Background(), clientv3.LeaseID(a.p.LeaseID())); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a's lease loss reported", 5*time.Second, func() bool { return a.lostN.Load() == 1 })
	waitFor(t, "b drops a", 5*time.Second, func() bool { return len(b.ids()) == 1 })
	time.Sleep(1500 * time.Millisecond) // more than a retry interval: no re-registration
	resp, _ := client(t, e.Endpoints()).Get(context.Background(), "/test/c1/"+a.c.ActorSystem.ID)
	if len(resp.Kvs) != 0 {
		t.Fatal("a re-registered under its old id")
	}
	if a.lostN.Load() != 1 || a.p.GetHealthStatus() == nil {
		t.Fatalf("lease lost reported %d times, health %v; want once and an error", a.lostN.Load(), a.p.GetHealthStatus())
	}
}

// TestProvider_EtcdOutageLongerThanTheTTLKeepsTheLease: etcd down for
// twice the lease TTL, then back with its data: no lease is lost (etcd
// extends leases when it elects a leader), health reports the outage and
// its end, and the views still agree.
func TestProvider_EtcdOutageLongerThanTheTTLKeepsTheLease(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t, etcdtest.Options{})
	a := mustStart(t, e.Endpoints(), "c1")
	b := mustStart(t, e.Endpoints(), "c1")
	waitFor(t, "both members in both views", 5*time.Second, sameIDs(a, b))
	e.KillAll()
	time.Sleep(2 * DefaultLeaseTTL) // the outage itself
	if err := e.RestartAll(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.p.GetHealthStatus() != nil || b.p.GetHealthStatus() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("health after the outage: a %v (lost %v), b %v (lost %v); want nil", a.p.GetHealthStatus(), a.lost.Load(), b.p.GetHealthStatus(), b.lost.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if a.unhealth.Load() == 0 {
		t.Error("the outage was not reported through WithOnHealth")
	}
	time.Sleep(DefaultLeaseTTL + time.Second) // a lease that was not renewed would expire now
	if a.lostN.Load() != 0 || b.lostN.Load() != 0 {
		t.Fatalf("lease lost after the outage (a: %v, b: %v); want kept", a.lost.Load(), b.lost.Load())
	}
	if !sameIDs(a, b)() {
		t.Fatalf("views after the outage: a %q, b %q; want both members in both", a.ids(), b.ids())
	}
}

func TestProvider_StartMemberFailsFastWithoutEtcd(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t, etcdtest.Options{})
	eps := e.Endpoints()
	e.KillAll()
	start := time.Now()
	_, err := startMember(t, eps, "c1")
	if err == nil {
		t.Fatal("StartMember without etcd: got nil; want an error")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("StartMember without etcd took %v; want about the 1 s call timeout", took)
	}
}

func TestProvider_ShutdownIsSeenAtOnce(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t, etcdtest.Options{})
	a := mustStart(t, e.Endpoints(), "c1")
	b := mustStart(t, e.Endpoints(), "c1")
	waitFor(t, "both members in both views", 5*time.Second, sameIDs(a, b))
	start := time.Now()
	if err := a.p.Shutdown(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b drops a", 5*time.Second, func() bool { return len(b.ids()) == 1 })
	if took := time.Since(start); took > time.Second {
		t.Fatalf("b saw a leave after %v; want well under the 3 s TTL", took)
	}
}

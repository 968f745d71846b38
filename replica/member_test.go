package replica

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/llbproject/llb/internal/etcdconn"
	"github.com/llbproject/llb/internal/etcdtest"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/replica/replicapb"
)

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func testConfig(t testing.TB, eps []string) Config {
	return Config{
		ClusterName: "t1",
		Advertise:   freeAddr(t),
		Etcd:        etcdconn.Config{Endpoints: eps, DialTimeout: time.Second, RequestTimeout: time.Second},
		Log:         zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	}
}

func startTestMember(t testing.TB, cfg Config) *Member {
	t.Helper()
	m, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	if err := m.WaitMember(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	return m
}

func waitUntil(t testing.TB, what string, d time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConfig_ValidateReportsEveryProblem(t *testing.T) {
	c := Config{ClusterName: "a/b", Advertise: "0.0.0.0:7000", LeaseTTL: 1500 * time.Millisecond}
	err := c.Validate()
	for _, want := range []string{"--cluster-name", "--cluster-advertise", "no etcd endpoints", "lease TTL"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v; want it to mention %q", err, want)
		}
	}
}

// TestMembers_OneOwnerPerShardAndPinsSeenEverywhere: two replicas agree on
// each shard's owner; a pin made through one is found through the other.
func TestMembers_OneOwnerPerShardAndPinsSeenEverywhere(t *testing.T) {
	e := etcdtest.Start(t, etcdtest.Options{})
	a := startTestMember(t, testConfig(t, e.Endpoints()))
	b := startTestMember(t, testConfig(t, e.Endpoints()))
	waitUntil(t, "both members in both views", 5*time.Second, func() bool {
		return len(a.Status().Members) == 2 && len(b.Status().Members) == 2
	})
	spec := SessionSpec{Service: "10.0.0.1:2020/tcp", Shards: 8, TTL: time.Minute, MaxEntries: 800}
	ctx := context.Background()
	for i := 0; i < 40; i++ {
		key := fmt.Sprintf("conv-%d", i)
		via := []*Member{a, b}[i%2]
		via.Sessions.Pin(spec, key, ladder.Pin{Prefill: i % 4, Decode: -1})
	}
	locals := 0
	for i := 0; i < 40; i++ {
		key := fmt.Sprintf("conv-%d", i)
		var got [2]SessionAnswer
		for j, m := range []*Member{a, b} {
			waitUntil(t, "pin of "+key, 5*time.Second, func() bool {
				ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				ans, err := m.Sessions.Lookup(ctx, spec, key)
				got[j] = ans
				return err == nil && ans.Found
			})
			if got[j].Local {
				locals++
			}
		}
		if got[0].Activation != got[1].Activation || got[0].Pin.Prefill != i%4 {
			t.Fatalf("%s: a got %+v, b got %+v; want one activation holding prefill %d", key, got[0], got[1], i%4)
		}
	}
	if locals != 40 {
		t.Errorf("local answers %d of 80; want 40 (each key is local to exactly one of the two)", locals)
	}
	owned := len(a.LocalShards("")) + len(b.LocalShards(""))
	if owned != 8 {
		t.Errorf("shards active: %d; want 8, each on one member", owned)
	}
}

// TestMembers_LoadHealthAndTrieReachPeers covers the shared state.
func TestMembers_LoadHealthAndTrieReachPeers(t *testing.T) {
	e := etcdtest.Start(t, etcdtest.Options{})
	var mu sync.Mutex
	var health []HealthTransition
	var lessons []TrieInsert
	cb := testConfig(t, e.Endpoints())
	cb.OnHealth = func(from string, ts []HealthTransition) { mu.Lock(); health = append(health, ts...); mu.Unlock() }
	cb.OnTrie = func(from string, ins []TrieInsert) { mu.Lock(); lessons = append(lessons, ins...); mu.Unlock() }
	a := startTestMember(t, testConfig(t, e.Endpoints()))
	b := startTestMember(t, cb)
	waitUntil(t, "both members in both views", 5*time.Second, func() bool {
		return len(a.Status().Members) == 2 && len(b.Status().Members) == 2
	})
	svc := "10.0.0.1:2020/tcp"
	addrs := []string{"10.0.1.1:8000", "10.0.1.2:8000"}
	a.Load.Update(svc, 8, []EndpointLoad{{Index: 0, Addr: addrs[0], InFlight: 3}, {Index: 1, Addr: addrs[1], InFlight: 5}})
	start := time.Now()
	waitUntil(t, "a's load at b", 3*time.Second, func() bool {
		out := make([]int64, 2)
		b.Load.PeerInFlight(svc, addrs, time.Second, out, nil)
		return out[0] == 3 && out[1] == 5
	})
	t.Logf("load reached the peer after %v", time.Since(start))

	start = time.Now()
	a.Load.Transition(HealthTransition{Service: svc, Index: 1, Addr: addrs[1], Breaker: BreakerOpen})
	waitUntil(t, "a's breaker transition at b", 2*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(health) == 1 && health[0].Breaker == BreakerOpen && health[0].Addr == addrs[1]
	})
	t.Logf("breaker transition reached the peer after %v", time.Since(start))
	ex := make([]bool, 2)
	b.Load.PeerInFlight(svc, addrs, time.Second, make([]int64, 2), ex)
	if ex[0] || !ex[1] {
		t.Fatalf("excluded %v; want [false true]", ex)
	}

	a.Teacher.Teach(TrieInsert{Service: svc, Prompt: []byte("You are a helpful assistant."), Index: 1, Addr: addrs[1]})
	a.Teacher.Teach(TrieInsert{Service: svc, Prompt: make([]byte, DefaultTeachMaxPrompt+1), Index: 0})
	waitUntil(t, "a's lesson at b", 2*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(lessons) == 1 && string(lessons[0].Prompt) == "You are a helpful assistant." && lessons[0].Index == 1
	})
	if st := a.Teacher.Stats(); st.DroppedTooLong != 1 || st.Sent != 1 {
		t.Fatalf("teacher stats %+v; want 1 sent, 1 dropped as too long", st)
	}
}

// TestMember_RejoinGetsAFreshIDAndDoesNotLeak: a forced rejoin (what a lost
// lease triggers) comes back under a new member id, the peer sees the new
// id only, and repeated rejoins do not pile up goroutines.
func TestMember_RejoinGetsAFreshIDAndDoesNotLeak(t *testing.T) {
	e := etcdtest.Start(t, etcdtest.Options{})
	a := startTestMember(t, testConfig(t, e.Endpoints()))
	b := startTestMember(t, testConfig(t, e.Endpoints()))
	waitUntil(t, "both members in both views", 5*time.Second, func() bool { return len(b.Status().Members) == 2 })
	rejoin := func() string {
		old := a.ID()
		a.current().fail("test")
		waitUntil(t, "a back with a fresh id, seen by b", 10*time.Second, func() bool {
			id := a.ID()
			if id == "" || id == old {
				return false
			}
			ms := b.Status().Members
			return len(ms) == 2 && (ms[0].ID == id || ms[1].ID == id)
		})
		return a.ID()
	}
	rejoin()
	time.Sleep(500 * time.Millisecond) // let the torn-down incarnation's goroutines end
	base := runtime.NumGoroutine()
	for i := 0; i < 4; i++ {
		rejoin()
	}
	time.Sleep(500 * time.Millisecond)
	grown := runtime.NumGoroutine() - base
	t.Logf("goroutines after 4 more rejoins: %+d (base %d)", grown, base)
	// Two per rejoin remain for a minute: protoactor's gossip log
	// throttles, which end on their own.
	if grown > 20 {
		t.Errorf("goroutines grew by %d over 4 rejoins; want the torn-down incarnations released", grown)
	}
	if st := a.Status(); st.Rejoins != 5 || st.LastRejoinReason != "test" {
		t.Errorf("status %+v; want 5 rejoins, reason test", st)
	}
}

// TestSessionGrain_UnknownOpIsAnsweredUnsupported: a newer replica's new
// operation (an unknown oneof case) reaches an older grain as a request
// with no op; the grain answers "unsupported" instead of failing.
func TestSessionGrain_UnknownOpIsAnsweredUnsupported(t *testing.T) {
	e := etcdtest.Start(t, etcdtest.Options{})
	a := startTestMember(t, testConfig(t, e.Endpoints()))
	var req replicapb.SessionRequest
	// Field 15, length-delimited, empty: a oneof case this build lacks.
	if err := proto.Unmarshal([]byte{0x7a, 0x00}, &req); err != nil {
		t.Fatal(err)
	}
	spec := SessionSpec{Service: "svc", Shards: 1}
	inc := a.current()
	e2, err := a.Sessions.resolve(inc, spec.Identity("k"), time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	res, err := inc.system.Root.RequestFuture(e2.pid, &req, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := res.(*replicapb.SessionReply); !ok || !r.Unsupported {
		t.Fatalf("reply %v; want Unsupported", res)
	}
}

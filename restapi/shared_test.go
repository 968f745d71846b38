package restapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/rulestore"
)

// flakyStore is a rulestore.Store whose commits can fail as an unreachable
// etcd's do, whose watch can be held back (etcd down at start), and which
// can run a hook before a commit reaches the store.
type flakyStore struct {
	rulestore.Store
	down     atomic.Bool
	held     chan struct{} // non-nil: Watch delivers nothing until closed
	mu       sync.Mutex
	before   func() // run once before the next commit
	commits  atomic.Int64
	failures atomic.Int64
}

func (f *flakyStore) Commit(ctx context.Context, ops ...rulestore.Op) (int64, error) {
	f.mu.Lock()
	hook := f.before
	f.before = nil
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	f.commits.Add(1)
	if f.down.Load() {
		f.failures.Add(1)
		return 0, fmt.Errorf("%w: etcd at test did not complete a write: context deadline exceeded", rulestore.ErrUnavailable)
	}
	return f.Store.Commit(ctx, ops...)
}

func (f *flakyStore) Watch(ctx context.Context, from int64) <-chan rulestore.Event {
	if f.held == nil {
		return f.Store.Watch(ctx, from)
	}
	out := make(chan rulestore.Event)
	go func() {
		defer close(out)
		select {
		case <-f.held:
		case <-ctx.Done():
			return
		}
		for ev := range f.Store.Watch(ctx, from) {
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// replica is one cluster replica's REST server in a test.
type replica struct {
	*testServer
	rt   *viewRuntime
	stop context.CancelFunc // ends its watch (the replica stops applying)
}

// startReplica starts a REST server in cluster mode on the shared stores,
// restored (its watch running until the test ends).
func startReplica(t *testing.T, rules, ctrl rulestore.Store, mods ...func(*Config)) replica {
	t.Helper()
	rt := newViewRuntime()
	ts := newTestServer(t, append([]func(*Config){func(c *Config) {
		c.Runtime = rt
		c.StateFile = "cluster-test.rules.json"
		c.Shared = &catalog.SharedConfig{Rules: rules, Controller: ctrl, Where: "etcd at test"}
	}}, mods...)...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := ts.srv.Restore(ctx); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return replica{testServer: ts, rt: rt, stop: cancel}
}

// synced waits until the replica read the shared rules.
func (r replica) synced() replica {
	r.t.Helper()
	waitFor(r.t, "replica synced", func() bool { return r.srv.WritesAccepted() })
	return r
}

// waitFor polls cond for up to 2 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 2s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ruleCount is how many rules the replica's data plane runs.
func (r replica) ruleCount() int {
	r.rt.mu.Lock()
	defer r.rt.mu.Unlock()
	return len(r.rt.rules)
}

func TestShared_AWriteOnOneReplicaIsAppliedOnEvery(t *testing.T) {
	store := rulestore.NewMemory()
	a := startReplica(t, store, nil).synced()
	b := startReplica(t, store, nil).synced()

	a.mustPost(pdExample)
	// Read your writes: A's data plane runs the rule when the POST returns.
	if n := a.ruleCount(); n != 1 {
		t.Fatalf("A runs %d rules after its POST was acknowledged; want 1", n)
	}
	waitFor(t, "B runs the rule", func() bool { return b.ruleCount() == 1 })
	if ga, gb := mustJSON(t, a.all()), mustJSON(t, b.all()); ga != gb {
		t.Fatalf("A and B list different rules:\n A %s\n B %s", ga, gb)
	}

	r := b.do(http.MethodDelete, lbPath+"/hosturl/127.0.0.1/externalipaddress/127.0.0.1/port/2020/protocol/tcp", "")
	if r.status != http.StatusOK {
		t.Fatalf("DELETE on B: %d %s", r.status, r.body)
	}
	waitFor(t, "A stops the rule", func() bool { return a.ruleCount() == 0 && len(a.all()) == 0 })
}

func TestShared_LoxiLBAnswersStayTheSame(t *testing.T) {
	store := rulestore.NewMemory()
	a := startReplica(t, store, nil).synced()
	b := startReplica(t, store, nil).synced()
	a.mustPost(pdExample)
	waitFor(t, "B runs the rule", func() bool { return b.ruleCount() == 1 })

	tests := []struct {
		name       string
		on         replica
		method     string
		path, body string
		wantStatus int
		wantResult string
	}{
		{"identical re-POST on the other replica", b, http.MethodPost, lbPath, pdExample, 409, "lbrule-exists error"},
		{"invalid rule", a, http.MethodPost, lbPath, `{"serviceArguments":{"externalIP":"127.0.0.1","port":0,"protocol":"tcp","mode":4},"endpoints":[]}`, 0, ""},
		{"delete of a missing rule", b, http.MethodDelete, lbPath + "/externalipaddress/127.0.0.1/port/9999/protocol/tcp", "", 404, "no-rule error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.on.do(tt.method, tt.path, tt.body)
			if tt.wantStatus == 0 {
				// Validation: whatever a single node answers.
				single := started(t).do(tt.method, tt.path, tt.body)
				if r.status != single.status || r.body != single.body {
					t.Fatalf("got %d %s; want the single node's %d %s", r.status, r.body, single.status, single.body)
				}
				return
			}
			if r.status != tt.wantStatus || !strings.Contains(r.errBody(t).Result, tt.wantResult) {
				t.Fatalf("got %d %s; want %d with %q", r.status, r.body, tt.wantStatus, tt.wantResult)
			}
		})
	}
}

func TestShared_AConcurrentChangeIsDecidedAgain(t *testing.T) {
	mem := rulestore.NewMemory()
	store := &flakyStore{Store: mem}
	a := startReplica(t, store, nil).synced()
	b := startReplica(t, store, nil).synced()
	// B creates the rule (with another weight) just before A's create
	// reaches the store: A's create fails its "absent" precondition, A
	// decides again on the table with B's rule — a replace — and wins.
	bVersion := strings.Replace(pdExample, `"kvZmqPort": 5557`, `"kvZmqPort": 5558`, 1)
	if bVersion == pdExample {
		t.Fatal("test setup: the example has no weight to change")
	}
	store.mu.Lock()
	store.before = func() { b.mustPost(bVersion) }
	store.mu.Unlock()
	a.mustPost(pdExample)
	if got := store.commits.Load(); got != 3 {
		t.Fatalf("%d commits; want 3 (B's create, A's refused create, A's replace)", got)
	}
	want := mustJSON(t, a.all())
	waitFor(t, "B converges on A's version", func() bool { return mustJSON(t, b.all()) == want })
	if !strings.Contains(want, `"kvZmqPort":5557`) {
		t.Fatalf("rules %s; want A's version (kvZmqPort 5557) in force", want)
	}
}

func TestShared_StoreDownAnswers503AndKeepsServing(t *testing.T) {
	store := &flakyStore{Store: rulestore.NewMemory()}
	a := startReplica(t, store, nil).synced()
	a.mustPost(pdExample)
	store.down.Store(true)
	for _, tt := range []struct{ method, path, body string }{
		{http.MethodPost, lbPath, chwblExample},
		{http.MethodDelete, lbPath + "/hosturl/127.0.0.1/externalipaddress/127.0.0.1/port/2020/protocol/tcp", ""},
		{http.MethodDelete, lbPath + "/all", ""},
	} {
		r := a.do(tt.method, tt.path, tt.body)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
			!strings.Contains(r.errBody(t).Result, "rule store unavailable (etcd at test)") {
			t.Fatalf("%s %s with the store down: %d %s (Retry-After %q); want 503 naming the store",
				tt.method, tt.path, r.status, r.body, r.header.Get("Retry-After"))
		}
	}
	if n := a.ruleCount(); n != 1 || len(a.all()) != 1 {
		t.Fatalf("data plane runs %d rules, GET lists %d; want the last applied rule kept", n, len(a.all()))
	}
	store.down.Store(false)
	a.mustPost(chwblExample)
	if n := a.ruleCount(); n != 2 {
		t.Fatalf("after the store came back: %d rules; want 2", n)
	}
}

func TestShared_ARestartServesTheCacheUntilTheStoreAnswers(t *testing.T) {
	mem := rulestore.NewMemory()
	dir := t.TempDir()
	inDir := func(c *Config) { c.StateDir = dir }
	a := startReplica(t, mem, nil, inDir).synced()
	a.mustPost(pdExample)
	a.mustPost(chwblExample)

	// Another replica deletes one rule while this one is down; then this
	// one restarts with the store unreachable.
	a.stop()
	b := startReplica(t, mem, nil).synced()
	if r := b.do(http.MethodDelete, lbPath+"/hosturl/127.0.0.1/externalipaddress/127.0.0.1/port/2021/protocol/tcp", ""); r.status != 200 {
		t.Fatalf("DELETE on B: %d %s", r.status, r.body)
	}
	held := &flakyStore{Store: mem, held: make(chan struct{})}
	a2 := startReplica(t, held, nil, inDir)
	if n := a2.ruleCount(); n != 2 {
		t.Fatalf("restarted with the store down: runs %d rules; want the 2 cached", n)
	}
	if r := a2.post(chwblExample); r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "has not read the rules yet") {
		t.Fatalf("POST before the first read: %d %s; want 503 saying so", r.status, r.body)
	}
	close(held.held)
	waitFor(t, "resynced to the store's single rule", func() bool { return a2.srv.WritesAccepted() && a2.ruleCount() == 1 })
}

func TestShared_ControllerEpochsHoldAcrossReplicas(t *testing.T) {
	rules, ctrl := rulestore.NewMemory(), rulestore.NewMemory()
	a := startReplica(t, rules, ctrl).synced()
	b := startReplica(t, rules, ctrl).synced()
	a.mustPost(pdExample)
	waitFor(t, "B runs the rule", func() bool { return b.ruleCount() == 1 })

	r := a.do(http.MethodPost, ctrlEndpointPath, `{"service":"id-1","ep_idx":1,"state":"DRAINING","weight":40,"epoch":7}`)
	if r.status != 200 {
		t.Fatalf("controller POST on A: %d %s", r.status, r.body)
	}
	waitFor(t, "B applies the instruction", func() bool {
		_, sets := b.rt.calls()
		return len(sets) == 1 && sets[0] == ControllerUpdate{State: CtrlDraining, Weight: 40, Epoch: 7}
	})
	r = b.do(http.MethodPost, ctrlEndpointPath, `{"service":"`+pdKey+`","ep_idx":1,"state":"ACTIVE","weight":100,"epoch":6}`)
	if r.status != http.StatusConflict || !strings.Contains(r.body, "older than the stored 7") {
		t.Fatalf("older epoch on B: %d %s; want 409 stale", r.status, r.body)
	}
	// A new replica applies the stored instruction when it starts the rule.
	c := startReplica(t, rules, ctrl).synced()
	waitFor(t, "C applies the stored instruction", func() bool {
		_, sets := c.rt.calls()
		return len(sets) == 1 && sets[0].Epoch == 7
	})
}

func TestShared_SingleNodeAnswersClusterDisabled(t *testing.T) {
	ts := started(t)
	if r := ts.do(http.MethodGet, clusterPath, ""); r.status != 200 || r.body != `{"enabled":false,"rejoins":0}`+"\n" {
		t.Fatalf("GET cluster on a single node: %d %s", r.status, r.body)
	}
	a := startReplica(t, rulestore.NewMemory(), nil).synced()
	if r := a.do(http.MethodGet, clusterPath, ""); r.status != 200 || !strings.Contains(r.body, `"ruleStore":{"where":"etcd at test","revision":`) ||
		!strings.Contains(r.body, `"synced":true`) {
		t.Fatalf("GET cluster on a replica: %d %s", r.status, r.body)
	}
}

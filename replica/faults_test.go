package replica

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// faultResult is what one fault did to the cluster's session ownership.
type faultResult struct {
	Name string
	// Reanswer: fault start → every key answered by the live members, one
	// activation per key (0: never stopped answering).
	Reanswer time.Duration
	// Heal: fault end → all members converged again (same member set
	// everywhere).
	Heal time.Duration
	// MinAnswered is the fewest keys answered in one sample during the
	// fault and the healing; MaxSplit the most keys answered by two
	// different activations at once.
	MinAnswered, MaxSplit int
	// Doubles: identities active on more than one member after healing.
	Doubles int
	// Rejoins: memberships rebuilt with a fresh id during the fault.
	Rejoins int64
	// Found: keys whose pin survived (the rest restart empty).
	Found int
}

func (r faultResult) String() string {
	return fmt.Sprintf("%-28s reanswer %-8v heal %-8v min answered %2d  max split %d  doubles %d  rejoins %d  pins kept %d",
		r.Name, r.Reanswer.Round(10*time.Millisecond), r.Heal.Round(10*time.Millisecond), r.MinAnswered, r.MaxSplit, r.Doubles, r.Rejoins, r.Found)
}

// sampler looks every key up on the live members every 200 ms.
type sampler struct {
	f           *fleet
	mu          sync.Mutex
	live        []int
	start       time.Time
	firstAll    time.Duration
	sawMiss     bool
	minAnswered int
	maxSplit    int
	stop, done  chan struct{}
}

func (f *fleet) sample(live []int) *sampler {
	s := &sampler{f: f, live: live, start: time.Now(), minAnswered: len(f.keys), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			s.mu.Lock()
			live := s.live
			s.mu.Unlock()
			v := f.look(live, 300*time.Millisecond)
			s.mu.Lock()
			s.minAnswered = min(s.minAnswered, v.answered)
			s.maxSplit = max(s.maxSplit, v.split)
			if v.answered < len(f.keys) || v.split > 0 {
				s.sawMiss = true
			} else if s.sawMiss && s.firstAll == 0 {
				s.firstAll = time.Since(s.start)
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *sampler) setLive(live []int) {
	s.mu.Lock()
	s.live = live
	s.mu.Unlock()
}

func (s *sampler) finish(r *faultResult) {
	close(s.stop)
	<-s.done
	r.MinAnswered, r.MaxSplit, r.Reanswer = s.minAnswered, s.maxSplit, s.firstAll
}

func (f *fleet) rejoins() int64 {
	var n int64
	for i := range f.procs {
		if st, err := f.status(i); err == nil {
			n += st.Rejoins
		}
	}
	return n
}

func without(live []int, x int) []int {
	var out []int
	for _, i := range live {
		if i != x {
			out = append(out, i)
		}
	}
	return out
}

// settle finishes a fault: all members converged, every key answered by one
// activation, then doubles and surviving pins counted.
func (f *fleet) settle(r *faultResult, healStart time.Time, rejoins0 int64) {
	f.t.Helper()
	f.waitConverged(f.all(), 30*time.Second)
	r.Heal = time.Since(healStart)
	_, v := f.waitAnswered(f.all(), 15*time.Second)
	r.Found = v.found
	r.Doubles = f.doubles(f.all())
	r.Rejoins = f.rejoins() - rejoins0
	f.pinAll(0) // re-teach for the next fault
}

// killOwner SIGKILLs the member owning most shards, waits for the others
// to answer its keys, then restarts it on the same address.
func (f *fleet) killOwner() faultResult {
	r := faultResult{Name: "SIGKILL owner + restart"}
	rj := f.rejoins()
	v := f.busiest(f.all())
	live := without(f.all(), v)
	s := f.sample(live)
	start := time.Now()
	f.procs[v].kill()
	d, _ := f.waitAnswered(live, 20*time.Second)
	f.start(f.procs[v])
	healStart := time.Now()
	s.setLive(live) // the restarted member joins the samples after settling
	f.settle(&r, healStart, rj)
	s.finish(&r)
	r.Reanswer = d
	_ = start
	return r
}

// stall freezes the busiest member for d (SIGSTOP), then thaws it.
func (f *fleet) stall(d time.Duration) faultResult {
	r := faultResult{Name: fmt.Sprintf("SIGSTOP %v", d)}
	rj := f.rejoins()
	v := f.busiest(f.all())
	s := f.sample(without(f.all(), v))
	f.procs[v].signal(syscall.SIGSTOP)
	time.Sleep(d) // the fault itself
	f.procs[v].signal(syscall.SIGCONT)
	healStart := time.Now()
	f.settle(&r, healStart, rj)
	s.finish(&r)
	return r
}

// etcdOutage kills every etcd member for d, then restarts them.
func (f *fleet) etcdOutage(d time.Duration) faultResult {
	r := faultResult{Name: fmt.Sprintf("etcd outage %v", d)}
	rj := f.rejoins()
	s := f.sample(f.all())
	f.etcd.KillAll()
	time.Sleep(d) // the fault itself
	if err := f.etcd.RestartAll(30 * time.Second); err != nil {
		f.t.Fatal(err)
	}
	healStart := time.Now()
	time.Sleep(2 * DefaultLeaseTTL) // a lease lost in the outage would show now
	f.settle(&r, healStart, rj)
	s.finish(&r)
	return r
}

// etcdMemberKill SIGKILLs one etcd member for d, then restarts it.
func (f *fleet) etcdMemberKill(d time.Duration) faultResult {
	r := faultResult{Name: "kill -9 one etcd member"}
	rj := f.rejoins()
	s := f.sample(f.all())
	f.etcd.Member(0).Kill()
	time.Sleep(d) // the fault itself
	if err := f.etcd.RestartAll(30 * time.Second); err != nil {
		f.t.Fatal(err)
	}
	healStart := time.Now()
	f.settle(&r, healStart, rj)
	s.finish(&r)
	return r
}

func checkHealed(t *testing.T, r faultResult, wantRejoins bool) {
	t.Helper()
	t.Log(r)
	if r.Doubles != 0 {
		t.Errorf("%s: %d identities active on two members after healing; want 0", r.Name, r.Doubles)
	}
	if !wantRejoins && r.Rejoins != 0 {
		t.Errorf("%s: %d rejoins; want none", r.Name, r.Rejoins)
	}
	if wantRejoins && r.Rejoins == 0 {
		t.Errorf("%s: no rejoin; want the stalled member to rejoin with a fresh id", r.Name)
	}
}

// TestProcs_KillOwnerStallAndEtcdOutage is the short version of the soak
// (make test): three member processes, one etcd.
func TestProcs_KillOwnerStallAndEtcdOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster test")
	}
	f := startFleet(t, 3, 1, 12)
	f.pinAll(0)
	if _, v := f.waitAnswered(f.all(), 10*time.Second); v.found != len(f.keys) {
		t.Fatalf("pins found by every member: %d of %d", v.found, len(f.keys))
	}
	r := f.killOwner()
	checkHealed(t, r, false)
	if r.Reanswer > 10*time.Second {
		t.Errorf("%s: keys answered again after %v; want within the lease TTL plus a few seconds", r.Name, r.Reanswer)
	}
	checkHealed(t, f.stall(6*time.Second), true)
	checkHealed(t, f.etcdOutage(2*DefaultLeaseTTL), false)
}

// TestSoak_Faults is make cluster-test: three member processes and a
// three-member etcd through every fault of the issue, with a table.
func TestSoak_Faults(t *testing.T) {
	if os.Getenv("LLB_CLUSTER_LONG") != "1" {
		t.Skip("long soak: make cluster-test (LLB_CLUSTER_LONG=1)")
	}
	f := startFleet(t, 3, 3, 20)
	f.pinAll(0)
	f.waitAnswered(f.all(), 10*time.Second)
	var rs []faultResult
	run := func(r faultResult, rejoin bool) {
		checkHealed(t, r, rejoin)
		rs = append(rs, r)
	}
	run(f.killOwner(), false)
	run(f.killOwner(), false)
	run(f.stall(6*time.Second), true)
	run(f.stall(12*time.Second), true)
	run(f.etcdMemberKill(10*time.Second), false)
	run(f.etcdOutage(20*time.Second), false)
	run(f.etcdOutage(45*time.Second), false)
	var b strings.Builder
	for _, r := range rs {
		b.WriteString("\n" + r.String())
	}
	t.Logf("cluster soak, 3 members, 3-member etcd, %d shards:%s", len(f.keys), b.String())
}

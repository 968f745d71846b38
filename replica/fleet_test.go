package replica

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llbproject/llb/internal/etcdtest"
	"github.com/llbproject/llb/ladder"
)

// fleet is N member processes (this test binary as helper) and an etcd.
type fleet struct {
	t      testing.TB
	etcd   *etcdtest.Cluster
	procs  []*proc
	shards int
	keys   []string // keys[i] lands in shard i
	http   http.Client
}

// proc is one member process on its own loopback address.
type proc struct {
	i         int
	advertise string
	ctl       string
	mu        sync.Mutex
	cmd       *exec.Cmd
	done      chan struct{}
	log       *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startFleet(t testing.TB, members, etcdMembers, shards int) *fleet {
	t.Helper()
	e := etcdtest.Start(t, etcdtest.Options{Members: etcdMembers})
	n := time.Now().UnixNano() ^ int64(os.Getpid())<<16
	base := net.IPv4(127, byte(10+n%200), byte((n>>10)%250+1), 0)
	f := &fleet{t: t, etcd: e, shards: shards, http: http.Client{Timeout: 5 * time.Second}}
	for i := 0; i < members; i++ {
		ip := append(net.IP(nil), base.To4()...)
		ip[3] = byte(10 + i)
		p := &proc{i: i, advertise: net.JoinHostPort(ip.String(), "7400"), ctl: net.JoinHostPort(ip.String(), "7500"), log: &syncBuffer{}}
		f.procs = append(f.procs, p)
		f.start(p)
	}
	t.Cleanup(func() {
		for _, p := range f.procs {
			p.kill()
		}
		if t.Failed() {
			for _, p := range f.procs {
				t.Logf("member %d log:\n%s", p.i, tail(p.log.String(), 4000))
			}
		}
	})
	for seen, k := map[int]bool{}, 0; len(f.keys) < shards; k++ {
		key := fmt.Sprintf("conv-%d", k)
		if s := ladder.ShardFor(key, shards); !seen[s] {
			seen[s] = true
			f.keys = append(f.keys, key)
		}
	}
	slices.SortFunc(f.keys, func(a, b string) int { return ladder.ShardFor(a, shards) - ladder.ShardFor(b, shards) })
	f.waitConverged(f.all(), 20*time.Second)
	return f
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (f *fleet) all() []int {
	out := make([]int, len(f.procs))
	for i := range out {
		out[i] = i
	}
	return out
}

func (f *fleet) start(p *proc) {
	f.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"LLB_REPLICA_HELPER=1",
		"LLB_REPLICA_CLUSTER=soak",
		"LLB_REPLICA_ADVERTISE="+p.advertise,
		"LLB_REPLICA_CTL="+p.ctl,
		"LLB_REPLICA_ETCD="+strings.Join(f.etcd.Endpoints(), ","),
	)
	cmd.Stdout, cmd.Stderr = io.Discard, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

func (p *proc) signal(s syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(s)
	}
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGKILL)
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done != nil {
		<-done
	}
}

func (f *fleet) get(i int, path string, q url.Values, out any) error {
	u := "http://" + f.procs[i].ctl + path
	if q != nil {
		u += "?" + q.Encode()
	}
	resp, err := f.http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (f *fleet) status(i int) (Status, error) {
	var st Status
	err := f.get(i, "/status", nil, &st)
	return st, err
}

// converged: every member in live is a member and sees exactly live.
func (f *fleet) converged(live []int) bool {
	var ids []string
	for _, i := range live {
		st, err := f.status(i)
		if err != nil || st.State != StateMember {
			return false
		}
		ids = append(ids, st.MemberID)
	}
	slices.Sort(ids)
	for _, i := range live {
		st, _ := f.status(i)
		var got []string
		for _, m := range st.Members {
			got = append(got, m.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, ids) {
			return false
		}
	}
	return true
}

func (f *fleet) waitConverged(live []int, d time.Duration) time.Duration {
	f.t.Helper()
	start := time.Now()
	for !f.converged(live) {
		if time.Since(start) > d {
			var b strings.Builder
			for _, i := range live {
				st, err := f.status(i)
				fmt.Fprintf(&b, "\n  member %d: %s %s err=%v members=%d etcd=%+v", i, st.State, st.MemberID, err, len(st.Members), st.Etcd)
			}
			f.t.Fatalf("members %v did not converge within %v:%s", live, d, b.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

func (f *fleet) lookup(i int, timeout time.Duration) ([]lookupOne, error) {
	var res lookupResult
	q := url.Values{"keys": {strings.Join(f.keys, ",")}, "shards": {fmt.Sprint(f.shards)}, "timeout_ms": {fmt.Sprint(timeout.Milliseconds())}}
	if err := f.get(i, "/lookup", q, &res); err != nil {
		return nil, err
	}
	return res.Results, nil
}

func (f *fleet) pinAll(via int) {
	f.t.Helper()
	for s, key := range f.keys {
		q := url.Values{"key": {key}, "shards": {fmt.Sprint(f.shards)}, "prefill": {fmt.Sprint(s % 7)}}
		if err := f.get(via, "/pin", q, nil); err != nil {
			f.t.Fatal(err)
		}
	}
}

// view is what the live members answer for every key at one moment.
type view struct {
	answered int // keys answered without error by every live member
	split    int // keys answered by different activations on different members
	found    int // keys whose pin every live member found
}

func (f *fleet) look(live []int, timeout time.Duration) view {
	per := make([][]lookupOne, len(live))
	for j, i := range live {
		r, err := f.lookup(i, timeout)
		if err != nil {
			return view{}
		}
		per[j] = r
	}
	var v view
	for k := range f.keys {
		ok, found := true, true
		acts := map[string]bool{}
		for j := range live {
			r := per[j][k]
			ok = ok && r.Err == ""
			found = found && r.Found
			if r.Err == "" {
				acts[r.Activation] = true
			}
		}
		if ok {
			v.answered++
		}
		if found && ok {
			v.found++
		}
		if len(acts) > 1 {
			v.split++
		}
	}
	return v
}

// doubles counts identities active on more than one live member.
func (f *fleet) doubles(live []int) int {
	count := map[string]int{}
	for _, i := range live {
		var local map[string]string
		if err := f.get(i, "/local", nil, &local); err != nil {
			continue
		}
		for id := range local {
			count[id]++
		}
	}
	n := 0
	for _, c := range count {
		if c > 1 {
			n++
		}
	}
	return n
}

// owner returns the live member holding the most shards.
func (f *fleet) busiest(live []int) int {
	best, most := live[0], -1
	for _, i := range live {
		var local map[string]string
		_ = f.get(i, "/local", nil, &local)
		if len(local) > most {
			best, most = i, len(local)
		}
	}
	return best
}

// waitAnswered waits until every live member answers every key (found or
// not) from one activation per key; it returns how long that took.
func (f *fleet) waitAnswered(live []int, d time.Duration) (time.Duration, view) {
	f.t.Helper()
	start := time.Now()
	for {
		v := f.look(live, 300*time.Millisecond)
		if v.answered == len(f.keys) && v.split == 0 {
			return time.Since(start), v
		}
		if time.Since(start) > d {
			f.t.Fatalf("members %v: %d of %d keys answered, %d split, after %v", live, v.answered, len(f.keys), v.split, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

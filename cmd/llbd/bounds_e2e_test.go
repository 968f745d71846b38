package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// The data plane's process-wide bounds end to end: the real llbd, with a
// small body budget and connection limit from the environment, in front of
// a simulated worker.

// boundsFleet starts one simulated worker on n and a daemon with env, and
// posts a single-pool rule on n's VIP; it returns the daemon and the VIP.
func boundsFleet(t *testing.T, env ...string) (*daemon, string) {
	t.Helper()
	n := newChaosNet()
	tmpl := worker.DefaultConfig()
	tmpl.KVEvents = false
	tmpl.Engine.Latency.TimeScale = 0.01
	f, err := fleet.Start(fleet.Config{Single: 1, BaseIP: n.ip(10), HTTPPort: 8000, Template: &tmpl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.Stop(ctx)
	})
	d := startDataPlane(t, env...)
	vip := n.ip(1)
	d.post(ruleJSON(t, f, vip, 2020, nil))
	d.waitActive(2020)
	return d, vip + ":2020"
}

// paddedCompletion is a valid completion of n bytes whose bulk is a field
// the worker ignores.
func paddedCompletion(n int) []byte {
	b := []byte(`{"model":"sim-model","prompt":"hello","max_tokens":1,"padding":"`)
	b = append(b, bytes.Repeat([]byte("x"), n-len(b)-2)...)
	return append(b, `"}`...)
}

// rssKB is a process's resident set in kB.
func rssKB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// budgetAnswer is how one client's large request went.
type budgetAnswer struct {
	status     int
	code       string
	retryAfter string
	closed     bool
	before     bool // answered before the rest of the body was sent
	err        error
}

// Eight clients send a 15 MiB body at once — each its head and a first
// part, then, once all heads are in, the rest — to an llbd whose body
// budget holds two: two are served, six get 503 body_buffer_full before
// sending the rest, each with Retry-After and a close; the refusals are
// counted, nothing stays reserved, llbd serves large and small requests
// afterwards, and its memory comes back.
func TestE2E_ConcurrentLargeBodiesBeyondTheBudgetAreRefusedAndTheRestServed(t *testing.T) {
	const (
		budget  = 32 << 20
		clients = 8
		size    = 15 << 20
		first   = 64 << 10
	)
	d, vip := boundsFleet(t, "LLB_BODY_BUFFER_BYTES="+strconv.Itoa(budget))
	pid := d.cmd.Process.Pid
	base := rssKB(t, pid)
	body := paddedCompletion(size)
	head := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", vip, len(body))

	answers := make([]budgetAnswer, clients)
	var sent, wg sync.WaitGroup
	release := make(chan struct{})
	for i := range answers {
		sent.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &answers[i]
			c, err := net.Dial("tcp", vip)
			if err != nil {
				a.err = err
				sent.Done()
				return
			}
			defer c.Close()
			_, a.err = c.Write(append([]byte(head), body[:first]...))
			sent.Done()
			<-release
			// An answer already there came before the rest of the body.
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			br := bufio.NewReader(c)
			_, perr := br.Peek(1)
			a.before = perr == nil
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if !a.before {
				if _, err := c.Write(body[first:]); err != nil {
					a.err = err
					return
				}
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				a.err = err
				return
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
			if i := bytes.Index(got, []byte(`"code":"`)); i >= 0 {
				a.code = string(got[i+8 : i+8+bytes.IndexByte(got[i+8:], '"')])
			}
			_, err = br.ReadByte()
			a.closed = err == io.EOF
		}()
	}
	sent.Wait()
	metrics := func() promSeries {
		_, text := d.do(http.MethodGet, "/metrics", "")
		return parseProm(text)
	}
	waitUntil(t, "every head is in and reserved or refused", 30*time.Second, func() bool {
		m := metrics()
		return int(m.sum("llb_body_buffer_refused_total"))+int(m.sum("llb_body_buffer_reserved_bytes"))/len(body) >= clients
	})
	close(release)
	wg.Wait()

	served, refused := 0, 0
	for i, a := range answers {
		switch {
		case a.err != nil:
			t.Errorf("client %d: %v", i, a.err)
		case a.status == http.StatusOK && !a.before && a.closed:
			served++
		case a.status == http.StatusServiceUnavailable && a.code == "body_buffer_full" && a.retryAfter == "1" && a.before && a.closed:
			refused++
		default:
			t.Errorf("client %d: %+v; want 200, or 503 body_buffer_full with Retry-After 1 before the rest of the body, then a close", i, a)
		}
	}
	if served != budget/size || refused != clients-budget/size {
		t.Fatalf("%d served, %d refused; want %d and %d (the budget holds %d bodies)", served, refused, budget/size, clients-budget/size, budget/size)
	}
	m := metrics
	if got := m().sum("llb_body_buffer_refused_total"); got != float64(refused) {
		t.Errorf("llb_body_buffer_refused_total %v; want %d", got, refused)
	}
	if got := m().sum("llb_body_buffer_limit_bytes"); got != budget {
		t.Errorf("llb_body_buffer_limit_bytes %v; want %d", got, budget)
	}
	waitUntil(t, "nothing stays reserved", 5*time.Second, func() bool { return m().sum("llb_body_buffer_reserved_bytes") == 0 })

	// Still serving, large and small.
	for _, b := range [][]byte{body, []byte(`{"model":"sim-model","prompt":"hi","max_tokens":1}`)} {
		resp, err := http.Post("http://"+vip+"/v1/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a %d-byte request after the burst: %d", len(b), resp.StatusCode)
		}
	}
	if code, _ := d.do(http.MethodGet, "/netlox/v1/version", ""); code != http.StatusOK {
		t.Fatalf("REST after the burst: %d", code)
	}
	// The burst's memory is given back once its bodies are done.
	peak := rssKB(t, pid)
	waitUntil(t, fmt.Sprintf("the RSS (%d MiB after the burst) comes back near its level before it (%d MiB)", peak>>10, base>>10), 20*time.Second,
		func() bool { return rssKB(t, pid)-base <= 48<<10 })
}

// Connections beyond --max-conns are answered 503 too_many_connections
// and closed, and counted; a closed connection frees its slot.
func TestE2E_ConnectionsBeyondTheLimitAreRefused(t *testing.T) {
	d, vip := boundsFleet(t, "LLB_MAX_CONNS=3")
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", vip)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	m := func() promSeries {
		_, text := d.do(http.MethodGet, "/metrics", "")
		return parseProm(text)
	}
	waitUntil(t, "three connections counted", 5*time.Second, func() bool { return m().sum("llb_client_connections") == 3 })
	over, err := http.Get("http://" + vip + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(over.Body)
	over.Body.Close()
	if over.StatusCode != http.StatusServiceUnavailable || !bytes.Contains(b, []byte(`"code":"too_many_connections"`)) ||
		over.Header.Get("Retry-After") != "1" || !over.Close {
		t.Fatalf("a fourth connection: %d %s (Retry-After %q, close %v); want 503 too_many_connections", over.StatusCode, b, over.Header.Get("Retry-After"), over.Close)
	}
	if got := m().sum("llb_client_connections_refused_total"); got != 1 {
		t.Errorf("llb_client_connections_refused_total %v; want 1", got)
	}
	held[0].Close()
	waitUntil(t, "the closed connection's slot is free", 5*time.Second, func() bool { return m().sum("llb_client_connections") == 2 })
	resp, err := http.Get("http://" + vip + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with a free slot: %d", resp.StatusCode)
	}
}

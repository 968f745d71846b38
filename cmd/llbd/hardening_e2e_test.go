package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Hardening end to end: the real llbd against what a careless operator or a
// hostile client does (issue 13).

// singleRule is a single-pool mode:4 rule on vip:port with one endpoint.
func singleRule(vip string, port int, ep string, epPort int) string {
	return fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":0,"mode":4},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":%d,"weight":1}]}`, vip, port, ep, epPort)
}

func TestE2E_AnEndpointThatIsItsOwnVIPIsRefused(t *testing.T) {
	d := startDataPlane(t)
	net0 := newChaosNet()
	vip := net0.ip(44)
	code, body := d.do(http.MethodPost, "/netlox/v1/config/loadbalancer", singleRule(vip, 32080, vip, 32080))
	if code != http.StatusBadRequest || !strings.Contains(body, "endpoints.0.endpointIP") || !strings.Contains(body, "loop") {
		t.Fatalf("POST a rule whose endpoint is its own VIP:port: %d %s; want 400 naming endpoints.0.endpointIP", code, body)
	}
	// And the REST API's own address.
	code, body = d.do(http.MethodPost, "/netlox/v1/config/loadbalancer", singleRule(vip, 32081, "127.0.0.1", portOf(t, d.addr)))
	if code != http.StatusBadRequest || !strings.Contains(body, "llbd's own listener") {
		t.Fatalf("POST a rule whose endpoint is the REST API: %d %s; want 400", code, body)
	}
	if n := len(d.rules()); n != 0 {
		t.Fatalf("%d rules stored; want none", n)
	}
}

// tcpForwarder relays every connection on its address to target: a NAT
// that validation cannot see through.
type tcpForwarder struct {
	ln       net.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn // closed on cleanup (llbd keeps idle upstream connections)
}

func (f *tcpForwarder) track(c net.Conn) {
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
}

func startForwarder(t *testing.T, addr, target string) *tcpForwarder {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &tcpForwarder{ln: ln}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.accepted.Add(1)
			f.track(c)
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				up, err := net.DialTimeout("tcp", target, time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				f.track(up)
				go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	fmt.Sscanf(p, "%d", &n)
	return n
}

// A loop validation cannot see (the endpoint is a NAT back to the VIP) is
// caught by the hop header: the request comes back once, is answered 508
// and never forwarded again; a health probe loops the same way, fails, and
// takes the endpoint out. Before, one request looped until every file
// descriptor was used.
func TestE2E_ALoopThroughANATIsAnswered508AndCostsOneHop(t *testing.T) {
	d := startDataPlane(t)
	n := newChaosNet()
	vip, nat := n.ip(1), n.ip(2)
	fwd := startForwarder(t, nat+":32081", vip+":32080")
	// No probe on this rule: every request reaches the looping endpoint.
	d.post(fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":32080,"protocol":"tcp","sel":0,"mode":4,"probetype":"none"},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":32081,"weight":1}]}`, vip, nat))
	base := "http://" + vip + ":32080"
	ask := func() (int, string, error) {
		r, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":1}`))
		if err != nil {
			return 0, "", err
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b), nil
	}
	waitUntil(t, "the rule serves", 10*time.Second, func() bool { _, _, err := ask(); return err == nil })
	before := fwd.accepted.Load()
	for i := 0; i < 10; i++ {
		code, body, err := ask()
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusLoopDetected || !strings.Contains(body, `"code":"loop_detected"`) {
			t.Fatalf("looping request %d: %d %s; want 508 loop_detected", i, code, body)
		}
	}
	// Each request crosses the NAT at most once (upstream connections are
	// reused); a loop would take thousands.
	if got := fwd.accepted.Load() - before; got > 10 {
		t.Fatalf("the NAT saw %d connections for 10 requests; the loop was not cut", got)
	}

	// With the default probe, the looping endpoint's /health gets 508 too:
	// it goes inactive.
	vip2, nat2 := n.ip(3), n.ip(4)
	startForwarder(t, nat2+":32081", vip2+":32080")
	d.post(fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":32080,"protocol":"tcp","sel":0,"mode":4,"probeTimeout":1},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":32081,"weight":1}]}`, vip2, nat2))
	loops := func() float64 {
		_, text := d.do(http.MethodGet, "/metrics", "")
		return parseProm(text).sum("llb_loop_detected_total", `service="tcp:`+vip2+`:32080"`)
	}
	inactive := func() bool {
		for _, r := range d.rules() {
			if r["serviceArguments"].(map[string]any)["externalIP"] != vip2 {
				continue
			}
			for _, ep := range r["endpoints"].([]any) {
				if ep.(map[string]any)["state"] == "inactive" {
					return true
				}
			}
		}
		return false
	}
	// The probe's own request comes back and is refused (counted), and the
	// endpoint is out.
	waitUntil(t, "the looping endpoint's probe is refused and takes it out", 30*time.Second, func() bool { return loops() >= 1 && inactive() })
}

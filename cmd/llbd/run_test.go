package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// inProcess runs the daemon in this process; stop cancels it and returns run's error.
type inProcess struct {
	addr string
	log  *logWatch
	stop func() error
}

func startInProcess(t *testing.T, extra ...string) *inProcess {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := newLogWatch()
	args := append([]string{"--listen", "127.0.0.1:0", "--state-dir", t.TempDir(), "--log-format", "json", "--log-level", "debug"}, extra...)
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, envOf(), io.Discard, w) }()
	addr := w.waitMsg(t, "rest api listening", 10*time.Second)["addr"].(string)
	w.waitMsg(t, "configuration writes accepted", 10*time.Second)
	p := &inProcess{addr: addr, log: w}
	var once sync.Once
	var result error
	p.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(20 * time.Second):
				result = fmt.Errorf("run did not return within 20s of cancel")
			}
		})
		return result
	}
	t.Cleanup(func() { _ = p.stop() })
	return p
}

func TestRun_ShutdownDrainsInFlightRequests(t *testing.T) {
	p := startInProcess(t, "--drain-timeout", "10s")
	body := `{"serviceArguments":{"externalIP":"127.0.0.1","port":2021,"protocol":"tcp","sel":8,"mode":4},` +
		`"endpoints":[{"endpointIP":"127.0.0.1","targetPort":8000,"weight":1}]}`
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	half := len(body) / 2
	fmt.Fprintf(conn, "POST /netlox/v1/config/loadbalancer HTTP/1.1\r\nHost: llbd\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:half])

	p.log.waitMsg(t, "request received", 10*time.Second) // the server is handling it: in flight
	stopped := make(chan error, 1)
	go func() { stopped <- p.stop() }()
	p.log.waitMsg(t, "draining in-flight requests", 10*time.Second)
	select {
	case err := <-stopped:
		t.Fatalf("run returned (%v) while a request was still in flight", err)
	default:
	}
	if _, err := io.WriteString(conn, body[half:]); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("in-flight request: %v; log:\n%s", err, p.log.text())
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.Contains(string(b), "Success") {
		t.Errorf("in-flight request: got %d %s; want it served during the drain", res.StatusCode, b)
	}
	if err := <-stopped; err != nil {
		t.Errorf("run: got %v; want nil after a clean drain", err)
	}
	if !p.log.has("stopped") {
		t.Error("no \"stopped\" log line")
	}
	if _, err := net.Dial("tcp", p.addr); err == nil {
		t.Error("listener still accepting after shutdown")
	}
}

func TestRun_DrainDeadlineClosesStuckConnections(t *testing.T) {
	p := startInProcess(t, "--drain-timeout", "100ms")
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A request that never finishes its body.
	fmt.Fprintf(conn, "POST /netlox/v1/config/loadbalancer HTTP/1.1\r\nHost: llbd\r\nContent-Length: 100\r\n\r\n{")
	p.log.waitMsg(t, "request received", 10*time.Second)
	if err := p.stop(); err != nil {
		t.Fatalf("run: got %v; want nil (exit 0) even past the drain deadline", err)
	}
	if !p.log.has("drain deadline passed") {
		t.Errorf("no drain-deadline warning; log:\n%s", p.log.text())
	}
}

func TestRun_ListenFailureExits1(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stderr strings.Builder
	err = run(t.Context(), []string{"--listen", ln.Addr().String(), "--state-dir", t.TempDir(), "--log-format", "json"}, envOf(), io.Discard, &stderr)
	if code := exitCode(err, &stderr); code != exitFailure || !strings.Contains(stderr.String(), "address already in use") {
		t.Errorf("got exit %d, %q; want 1 and the bind error", code, stderr.String())
	}
}

func TestRun_CorruptStateIsReportedNotFatal(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startInProcess(t, "--state-dir", dir)
	line := p.log.waitMsg(t, "state file unusable", time.Second)
	if moved, _ := line["moved_to"].(string); !strings.HasPrefix(moved, filepath.Join(dir, "rules.json.corrupt-")) {
		t.Errorf("moved_to: got %v", line["moved_to"])
	}
	res, err := http.Get("http://" + p.addr + "/netlox/v1/version")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), `"corruptMovedTo"`) {
		t.Errorf("version: got %s; want the moved-aside file reported", b)
	}
}

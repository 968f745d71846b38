//go:build linux

package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// BenchmarkStreamEvent is what relaying one SSE event costs, as a stream
// relays it: the backend sends each event only once the client has read
// the one before, so every event is one upstream read, one client write
// and, with migration on, one tracked event (ssetrack.go). Paths: the
// client reading the backend directly (the client's and the backend's own
// cost), and through the gateway with migration off and on (the default:
// each event followed, usage asked for and deleted). The relay's cost per
// event is a gateway path's cpu-µs/event minus direct's. Streams of 256
// vLLM chat chunks, one at a time, over loopback.
func BenchmarkStreamEvent(b *testing.B) {
	const events = 256
	be := lockstepBackend(b, events)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":256,"stream":true}`
	paths := []struct {
		name string
		mig  int // -1: direct
	}{{"direct", -1}, {"gateway/migration=0", 0}, {"gateway/migration=default", rule.DefaultMigrationLimit}}
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			addr := be.String()
			if p.mig >= 0 {
				cfg := singlePool(be)
				cfg.MigrationLimit = p.mig
				_, l := startBenchGateway(b, cfg, &instantRouter{d: decision(ladder.TierSelector, 0, -1)})
				addr = l.Addr().String()
			}
			req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: llb\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", PathChatCompletions, len(body), body)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			stream := func() {
				if _, err := io.WriteString(c, req); err != nil {
					b.Fatal(err)
				}
				readLockstep(b, c, events)
			}
			stream() // warm: connections, pools
			b.ReportAllocs()
			b.ResetTimer()
			c0 := processCPU()
			n := 0
			for n < b.N {
				stream()
				n += events
			}
			b.ReportMetric(float64(processCPU()-c0)/float64(n)/1e3, "cpu-µs/event")
		})
	}
}

// lockstepBackend streams n vLLM chat chunks per request (usage in each
// when asked for continuous usage), each once the client has read the one
// before (the client and the backend share the process: it says so on
// lockstep).
func lockstepBackend(b *testing.B, n int) netip.AddrPort {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	plain := make([][]byte, n)
	usage := make([][]byte, n)
	for i := range n {
		ev := `data: {"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]`
		plain[i] = []byte(chunk(ev + "}\n\n"))
		usage[i] = []byte(chunk(ev + `,"usage":{"prompt_tokens":300,"total_tokens":` + strconv.Itoa(301+i) + `,"completion_tokens":` + strconv.Itoa(i+1) + "}}\n\n"))
	}
	end := []byte(chunk("data: [DONE]\n\n") + "0\r\n\r\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					body, ok := readRequestBody(c)
					if !ok {
						return
					}
					evs := plain
					if strings.Contains(body, `"continuous_usage_stats":true`) {
						evs = usage
					}
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
						return
					}
					for _, ev := range evs {
						if _, err := c.Write(ev); err != nil {
							return
						}
						<-lockstep
					}
					if _, err := c.Write(end); err != nil {
						return
					}
				}
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// lockstep carries the client's "read it" to the backend (one stream at a
// time).
var lockstep = make(chan struct{}, 1)

// readLockstep reads one chunked SSE response of n events from c, telling
// the backend after each event.
func readLockstep(b *testing.B, c net.Conn, n int) {
	var buf [4096]byte
	seen := 0
	var tail []byte
	for {
		k, err := c.Read(buf[:])
		if err != nil {
			b.Fatal(err)
		}
		data := append(tail, buf[:k]...)
		got := bytes.Count(data, []byte("\n\n"))
		if i := bytes.LastIndex(data, []byte("\n\n")); i >= 0 {
			data = data[i+2:]
		}
		tail = append(tail[:0], data...)
		for range got {
			if seen < n {
				lockstep <- struct{}{}
			}
			seen++
		}
		if seen > n && bytes.HasSuffix(buf[:k], []byte("0\r\n\r\n")) {
			return
		}
	}
}

// readRequestBody reads one request with a Content-Length body from c.
func readRequestBody(c net.Conn) (string, bool) {
	var head []byte
	var one [1]byte
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if _, err := c.Read(one[:]); err != nil {
			return "", false
		}
		head = append(head, one[0])
	}
	n := 0
	for _, line := range strings.Split(string(head), "\r\n") {
		if v, ok := strings.CutPrefix(strings.ToLower(line), "content-length:"); ok {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return "", false
	}
	return string(body), true
}

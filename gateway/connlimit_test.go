package gateway

import (
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/internal/testwait"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/ladder"
)

func TestMaxConnsFor_DerivesTheDefaultFromTheOpenFileLimit(t *testing.T) {
	tests := []struct {
		give uint64
		want int
	}{
		{0, fallbackMaxConns},                        // unknown
		{256, minDefaultMaxConns},                    // below the reserve
		{reservedFDs + 3*minDefaultMaxConns, 64},     // the floor exactly
		{reservedFDs + 3*minDefaultMaxConns + 3, 65}, // one more connection's worth
		{1024, (1024 - 512) / 3},                     // a common default
		{20000, (20000 - 512) / 3},                   // the development machine
		{1 << 20, maxDefaultMaxConns},                // a container's 1048576
		{^uint64(0), maxDefaultMaxConns},             // unlimited
	}
	for _, tt := range tests {
		if got := maxConnsFor(tt.give); got != tt.want {
			t.Errorf("maxConnsFor(%d) = %d; want %d", tt.give, got, tt.want)
		}
	}
	if d := DefaultMaxConns(); d < minDefaultMaxConns || d > maxDefaultMaxConns {
		t.Errorf("DefaultMaxConns() = %d; want %d–%d", d, minDefaultMaxConns, maxDefaultMaxConns)
	}
}

func TestConnLimit_CountsSlotsConcurrently(t *testing.T) {
	c := NewConnLimit(10, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if !c.acquire() {
					continue
				}
				mu.Lock()
				held++
				if held > 10 {
					t.Errorf("%d slots held; the limit is 10", held)
				}
				mu.Unlock()
				mu.Lock()
				held--
				mu.Unlock()
				c.release()
			}
		}()
	}
	wg.Wait()
	if c.Open() != 0 {
		t.Errorf("%d slots open after every release", c.Open())
	}
	var none *ConnLimit
	if !none.acquire() || none.Max() != 0 || none.Open() != 0 {
		t.Error("a nil limit refused or counted")
	}
	none.release()
}

// limitGateway starts n single-pool listeners sharing a connection limit
// of max.
func limitGateway(t *testing.T, max, n int, set *metrics.Set) ([]string, *ConnLimit) {
	t.Helper()
	be := newFakeVLLM(t)
	lim := NewConnLimit(max, set)
	var urls []string
	for range n {
		url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1))), Conns: lim})
		urls = append(urls, url)
	}
	return urls, lim
}

// The limit is the process's, across listeners: once it is reached, a new
// connection to any of them gets 503 too_many_connections and a close; a
// closed connection frees its slot.
func TestListener_AConnectionOverTheLimitIsAnswered503AndClosed(t *testing.T) {
	set := metrics.NewSet()
	urls, lim := limitGateway(t, 2, 2, set)
	first := rawConn(t, urls[0])
	_ = rawConn(t, urls[1])
	testwait.Eventually(t, "two connections counted", func() bool { return lim.Open() == 2 })

	c := rawConn(t, urls[0])
	resp, body, br := rawExchange(t, c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 26\r\n\r\n{\"model\":\"m\",\"prompt\":\"p\"}")
	if e := decodeError(t, body); resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != CodeTooManyConnections ||
		resp.Header.Get("Retry-After") != "1" || !resp.Close {
		t.Fatalf("over the limit: %d %s (Retry-After %q, close %v); want 503 %s, Retry-After 1, close",
			resp.StatusCode, body, resp.Header.Get("Retry-After"), resp.Close, CodeTooManyConnections)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the refusal: %v; want EOF", err)
	}

	first.Close()
	testwait.Eventually(t, "the closed connection's slot is free", func() bool { return lim.Open() == 1 })
	if resp, body := post(t, testClient(t), urls[1]+PathCompletions, `{"model":"m","prompt":"p"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("with a free slot: %d %s", resp.StatusCode, body)
	}
	var sb strings.Builder
	set.WritePrometheus(&sb)
	for _, want := range []string{"llb_client_connections_limit 2", "llb_client_connections_refused_total 1"} {
		if !strings.Contains(sb.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, sb.String())
		}
	}
}

// An h2c connection over the limit gets the server's SETTINGS and a GOAWAY
// that refuses every stream (REFUSED_STREAM, last stream 0), then a close.
func TestListener_AnH2CConnectionOverTheLimitGetsGoAway(t *testing.T) {
	urls, lim := limitGateway(t, 1, 1, nil)
	_ = rawConn(t, urls[0])
	testwait.Eventually(t, "one connection counted", func() bool { return lim.Open() == 1 })
	c := rawConn(t, urls[0])
	if _, err := io.WriteString(c, h2Preface+"\r\n\r\nSM\r\n\r\n"+"\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading the refusal: %v", err)
	}
	type frame struct {
		typ     byte
		payload []byte
	}
	var frames []frame
	for len(got) >= 9 {
		n := int(got[0])<<16 | int(got[1])<<8 | int(got[2])
		if len(got) < 9+n {
			t.Fatalf("a truncated frame: %q", got)
		}
		frames = append(frames, frame{got[3], got[9 : 9+n]})
		got = got[9+n:]
	}
	if len(frames) != 2 || frames[0].typ != 0x4 || frames[1].typ != 0x7 || len(frames[1].payload) < 8 {
		t.Fatalf("frames %+v; want SETTINGS then GOAWAY", frames)
	}
	g := frames[1].payload
	if last, code := binary.BigEndian.Uint32(g), binary.BigEndian.Uint32(g[4:]); last != 0 || code != 0x7 ||
		!strings.Contains(string(g[8:]), CodeTooManyConnections) {
		t.Errorf("GOAWAY last %d code %#x debug %q; want 0, REFUSED_STREAM, %s", last, code, g[8:], CodeTooManyConnections)
	}
}

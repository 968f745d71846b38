package gateway

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/internal/testwait"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/ladder"
)

func TestBodyReservation_DeclaredLengthOrTheLimitForChunked(t *testing.T) {
	const limit = 1000
	tests := []struct {
		name string
		give int64
		want int64
	}{
		{"declared", 10, 10},
		{"declared at the limit", limit, limit},
		{"declared over the limit (413 unread)", limit + 1, 0},
		{"chunked", -1, limit},
		{"no body", 0, 0},
		{"neither header", -2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bodyReservation(tt.give, limit); got != tt.want {
				t.Errorf("bodyReservation(%d, %d) = %d; want %d", tt.give, limit, got, tt.want)
			}
		})
	}
}

func TestBodyBudget_ReservesWhatFitsAndCountsRefusals(t *testing.T) {
	type step struct {
		reserve, release int64
		wantOK           bool
		wantReserved     int64
	}
	tests := []struct {
		name  string
		steps []step
		want  uint64 // refusals
	}{
		{"fills exactly", []step{{reserve: 60, wantOK: true, wantReserved: 60}, {reserve: 40, wantOK: true, wantReserved: 100}}, 0},
		{"one byte over", []step{{reserve: 60, wantOK: true, wantReserved: 60}, {reserve: 41, wantReserved: 60}}, 1},
		{"a release makes room", []step{{reserve: 100, wantOK: true, wantReserved: 100}, {reserve: 1, wantReserved: 100},
			{release: 30, wantReserved: 70}, {reserve: 30, wantOK: true, wantReserved: 100}}, 1},
		{"larger than the whole budget", []step{{reserve: 101, wantReserved: 0}}, 1},
		{"nothing to reserve always fits", []step{{reserve: 100, wantOK: true, wantReserved: 100}, {reserve: 0, wantOK: true, wantReserved: 100}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBodyBudget(100, nil)
			for i, s := range tt.steps {
				if s.release > 0 {
					b.Release(s.release)
				} else if ok := b.Reserve(s.reserve); ok != s.wantOK {
					t.Fatalf("step %d: Reserve(%d) = %v; want %v", i, s.reserve, ok, s.wantOK)
				}
				if got := b.Reserved(); got != s.wantReserved {
					t.Fatalf("step %d: reserved %d; want %d", i, got, s.wantReserved)
				}
			}
			if got := b.Refused(); got != tt.want {
				t.Errorf("refused %d; want %d", got, tt.want)
			}
		})
	}
}

func TestBodyBudget_NilIsNoBudget(t *testing.T) {
	var b *BodyBudget
	if !b.Reserve(1<<62) || b.Reserved() != 0 || b.Limit() != 0 || b.Refused() != 0 {
		t.Fatal("a nil budget refused or counted")
	}
	b.Release(1 << 62)
}

// Concurrent reservations never take more than the budget, and every
// release brings it back to zero (run with -race).
func TestBodyBudget_ConcurrentReservationsStayWithinTheLimit(t *testing.T) {
	const limit = 1 << 20
	b := NewBodyBudget(limit, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var granted, refused int
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 2000 {
				n := 1 + rng.Int64N(limit/4)
				if !b.Reserve(n) {
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				if r := b.Reserved(); r > limit {
					t.Errorf("reserved %d over the limit %d", r, limit)
				}
				mu.Lock()
				granted++
				mu.Unlock()
				b.Release(n)
			}
		}()
	}
	wg.Wait()
	if b.Reserved() != 0 {
		t.Errorf("reserved %d after every release; want 0", b.Reserved())
	}
	if granted == 0 || uint64(refused) != b.Refused() {
		t.Errorf("granted %d, refused %d, counted %d", granted, refused, b.Refused())
	}
}

func TestBodyBudget_ExportsItsSeries(t *testing.T) {
	set := metrics.NewSet()
	b := NewBodyBudget(100, set)
	b.Reserve(70)
	b.Reserve(70)
	var sb strings.Builder
	set.WritePrometheus(&sb)
	for _, want := range []string{"llb_body_buffer_limit_bytes 100", "llb_body_buffer_reserved_bytes 70", "llb_body_buffer_refused_total 1"} {
		if !strings.Contains(sb.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, sb.String())
		}
	}
}

// ---- through the listener -------------------------------------------------

// budgetGateway starts a single-pool listener with a body budget of
// budget bytes and a body limit of limit.
func budgetGateway(t *testing.T, budget, limit int64) (string, *BodyBudget, *fakeVLLM) {
	t.Helper()
	be := newFakeVLLM(t)
	cfg := singlePool(be.addr())
	b := NewBodyBudget(budget, nil)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGatewayWith(t, cfg, Options{BodyLimit: limit}, Deps{Router: fr, Budget: b})
	return url, b, be
}

// holdBody opens a connection that sends a request head declaring n body
// bytes and one byte of the body: its reservation stays until finish
// sends the rest (and returns the answer's status).
func holdBody(t *testing.T, url string, n int, b *BodyBudget, wantReserved int64) (finish func() int) {
	t.Helper()
	c := rawConn(t, url)
	body := `{"model":"m","prompt":"` + strings.Repeat("x", n-len(`{"model":"m","prompt":""}`)) + `"}`
	head := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(n) + "\r\n\r\n"
	if _, err := io.WriteString(c, head+body[:1]); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, "the held body is reserved", func() bool { return b.Reserved() == wantReserved })
	return func() int {
		if _, err := io.WriteString(c, body[1:]); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
}

// checkBudgetRefusal checks an answer is the documented 503.
func checkBudgetRefusal(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d %s; want 503", resp.StatusCode, body)
	}
	if e := decodeError(t, body); e.Error.Code != CodeBodyBufferFull || e.Error.Type != CodeBodyBufferFull {
		t.Errorf("error %+v; want type and code %s", e.Error, CodeBodyBufferFull)
	}
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q; want 1", got)
	}
	if !resp.Close {
		t.Error("the connection was kept open after a refused body")
	}
}

// A request whose body does not fit is answered 503 as soon as its head
// is in — the client has sent no byte of the body — and the connection is
// closed; once the held body is done, the next one is served, and nothing
// stays reserved.
func TestListener_ABodyOverTheBudgetIsRefusedBeforeItIsRead(t *testing.T) {
	url, b, _ := budgetGateway(t, 1<<20, 1<<20)
	finish := holdBody(t, url, 800<<10, b, 800<<10)

	for _, tt := range []struct{ name, head string }{
		{"declared", "Content-Length: 300000"},
		{"chunked", "Transfer-Encoding: chunked"},
		{"expect 100-continue", "Content-Length: 300000\r\nExpect: 100-continue"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := rawConn(t, url)
			resp, body, br := rawExchange(t, c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+tt.head+"\r\n\r\n")
			checkBudgetRefusal(t, resp, body)
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("after the answer: %v; want the connection closed (EOF)", err)
			}
		})
	}
	if got := finish(); got != http.StatusOK {
		t.Fatalf("the held request: %d; want 200", got)
	}
	testwait.Eventually(t, "the budget is free", func() bool { return b.Reserved() == 0 })
	resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"`+strings.Repeat("y", 900<<10)+`"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a body that fits after the release: %d %s", resp.StatusCode, body)
	}
	if b.Refused() != 3 {
		t.Errorf("refusals counted %d; want 3", b.Refused())
	}
}

// A client that sends its large body at once, as HTTP clients do, still
// reads the 503: the connection is not reset under the answer.
func TestListener_ARefusedClientStillSendingItsBodyReadsThe503(t *testing.T) {
	url, b, _ := budgetGateway(t, 8<<20, 8<<20)
	finish := holdBody(t, url, 4<<20, b, 4<<20)
	defer finish()
	body := `{"model":"m","prompt":"` + strings.Repeat("z", 6<<20) + `"}`
	for i := range 5 {
		resp, got := post(t, testClient(t), url+PathCompletions, body)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("attempt %d: %d; want 503", i, resp.StatusCode)
		}
		checkBudgetRefusal(t, resp, got)
	}
}

// A one-byte body is read with the head before the refusal shows: the
// handler answers it the same way.
func TestListener_AOneByteBodyOverTheBudgetIsRefusedToo(t *testing.T) {
	url, b, be := budgetGateway(t, 1<<20, 1<<20)
	finish := holdBody(t, url, 1<<20, b, 1<<20)
	c := rawConn(t, url)
	if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	checkBudgetRefusal(t, resp, got)
	if finish() != http.StatusOK {
		t.Fatal("the held request was not served")
	}
	if n := len(be.requests()); n != 1 {
		t.Errorf("the backend saw %d requests; want the held one only", n)
	}
}

// A chunked body reserves the rule's whole limit until it is read, then
// only its size; and the reservation of a client that leaves mid-body, or
// is answered 408 or 413, is released with its connection.
func TestListener_ReservationsFollowTheBodyAndEndWithTheConnection(t *testing.T) {
	url, b, _ := budgetGateway(t, 4<<20, 1<<20)
	t.Run("chunked trimmed to its size", func(t *testing.T) {
		release := make(chan struct{})
		be := streamingBackend(t, release)
		cfg := singlePool(be.addr())
		b2 := NewBodyBudget(4<<20, nil)
		url2, _ := startGatewayWith(t, cfg, Options{BodyLimit: 1 << 20}, Deps{Router: newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1))), Budget: b2})
		c := rawConn(t, url2)
		body := `{"model":"m","prompt":"p","stream":true}`
		if _, err := fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(body), body); err != nil {
			t.Fatal(err)
		}
		testwait.Eventually(t, "the chunked body reserves the limit", func() bool { return b2.Reserved() == 1<<20 })
		if _, err := io.WriteString(c, "0\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		testwait.Eventually(t, "the reservation shrinks to the body", func() bool { return b2.Reserved() == int64(len(body)) })
		close(release)
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v %v", resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		testwait.Eventually(t, "the reservation ends with the answer", func() bool { return b2.Reserved() == 0 })
	})
	for _, tt := range []struct{ name, send string }{
		{"leaves mid-body", "Content-Length: 500000\r\n\r\n{\"model\""},
		{"leaves at a chunk boundary", "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n"},
		{"malformed chunk", "Transfer-Encoding: chunked\r\n\r\nzz\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := rawConn(t, url)
			if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"+tt.send); err != nil {
				t.Fatal(err)
			}
			testwait.Eventually(t, "the body is reserved or refused", func() bool { return b.Reserved() > 0 || readClosed(c) })
			_ = c.(*net.TCPConn).CloseWrite()
			_, _ = io.Copy(io.Discard, c)
			testwait.Eventually(t, "the reservation is released", func() bool { return b.Reserved() == 0 })
		})
	}
}

// readClosed reports whether c was closed by the server (without waiting).
func readClosed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
	var one [1]byte
	_, err := c.Read(one[:])
	_ = c.SetReadDeadline(time.Time{})
	return err != nil && !isTimeout(err)
}

// h2c reserves before reading a stream's body: one that does not fit is
// answered 503 on its stream, and the connection serves the next.
func TestListener_H2CBodiesShareTheBudget(t *testing.T) {
	url, b, _ := budgetGateway(t, 1<<20, 1<<20)
	finish := holdBody(t, url, 1<<20-100, b, 1<<20-100)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, body := post(t, c, url+PathCompletions, `{"model":"m","prompt":"`+strings.Repeat("q", 4096)+`"}`)
	if resp.ProtoMajor != 2 {
		t.Fatalf("proto %d; want HTTP/2", resp.ProtoMajor)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || decodeError(t, body).Error.Code != CodeBodyBufferFull || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("h2c body over the budget: %d %s; want 503 %s with Retry-After", resp.StatusCode, body, CodeBodyBufferFull)
	}
	if finish() != http.StatusOK {
		t.Fatal("the held request was not served")
	}
	testwait.Eventually(t, "the budget is free", func() bool { return b.Reserved() == 0 })
	resp, body = post(t, c, url+PathCompletions, `{"model":"m","prompt":"p"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("h2c after the release: %d %s", resp.StatusCode, body)
	}
	if b.Reserved() != 0 {
		t.Errorf("reserved %d after the h2c answers; want 0", b.Reserved())
	}
}

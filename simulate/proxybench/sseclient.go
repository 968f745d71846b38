package proxybench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The streams benchmark's client: n slots, each one client connection
// that sends a streamed chat completion, reads its events to the end and
// sends the next on the same connection (keep-alive), as an SDK's pooled
// connection would. The slots start spread evenly over the ramp, so
// stream starts are spread over time as real traffic's are; every event's
// delay is its arrival time minus the backend's send stamp.
//
// A slot that gets an error answer counts its status, waits Retry-After
// (1 s without one) and tries again, as OpenAI's SDKs do; one whose
// connection fails counts it and dials again a second later.

// streamRequest is the request each stream sends (a small chat prompt).
const streamRequestBody = `{"model":"` + streamModel + `","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write a short story about a lighthouse keeper who finds a message in a bottle."}],"max_tokens":256,"stream":true}`

// loadShards spreads the recording locks.
const loadShards = 32

// streamLoad is one run of n streams against one address.
type streamLoad struct {
	addr   string
	local  *net.TCPAddr // the client's source address (nil: any)
	n      int
	events int
	req    []byte // the whole request, head and body
	// t0 is when the first slot starts; slot i starts at t0 + ramp·i/n.
	// Events are measured in [winStart, winEnd); no stream starts after
	// winEnd; every connection is cut at hardEnd.
	t0, winStart, winEnd, hardEnd time.Time
	ramp                          time.Duration

	shards [loadShards]loadShard

	eventsInWin  atomic.Int64
	streamsOK    atomic.Int64
	connErrors   atomic.Int64 // dials that failed
	broken       atomic.Int64 // streams that ended early (a reset, a missing event or [DONE])
	mu           sync.Mutex
	statuses     map[int]int64     // answers other than 200, by status
	codes        map[string]int64  // the same by "status code" (the error body's code)
	samples      map[string]string // the first answer of each, its X-Llb-Route and body
	retryWaiting atomic.Int64      // slots waiting out a Retry-After
}

// loadShard holds one shard of the histograms (µs).
type loadShard struct {
	mu    sync.Mutex
	delay *hdrhistogram.Histogram
	first *hdrhistogram.Histogram
}

func newStreamLoad(addr string, n, events int, ramp, window time.Duration, streamLen time.Duration) *streamLoad {
	l := &streamLoad{addr: addr, n: n, events: events, ramp: ramp, statuses: map[int]int64{}, codes: map[string]int64{}, samples: map[string]string{}}
	for i := range l.shards {
		l.shards[i].delay, l.shards[i].first = newHist(), newHist()
	}
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: llbsim-streams\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: " +
		strconv.Itoa(len(streamRequestBody)) + "\r\n\r\n"
	l.req = []byte(head + streamRequestBody)
	now := time.Now()
	l.t0 = now.Add(100 * time.Millisecond)
	l.winStart = l.t0.Add(ramp)
	l.winEnd = l.winStart.Add(window)
	l.hardEnd = l.winEnd.Add(2*streamLen + 15*time.Second)
	return l
}

// run runs every slot and returns when they are done.
func (l *streamLoad) run(ctx context.Context) {
	ctx, cancel := context.WithDeadline(ctx, l.hardEnd)
	defer cancel()
	var wg sync.WaitGroup
	for i := range l.n {
		wg.Go(func() { l.slot(ctx, i) })
	}
	wg.Wait()
}

// recorder batches one slot's samples before they go to its shard.
type recorder struct {
	sh           *loadShard
	delay, first []int64
}

func (r *recorder) flush() {
	if len(r.delay) == 0 && len(r.first) == 0 {
		return
	}
	r.sh.mu.Lock()
	for _, v := range r.delay {
		_ = r.sh.delay.RecordValue(v)
	}
	for _, v := range r.first {
		_ = r.sh.first.RecordValue(v)
	}
	r.sh.mu.Unlock()
	r.delay, r.first = r.delay[:0], r.first[:0]
}

// slot runs one client connection's streams.
func (l *streamLoad) slot(ctx context.Context, i int) {
	rec := &recorder{sh: &l.shards[i%loadShards], delay: make([]int64, 0, 64)}
	defer rec.flush()
	start := l.t0.Add(time.Duration(int64(l.ramp) * int64(i) / int64(l.n)))
	if !sleepUntil(ctx, start) {
		return
	}
	var c net.Conn
	var br *bufio.Reader
	defer func() {
		if c != nil {
			_ = c.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() {
		if c != nil {
			_ = c.SetDeadline(aLongTimeAgo)
		}
	})
	defer stop()
	var chunk []byte
	reused := false
	for ctx.Err() == nil && time.Now().Before(l.winEnd) {
		if c == nil {
			d := net.Dialer{Timeout: 30 * time.Second}
			if l.local != nil {
				d.LocalAddr = l.local
			}
			nc, err := d.DialContext(ctx, "tcp", l.addr)
			if err != nil {
				if ctx.Err() == nil {
					l.connErrors.Add(1)
					l.mu.Lock()
					if _, ok := l.samples["dial"]; !ok {
						l.samples["dial"] = err.Error()
					}
					l.mu.Unlock()
					sleepUntil(ctx, time.Now().Add(time.Second))
				}
				continue
			}
			c, reused = nc, false
			if ctx.Err() != nil { // the AfterFunc may have run before c was set
				return
			}
			if br == nil {
				br = bufio.NewReaderSize(c, 8<<10)
			} else {
				br.Reset(c)
			}
		}
		sent := time.Now()
		res := l.stream(c, br, sent, rec, &chunk)
		rec.flush()
		switch {
		case res.stale && reused:
			// The proxy closed the idle keep-alive connection as we wrote:
			// not an error of the stream; send it again on a new one.
		case res.status != 0 && res.status != 200:
			key := strconv.Itoa(res.status) + " " + errorCode(res.body)
			l.mu.Lock()
			l.statuses[res.status]++
			l.codes[key]++
			if _, ok := l.samples[key]; !ok {
				l.samples[key] = "X-Llb-Route: " + res.route + "; body: " + string(res.body)
			}
			l.mu.Unlock()
		case res.err != nil:
			if ctx.Err() == nil {
				l.broken.Add(1)
			}
		default:
			l.streamsOK.Add(1)
		}
		if !res.keep {
			_ = c.Close()
			c = nil
		} else {
			reused = true
		}
		if res.retryAfter > 0 {
			l.retryWaiting.Add(1)
			sleepUntil(ctx, time.Now().Add(res.retryAfter))
			l.retryWaiting.Add(-1)
		}
	}
}

// streamResult is how one request ended.
type streamResult struct {
	status     int           // 0 when no head was read
	keep       bool          // the connection can carry the next request
	stale      bool          // nothing was read: a closed keep-alive connection
	retryAfter time.Duration // wait before the next request (error answers)
	err        error         // the stream broke or was incomplete
	// body (its first 512 bytes) and route (X-Llb-Route) of an error answer
	body  []byte
	route string
}

// stream sends one request on c and reads its answer.
func (l *streamLoad) stream(c net.Conn, br *bufio.Reader, sent time.Time, rec *recorder, chunk *[]byte) streamResult {
	if _, err := c.Write(l.req); err != nil {
		return streamResult{stale: true, err: err}
	}
	h, err := readRespHead(br)
	if err != nil {
		return streamResult{stale: h.status == 0 && errors.Is(err, io.EOF), err: err}
	}
	res := streamResult{status: h.status, keep: !h.close}
	if h.status != 200 {
		var keep []byte
		err := h.readBody(br, chunk, func(b []byte, _ time.Time) {
			if n := min(len(b), 512-len(keep)); n > 0 {
				keep = append(keep, b[:n]...)
			}
		})
		if err != nil {
			res.keep = false
		}
		res.body, res.route = keep, h.route
		res.retryAfter = h.retryAfter
		if res.retryAfter <= 0 {
			res.retryAfter = time.Second
		}
		return res
	}
	events, done := 0, false
	var carry []byte
	line := func(line []byte, now time.Time) {
		payload, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			return
		}
		if bytes.HasPrefix(payload, []byte("[DONE]")) {
			done = true
			return
		}
		stamp, ok := eventStamp(payload)
		if !ok {
			return
		}
		events++
		if events == 1 && !sent.Before(l.winStart) && sent.Before(l.winEnd) {
			rec.first = append(rec.first, max(now.Sub(sent).Microseconds(), 1))
		}
		if !now.Before(l.winStart) && now.Before(l.winEnd) {
			l.eventsInWin.Add(1)
			rec.delay = append(rec.delay, max((now.UnixNano()-stamp)/1e3, 1))
			if len(rec.delay) == cap(rec.delay) {
				rec.flush()
			}
		}
	}
	// onData splits the body into lines; a line cut between two reads
	// waits in carry for its end.
	onData := func(data []byte, now time.Time) {
		for len(data) > 0 {
			j := bytes.IndexByte(data, '\n')
			if j < 0 {
				carry = append(carry, data...)
				return
			}
			if len(carry) > 0 {
				carry = append(carry, data[:j]...)
				line(carry, now)
				carry = carry[:0]
			} else {
				line(data[:j], now)
			}
			data = data[j+1:]
		}
	}
	if err := h.readBody(br, chunk, onData); err != nil {
		res.keep, res.err = false, err
		return res
	}
	if !done || events != l.events {
		res.err = fmt.Errorf("stream ended after %d of %d events (done %v)", events, l.events, done)
	}
	return res
}

// eventStamp reads the "t" stamp at the end of an event's JSON.
func eventStamp(payload []byte) (int64, bool) {
	i := bytes.LastIndex(payload, []byte(`"t":`))
	if i < 0 {
		return 0, false
	}
	var v int64
	n := 0
	for _, b := range payload[i+4:] {
		if b < '0' || b > '9' {
			break
		}
		v = v*10 + int64(b-'0')
		n++
	}
	return v, n > 0
}

// respHead is what the client needs of a response head.
type respHead struct {
	status     int
	length     int64 // -1: none
	chunked    bool
	close      bool
	retryAfter time.Duration
	route      string // X-Llb-Route
}

func readRespHead(br *bufio.Reader) (respHead, error) {
	h := respHead{length: -1}
	line, err := br.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 && err == io.EOF {
			return h, io.EOF
		}
		return h, err
	}
	f := bytes.Fields(line)
	if len(f) < 2 || !bytes.HasPrefix(f[0], []byte("HTTP/1.")) {
		return h, fmt.Errorf("status line %q", line)
	}
	if h.status, err = strconv.Atoi(string(f[1])); err != nil {
		return h, fmt.Errorf("status line %q", line)
	}
	h.close = bytes.Equal(f[0], []byte("HTTP/1.0"))
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return h, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			return h, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			h.length, _ = strconv.ParseInt(string(value), 10, 64)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			h.chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			h.close = bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("X-Llb-Route")):
			h.route = string(value)
		case bytes.EqualFold(name, []byte("Retry-After")):
			if s, err := strconv.Atoi(string(value)); err == nil {
				h.retryAfter = time.Duration(s) * time.Second
			}
		}
	}
}

// readBody reads the body, handing each piece to onData with the time it
// arrived.
func (h *respHead) readBody(br *bufio.Reader, buf *[]byte, onData func([]byte, time.Time)) error {
	switch {
	case h.chunked:
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return err
			}
			if i := bytes.IndexAny(line, ";\r\n"); i >= 0 {
				line = line[:i]
			}
			size, err := strconv.ParseInt(string(line), 16, 64)
			if err != nil || size < 0 || size > 16<<20 {
				return fmt.Errorf("chunk size %q", line)
			}
			if size == 0 {
				for { // trailers up to the empty line
					line, err = br.ReadSlice('\n')
					if err != nil {
						return err
					}
					if len(bytes.TrimSpace(line)) == 0 {
						return nil
					}
				}
			}
			if int64(cap(*buf)) < size {
				*buf = make([]byte, size)
			}
			b := (*buf)[:size]
			if _, err := io.ReadFull(br, b); err != nil {
				return err
			}
			now := time.Now()
			if _, err := br.Discard(2); err != nil {
				return err
			}
			onData(b, now)
		}
	case h.length >= 0:
		left := h.length
		for left > 0 {
			if cap(*buf) < 4096 {
				*buf = make([]byte, 4096)
			}
			n, err := br.Read((*buf)[:min(int64(cap(*buf)), left)])
			if n > 0 {
				onData((*buf)[:n], time.Now())
			}
			left -= int64(n)
			if err != nil && left > 0 {
				return err
			}
		}
		return nil
	default:
		h.close = true
		for {
			if cap(*buf) < 4096 {
				*buf = make([]byte, 4096)
			}
			n, err := br.Read((*buf)[:cap(*buf)])
			if n > 0 {
				onData((*buf)[:n], time.Now())
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
}

// errorCode is the "code" of an OpenAI error body ("" when none).
func errorCode(body []byte) string {
	_, rest, ok := bytes.Cut(body, []byte(`"code":`))
	if !ok {
		return ""
	}
	rest = bytes.TrimLeft(rest, ` "`)
	if i := bytes.IndexAny(rest, `",}`); i >= 0 {
		rest = rest[:i]
	}
	return string(rest)
}

// sleepUntil waits until t or ctx's end; false when ctx ended.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// aLongTimeAgo is a deadline in the past: it wakes a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// merged returns the shards' histograms merged.
func (l *streamLoad) merged() (delay, first *hdrhistogram.Histogram) {
	delay, first = newHist(), newHist()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		delay.Merge(sh.delay)
		first.Merge(sh.first)
		sh.mu.Unlock()
	}
	return delay, first
}

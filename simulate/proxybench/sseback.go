package proxybench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/llbproject/llb/simulate/harness"
)

// The streams benchmark's backend: a vLLM-shaped OpenAI server on raw
// HTTP/1.1 that streams chat completions the way vLLM's (uvicorn's) does —
// a chunked text/event-stream answer, one chunk per event, each event a
// chat.completion.chunk — at a fixed pace, every event stamped with its
// send time ("t", Unix nanoseconds) so the client can tell how long it
// travelled. It also answers GET /health (200, empty, as vLLM) and GET
// /metrics (vLLM's queue and cache gauges), which llbd probes and scrapes.
//
// It is one goroutine per connection and one write per event, so it costs
// the same for every path measured; it runs in a process of its own (the
// llbsim binary started with EnvSSEBackend) so its CPU is counted apart
// from the client's.

// EnvSSEBackend, when set in llbsim's environment, makes the process serve
// the streams benchmark's backend instead of running a command
// (ServeSSEBackendIfAsked). Its value is the backend's JSON spec.
const EnvSSEBackend = "LLB_PROXYBENCH_SSE_BACKEND"

// backendSpec configures the backend process.
type backendSpec struct {
	Addr string `json:"addr"`
	// Events per stream, Gap apart (the first at once).
	Events int           `json:"events"`
	Gap    time.Duration `json:"gap"`
}

// ServeSSEBackendIfAsked serves the backend and exits when EnvSSEBackend is
// set; otherwise it returns at once. Call it first in main.
func ServeSSEBackendIfAsked() {
	raw, ok := os.LookupEnv(EnvSSEBackend)
	if !ok {
		return
	}
	var s backendSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "sse backend spec:", err)
		os.Exit(2)
	}
	raiseFileLimit()
	b, err := listenSSEBackend(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready", b.ln.Addr())
	b.serve()
	os.Exit(0)
}

// sseBackend is the server.
type sseBackend struct {
	ln     net.Listener
	events int
	gap    time.Duration
	// running counts the streams in progress (vllm:num_requests_running).
	running atomic.Int64
}

func listenSSEBackend(s backendSpec) (*sseBackend, error) {
	if s.Events <= 0 || s.Gap <= 0 {
		return nil, fmt.Errorf("sse backend: %d events %v apart: %w", s.Events, s.Gap, ErrConfig)
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return nil, fmt.Errorf("sse backend: %w: %w", ErrTool, err)
	}
	return &sseBackend{ln: ln, events: s.Events, gap: s.Gap}, nil
}

// serve accepts until the listener closes.
func (b *sseBackend) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // out of descriptors: retry
			continue
		}
		go b.conn(c)
	}
}

// backendRequest is what the backend needs of a request.
type backendRequest struct {
	method, path string
	stream       bool
	close        bool
}

// conn serves one connection's requests (keep-alive).
func (b *sseBackend) conn(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4<<10)
	var wbuf []byte
	for {
		req, err := readBackendRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"))
			}
			return
		}
		switch {
		case req.method == "GET" && req.path == "/health":
			_, err = c.Write([]byte("HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-length: 0\r\n\r\n"))
		case req.method == "GET" && req.path == "/metrics":
			err = b.writeMetrics(c)
		case req.method == "POST" && req.stream:
			wbuf, err = b.writeStream(c, wbuf)
		case req.method == "POST":
			err = writeFixed(c, "application/json", completion)
		default:
			err = writeFixed(c, "application/json", `{"error":{"message":"not found","type":"NotFoundError","code":404}}`)
		}
		if err != nil || req.close {
			return
		}
	}
}

// readBackendRequest reads one request head and its Content-Length body.
func readBackendRequest(br *bufio.Reader) (backendRequest, error) {
	var r backendRequest
	line, err := br.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 {
			return r, io.EOF
		}
		return r, err
	}
	f := bytes.Fields(line)
	if len(f) != 3 {
		return r, fmt.Errorf("request line %q", line)
	}
	r.method, r.path = string(f[0]), string(f[1])
	length := 0
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return r, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return r, fmt.Errorf("header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 || length > 1<<20 {
				return r, fmt.Errorf("content-length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return r, errors.New("chunked request bodies are not served")
		case bytes.EqualFold(name, []byte("Connection")):
			r.close = bytes.EqualFold(value, []byte("close"))
		}
	}
	if length > 0 {
		body, err := br.Peek(min(length, br.Size()))
		if err != nil {
			return r, err
		}
		r.stream = bytes.Contains(body, []byte(`"stream":true`)) || bytes.Contains(body, []byte(`"stream": true`))
		if _, err := br.Discard(length); err != nil {
			return r, err
		}
	}
	return r, nil
}

func writeFixed(w io.Writer, ctype, body string) error {
	_, err := io.WriteString(w, "HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: "+ctype+"\r\ncontent-length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	return err
}

// writeMetrics answers /metrics with vLLM's gauges (llbd scrapes them).
func (b *sseBackend) writeMetrics(w io.Writer) error {
	body := fmt.Sprintf("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=%q} %d\n"+
		"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=%q} 0\n"+
		"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=%q} 0.05\n",
		streamModel, b.running.Load(), streamModel, streamModel)
	return writeFixed(w, "text/plain; version=0.0.4", body)
}

// streamModel is the model name the benchmark's requests and events carry.
const streamModel = "meta-llama/Llama-3.1-8B-Instruct"

// streamHead is the head of a streamed answer, as vLLM's server sends it.
const streamHead = "HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"

// writeStream sends the head, then b.events chat.completion.chunk events
// b.gap apart (each one chunk, one write, stamped just before the write),
// then "data: [DONE]" and the last chunk. A stream that falls behind its
// schedule (the machine is busy) sends at once rather than skipping.
func (b *sseBackend) writeStream(w io.Writer, buf []byte) ([]byte, error) {
	b.running.Add(1)
	defer b.running.Add(-1)
	if _, err := io.WriteString(w, streamHead); err != nil {
		return buf, err
	}
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for i := range b.events {
		if wait := time.Until(start.Add(time.Duration(i) * b.gap)); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			<-timer.C
		}
		buf = appendEventChunk(buf[:0], i, b.events, start.Unix(), time.Now().UnixNano())
		if _, err := w.Write(buf); err != nil {
			return buf, err
		}
	}
	_, err := io.WriteString(w, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
	return buf, err
}

// appendEventChunk appends event i of n as one HTTP chunk: a vLLM
// chat.completion.chunk (the first carries the role, the last the
// finish_reason) with the send stamp t.
func appendEventChunk(b []byte, i, n int, created, t int64) []byte {
	var ev [320]byte
	e := append(ev[:0], `data: {"id":"chatcmpl-5f1e3c0a8b2e4d7f9a6c1b3e5d7f9a1c","object":"chat.completion.chunk","created":`...)
	e = strconv.AppendInt(e, created, 10)
	e = append(e, `,"model":"`+streamModel+`","choices":[{"index":0,"delta":`...)
	switch {
	case i == 0:
		e = append(e, `{"role":"assistant","content":""}`...)
	default:
		e = append(e, `{"content":" token"}`...)
	}
	e = append(e, `,"logprobs":null,"finish_reason":`...)
	if i == n-1 {
		e = append(e, `"length"`...)
	} else {
		e = append(e, `null`...)
	}
	e = append(e, `}],"t":`...)
	e = strconv.AppendInt(e, t, 10)
	e = append(e, "}\n\n"...)
	b = strconv.AppendInt(b, int64(len(e)), 16)
	b = append(b, "\r\n"...)
	b = append(b, e...)
	return append(b, "\r\n"...)
}

// backendProc is the backend running as a child process.
type backendProc struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
}

// startBackendProc starts the backend in a process of its own (this
// binary with EnvSSEBackend) and waits for its "ready" line. self is the
// binary to run ("" is os.Executable()).
func startBackendProc(self string, s backendSpec, logPath string) (*backendProc, error) {
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		self = exe
	}
	raw, _ := json.Marshal(s)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), EnvSSEBackend+"="+string(raw))
	harness.DieWithParent(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start the sse backend: %w: %w", ErrTool, err)
	}
	p := &backendProc{cmd: cmd, addr: s.Addr, exited: make(chan struct{})}
	ready := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				ready <- struct{}{}
			}
		}
		_ = cmd.Wait()
		_ = logf.Close()
		close(p.exited)
	}()
	select {
	case <-ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("the sse backend exited before serving (see %s): %w", logPath, ErrTool)
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("the sse backend did not start within 15 s: %w", ErrTool)
	}
}

func (p *backendProc) pid() int { return p.cmd.Process.Pid }

func (p *backendProc) stop() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

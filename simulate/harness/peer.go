package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/des"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/peers"
	"github.com/llbproject/llb/simulate/worker"
)

// SeqHeader carries a request's trace position to a peer router, which
// reads the request's routing keys (prompt text, block-key chain) from the
// trace instead of tokenizing the body; llbd ignores it.
const SeqHeader = "X-Llbsim-Seq"

// peerRouter runs another router's placement policy (simulate/peers)
// behind a plain reverse proxy on the rule's VIP: what the harness measures
// for a peer strategy in place of llbd. It sees what that router sees: the
// request's prompt and block-key chain, its own in-flight requests (first
// token and end, from the streams it relays), the workers' KV events
// through real ZMQ subscriptions into inventory mirrors (Dynamo, llm-d),
// and the engines' waiting queue and KV usage read directly (llm-d's
// picker scrapes every 50 ms).
type peerRouter struct {
	kind    peers.Kind
	keys    []des.RequestKeys
	prompts []int
	outputs []int
	loras   []string // each request's adapter
	stale   []peers.LoRAGauge
	bs      int
	workers []*worker.Worker
	client  *http.Client
	srv     *http.Server
	stop    context.CancelFunc
	feeds   sync.WaitGroup

	mu      sync.Mutex // guards pol, mirrors, eps, next, scraped, scrapedAt
	pol     peers.Policy
	mirrors []*inventory.Mirror
	eps     []peers.Endpoint
	next    int
	// scraped is each worker's metrics as a metrics-reading peer (llm-d)
	// last refreshed them, at scrapedAt: every peers.MetricsRefresh.
	scraped   []engine.Stats
	scrapedAt []time.Time
}

// startPeerRouter starts kind's router for the fleet's serving workers on
// vip:port. keys are the trace's routing keys (des.NewTrace of the same
// trace).
func startPeerRouter(kind peers.Kind, fl *fleet.Fleet, serving []*worker.Worker, keys []des.RequestKeys, tr *RunConfig, vip string, port int) (*peerRouter, error) {
	addrs := make([]string, len(serving))
	for i, w := range serving {
		addrs[i] = w.Addr()
	}
	pol, err := peers.New(kind, len(serving), tr.Trace.Seed+1, addrs)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w: %w", kind, ErrConfig, err)
	}
	p := &peerRouter{
		kind: kind, keys: keys, bs: tr.Fleet.Engine.BlockSize, workers: serving, pol: pol,
		eps:       make([]peers.Endpoint, len(serving)),
		scraped:   make([]engine.Stats, len(serving)),
		scrapedAt: make([]time.Time, len(serving)),
		client:    &http.Client{Transport: newTransport()},
	}
	for i := range tr.Trace.Requests {
		p.prompts = append(p.prompts, tr.Trace.Requests[i].PromptTokens)
		p.outputs = append(p.outputs, tr.Trace.Requests[i].OutputTokens)
		p.loras = append(p.loras, tr.Trace.Requests[i].LoRA)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	if kind.UsesKVEvents() {
		if err := p.subscribe(ctx, fl, serving); err != nil {
			cancel()
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(vip, strconv.Itoa(port)))
	if err != nil {
		cancel()
		p.feeds.Wait()
		return nil, fmt.Errorf("peer %s listen: %w: %w", kind, ErrDaemon, err)
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// subscribe mirrors every serving worker's KV events.
func (p *peerRouter) subscribe(ctx context.Context, fl *fleet.Fleet, serving []*worker.Worker) error {
	keys, err := inventory.NewHasher(inventory.Algo(p.workers[0].Config().Engine.Hash.Algo), p.bs, p.workers[0].Config().Engine.Hash.Seed)
	if err != nil {
		return fmt.Errorf("peer %s mirror keys: %w: %w", p.kind, ErrConfig, err)
	}
	for i, w := range serving {
		id := inventory.EndpointID{Service: "peer-" + string(p.kind), EpIdx: i}
		m, err := inventory.NewMirror(inventory.MirrorConfig{ID: id, Keys: keys, Logger: zerolog.Nop()})
		if err != nil {
			return fmt.Errorf("peer %s mirror: %w: %w", p.kind, ErrConfig, err)
		}
		p.mirrors = append(p.mirrors, m)
		host, _, err := net.SplitHostPort(w.Addr())
		if err != nil {
			return fmt.Errorf("peer %s worker address: %w", p.kind, err)
		}
		f, err := inventory.NewFeed(inventory.FeedConfig{
			ID: id, Endpoint: inventory.FeedEndpoint(host, fl.KVZmqPort(), 0),
			Sink: func(u inventory.Update) {
				p.mu.Lock()
				m.ApplyUpdate(u)
				p.mu.Unlock()
			},
			Logger: zerolog.Nop(),
		})
		if err != nil {
			return fmt.Errorf("peer %s feed: %w: %w", p.kind, ErrConfig, err)
		}
		p.feeds.Add(1)
		go func() {
			defer p.feeds.Done()
			_ = f.Run(ctx)
		}()
	}
	return nil
}

// loraGauge is worker i's vllm:lora_requests_info as llm-d's scraper
// keeps it: the newest state naming some adapter (a state with none is
// skipped). p.mu held.
func (p *peerRouter) loraGauge(i int, wk *worker.Worker, running, waiting string) peers.LoRAGauge {
	if p.stale == nil {
		p.stale = make([]peers.LoRAGauge, len(p.workers))
	}
	g := &p.stale[i]
	g.Max = wk.Config().Engine.MaxLoRAs
	if running != "" || waiting != "" {
		g.Running, g.Waiting = splitList(running), splitList(waiting)
	}
	return *g
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// close stops the proxy and the feeds.
func (p *peerRouter) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	p.stop()
	p.feeds.Wait()
	p.client.CloseIdleConnections()
}

// ServeHTTP routes one request with the policy and relays it.
func (p *peerRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.Atoi(r.Header.Get(SeqHeader))
	if err != nil || seq < 0 || seq >= len(p.keys) {
		http.Error(w, "peer router: missing or bad "+SeqHeader, http.StatusBadRequest)
		return
	}
	k := &p.keys[seq]
	p.mu.Lock()
	p.next++
	id := p.next
	now := time.Now()
	for i, wk := range p.workers {
		e := peers.Endpoint{}
		if p.kind.UsesKVEvents() {
			e.Overlap = p.mirrors[i].Score(k.Chain)
		}
		if p.kind.UsesMetrics() {
			if now.Sub(p.scrapedAt[i]) >= peers.MetricsRefresh {
				p.scraped[i], p.scrapedAt[i] = wk.Stats(), now
			}
			st := &p.scraped[i]
			e.Waiting, e.KVUsage = st.Waiting, st.KVUsage()
			e.LoRAStale = p.loraGauge(i, wk, st.RunningLoRAs, st.WaitingLoRAs)
		}
		p.eps[i] = e
	}
	req := peers.Request{ID: id, Text: k.Prompt, Chain: k.Chain, PromptTokens: p.prompts[seq], OutputTokens: p.outputs[seq], BlockSize: p.bs, Adapter: p.loras[seq]}
	ep := p.pol.Pick(time.Now(), &req, p.eps)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.pol.Done(time.Now(), id)
		p.mu.Unlock()
	}()

	up, err := http.NewRequestWithContext(r.Context(), r.Method, p.workers[ep].URL()+r.URL.Path, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	up.Header = r.Header.Clone()
	up.Header.Del(SeqHeader)
	resp, err := p.client.Do(up)
	if err != nil {
		http.Error(w, "peer router: upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.Header().Set("X-Llb-Route", "tier=peer:"+string(p.kind)+" prefill="+strconv.Itoa(ep))
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	first := true
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if first {
				first = false
				p.mu.Lock()
				p.pol.FirstToken(time.Now(), id)
				p.mu.Unlock()
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				return
			}
			return
		}
	}
}

package des

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/peers"
	"github.com/llbproject/llb/simulate/strategy"
)

// epoch is virtual time zero. Virtual time is a time.Time only because the
// engine and the ladder take one; no wall clock is ever read.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// notYet marks a request timestamp that has not happened.
const notYet = -1

// worker is one simulated worker and llb's view of it.
type worker struct {
	eng    *engine.Engine
	mirror *inventory.Mirror
	// tickets maps engine ticket-1 to the trace index (tickets are
	// consecutive from 1 and never reused).
	tickets []int32
	// active is llb's own in-flight count (sent, not finished).
	active uint32
	// next caches eng.NextEventTime as an offset from epoch.
	next    time.Duration
	hasNext bool
	// activeArea integrates active over virtual time (request·ns) since
	// lastChange.
	activeArea float64
	lastChange time.Duration
	maxRunning int
	maxWaiting int
	// scraped is the queue depth of the last scrape, taken at scrapedAt
	// (RunConfig.ScrapeEvery).
	scraped uint32
	// scrapedUsed is the blocks in use at the last scrape; sinceScrape the
	// blocks llb charged since (each request's uncached prompt blocks and
	// its completion's), freedSince the charges of the requests that ended
	// since (llbd's chargePrefill and releaseKV).
	scrapedUsed, sinceScrape, freedSince uint32
	scrapedAt                            time.Duration
	hasScrape                            bool
	// lora is its LoRA gauge as last read (lora.go).
	lora loraScrape
	// peerView is the worker's queue depth and KV usage as a peer that
	// reads the engines' metrics (llm-d) last refreshed them.
	peerView peerScrape
}

// reqState is one request's life in a run. Times are offsets from epoch;
// notYet until they happen.
type reqState struct {
	worker                    int32
	arrive, admit, first, end time.Duration
	cached                    int32
	tier                      ladder.Tier
	flags                     ladder.Flags
	pin                       bool // pin the session once the first token is out
	replica                   int8 // the router replica that routed it
	// backlog is the uncached prompt blocks llb counted against its
	// worker until the first token (EndpointView.PrefillBlocks).
	backlog uint32
	// kvCharge is the blocks llb added to its worker's KV usage estimate
	// (its uncached prompt blocks and its completion's) until it ends.
	kvCharge uint32
	kv       ladder.KVDetail
	overlap  uint32
	// ttft is the decision's TTFT prediction (llb strategies).
	ttft  ladder.TTFTPrediction
	route string // the decision's text, when recording routes
}

// sim is one run's whole state. It is single-threaded and owns everything
// it holds except the trace, which it only reads.
type sim struct {
	tr  *Trace
	cfg RunConfig
	// replicas are the router replicas (one unless RunConfig.Replicas);
	// gossip is each replica's in-flight counts as last gossiped, at
	// gossipAt (llb replicas only).
	replicas []replica
	gossip   [][]uint32
	gossipAt time.Duration
	session  *ladder.SessionShard // P/D shape only; shared by the replicas (cluster grains)
	peerEps  []peers.Endpoint
	workers  []worker
	reqs     []reqState
	views    []ladder.EndpointView
	prog     []engine.Progress
	evs      []inventory.Event
	// arrivals holds the requests whose arrival time is known and that
	// have not arrived yet, earliest first (index on ties).
	arrivals arrivalHeap
	// released is how many requests a closed loop has let arrive.
	released int
	// nextTurn[i] is the trace index of the next turn of request i's
	// conversation (-1 when none); with RunConfig.ThinkTime a turn arrives
	// only after the previous one ended (sessions).
	nextTurn []int32
	events   int64
	kvScore  bool // Tier 1.5 on: score the mirrors per request
	loraIDs  map[string]int
}

// Run simulates one run of trace t under cfg and returns its measurements.
// It is deterministic: the same trace and config give an identical Result.
// It returns an error wrapping ErrConfig for a bad config and ErrInvariant
// when the simulation breaks one of its invariants (every request finishes
// exactly once, no batch exceeds max-num-seqs, every decision names a
// worker, the mirrors keep the hash contract).
func Run(t *Trace, cfg RunConfig) (*Result, error) {
	if t == nil {
		return nil, fmt.Errorf("run: nil trace: %w", ErrConfig)
	}
	if err := cfg.validate(t); err != nil {
		return nil, err
	}
	s, err := newSim(t, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.run(); err != nil {
		return nil, fmt.Errorf("run %s/%s at %.3g req/s: %w", t.Config.Name, cfg.Strategy.Name, cfg.Rate, err)
	}
	return s.result(), nil
}

func newSim(t *Trace, cfg RunConfig) (*sim, error) {
	n := cfg.Fleet.Workers
	replicas, err := newReplicas(&cfg)
	if err != nil {
		return nil, err
	}
	views := n
	if !cfg.Strategy.IsPeer() {
		views = replicas[0].llb.NumEndpoints()
	}
	keys, err := inventory.NewHasher(inventory.Algo(t.Config.Hash.Algo), t.Config.BlockSize, t.Config.Hash.Seed)
	if err != nil {
		return nil, fmt.Errorf("mirror keys: %w: %w", ErrConfig, err)
	}
	s := &sim{
		tr: t, cfg: cfg, replicas: replicas, gossipAt: -1,
		workers: make([]worker, n),
		reqs:    make([]reqState, len(t.Requests)),
		views:   make([]ladder.EndpointView, views),
		peerEps: make([]peers.Endpoint, n),
		kvScore: scoresMirrors(&cfg.Strategy),
		loraIDs: loraIDs(t),
	}
	s.gossip = make([][]uint32, len(replicas))
	for i := range s.gossip {
		s.gossip[i] = make([]uint32, n)
	}
	if cfg.Strategy.Shape == strategy.ShapePD {
		s.session = ladder.NewSessionTable(ladder.SessionConfig{Shards: 1, TTL: sessionTTL}).Shard(0)
	}
	for i := range s.workers {
		e, err := engine.New(cfg.Fleet.Engine)
		if err != nil {
			return nil, fmt.Errorf("worker %d: %w: %w", i, ErrConfig, err)
		}
		m, err := inventory.NewMirror(inventory.MirrorConfig{
			ID:     inventory.EndpointID{Service: cfg.Strategy.Name, EpIdx: i},
			Keys:   keys,
			Logger: zerolog.Nop(),
		})
		if err != nil {
			return nil, fmt.Errorf("worker %d mirror: %w: %w", i, ErrConfig, err)
		}
		s.workers[i] = worker{eng: e, mirror: m}
	}
	waits := s.linkTurns()
	for i := range s.reqs {
		at := time.Duration(notYet)
		if !waits[i] {
			at = s.arrival(i)
		}
		s.reqs[i] = reqState{worker: -1, arrive: at, admit: notYet, first: notYet, end: notYet}
		if at != notYet {
			s.arrivals.push(at, i)
		}
	}
	if c := cfg.Concurrency; c > 0 {
		s.released = min(c, len(s.reqs))
	}
	return s, nil
}

// linkTurns fills nextTurn when sessions have a think time: the requests
// of one multi-turn conversation (workload "multi_turn", one Group) are
// chained in trace order. It returns which requests wait for a previous
// turn.
func (s *sim) linkTurns() []bool {
	waits := make([]bool, len(s.reqs))
	s.nextTurn = make([]int32, len(s.reqs))
	for i := range s.nextTurn {
		s.nextTurn[i] = -1
	}
	if s.cfg.ThinkTime <= 0 || s.cfg.Concurrency > 0 {
		return waits
	}
	last := map[int]int{}
	for i := range s.tr.Requests {
		r := &s.tr.Requests[i]
		if r.Workload != "multi_turn" {
			continue
		}
		if prev, ok := last[r.Group]; ok {
			s.nextTurn[prev] = int32(i)
			waits[i] = true
		}
		last[r.Group] = i
	}
	return waits
}

// arrival is request i's arrival offset at the run's rate; in a closed
// loop the first Concurrency requests arrive at zero and the rest when a
// completion releases them (notYet until then).
func (s *sim) arrival(i int) time.Duration {
	if c := s.cfg.Concurrency; c > 0 {
		if i < c {
			return 0
		}
		return notYet
	}
	return time.Duration(s.tr.Requests[i].UnitAt / s.cfg.Rate * float64(time.Second))
}

// queued is the queue depth llb sees for w at now: the engine's exact
// waiting count, or with RunConfig.ScrapeEvery the count of the last
// scrape. Scrapes happen on the ScrapeEvery grid; the engine's count at the
// first decision after a grid point stands in for the count at that point.
func (s *sim) queued(w *worker, now time.Duration, waiting int) uint32 {
	every := s.cfg.ScrapeEvery
	if every <= 0 {
		return uint32(waiting)
	}
	if grid, due := scrapeDue(now, every, w.scrapedAt, w.hasScrape); due {
		w.scraped, w.scrapedAt, w.hasScrape = uint32(waiting), grid, true
		w.scrapedUsed, w.sinceScrape, w.freedSince = uint32(w.eng.Stats().BlocksInUse), 0, 0
	}
	return w.scraped
}

// scrapeDue reports whether a view last read at the grid point at (has: it
// was read at all) is read again at now, and the point of the every grid it
// then stands for: every look reads anew when every ≤ 0 (the view is
// exact), else the first look past a new grid point does.
func scrapeDue(now, every, at time.Duration, has bool) (time.Duration, bool) {
	if every <= 0 {
		return now, true
	}
	grid := now / every * every
	return grid, !has || grid > at
}

// kvUsed is what llb estimates of worker w's blocks in use
// (EndpointView.KVUsedBlocks): exact without ScrapeEvery, else the last
// scrape's plus the uncached prompt blocks llb sent it since (the replicas'
// together: one scrape and one count per worker, a simplification of
// llbd's per-replica counts).
func (s *sim) kvUsed(w *worker, used int) uint32 {
	if s.cfg.ScrapeEvery <= 0 {
		return uint32(used)
	}
	return w.scrapedUsed + w.sinceScrape - min(w.freedSince, w.scrapedUsed+w.sinceScrape)
}

// release reacts to request i ending at now: a closed loop lets its next
// request arrive; a conversation's next turn arrives a think time after
// this one, or at its own scheduled time if that is later.
func (s *sim) release(i int, now time.Duration) {
	if s.cfg.Concurrency > 0 && s.released < len(s.reqs) {
		s.reqs[s.released].arrive = now
		s.arrivals.push(now, s.released)
		s.released++
	}
	if next := s.nextTurn[i]; next >= 0 {
		at := max(now+s.cfg.ThinkTime, s.arrival(int(next)))
		s.reqs[next].arrive = at
		s.arrivals.push(at, int(next))
	}
}

// run is the event loop: the earliest of the next arrival and every
// worker's next engine event, engine events first on a tie (so a request
// finishing exactly when another arrives has released its load), workers
// by index.
func (s *sim) run() error {
	for {
		wi := -1
		var wt time.Duration
		for i := range s.workers {
			w := &s.workers[i]
			if w.hasNext && (wi < 0 || w.next < wt) {
				wi, wt = i, w.next
			}
		}
		if s.arrivals.Len() > 0 {
			at, i := s.arrivals.peek()
			if wi < 0 || at < wt {
				s.arrivals.pop()
				if err := s.arrive(i, epoch.Add(at)); err != nil {
					return err
				}
				s.events++
				continue
			}
		}
		if wi < 0 {
			break
		}
		if err := s.step(wi, epoch.Add(wt)); err != nil {
			return err
		}
		s.events++
	}
	for i := range s.reqs {
		if s.reqs[i].end == notYet {
			return fmt.Errorf("request %d never finished: %w", i, ErrInvariant)
		}
	}
	for i := range s.workers {
		if c := s.workers[i].mirror.Contract(); c.Tripped {
			return fmt.Errorf("worker %d mirror: hash contract tripped (%s: %s): %w", i, c.Reason, c.Detail, ErrInvariant)
		}
	}
	return nil
}

// step advances worker wi to t and handles what changed.
func (s *sim) step(wi int, t time.Time) error {
	w := &s.workers[wi]
	s.prog = w.eng.Advance(t, s.prog[:0])
	now := t.Sub(epoch)
	for k := range s.prog {
		if err := s.progress(wi, now, &s.prog[k]); err != nil {
			return err
		}
	}
	return s.settle(wi)
}

// settle applies a worker's pending KV events to its mirror (the ZMQ feed,
// delivered at once), checks the batch limit and refreshes its next event.
func (s *sim) settle(wi int) error {
	w := &s.workers[wi]
	if w.eng.PendingEvents() > 0 {
		s.evs = w.eng.TakeEvents(s.evs[:0])
		w.mirror.Apply(&inventory.Batch{Events: s.evs})
	}
	st := w.eng.Stats()
	if st.Running > s.cfg.Fleet.Engine.MaxNumSeqs {
		return fmt.Errorf("worker %d runs %d requests, max-num-seqs is %d: %w", wi, st.Running, s.cfg.Fleet.Engine.MaxNumSeqs, ErrInvariant)
	}
	w.maxRunning = max(w.maxRunning, st.Running)
	w.maxWaiting = max(w.maxWaiting, st.Waiting)
	next, ok := w.eng.NextEventTime()
	w.next, w.hasNext = next.Sub(epoch), ok
	return nil
}

// progress records one engine Progress of worker wi at now.
func (s *sim) progress(wi int, now time.Duration, p *engine.Progress) error {
	w := &s.workers[wi]
	if p.Ticket < 1 || int(p.Ticket) > len(w.tickets) {
		return fmt.Errorf("worker %d reported unknown ticket %d: %w", wi, p.Ticket, ErrInvariant)
	}
	idx := int(w.tickets[p.Ticket-1])
	r := &s.reqs[idx]
	if p.Admitted && r.admit == notYet {
		r.admit = p.AdmittedAt.Sub(epoch)
		r.cached = int32(p.CachedTokens)
	}
	if !p.FirstTokenAt.IsZero() && r.first == notYet {
		r.first = p.FirstTokenAt.Sub(epoch)
		s.replicas[r.replica].prefill[wi] -= r.backlog
		if llb := s.replicas[r.replica].llb; llb != nil && r.ttft.OK {
			llb.ObserveTTFT(p.FirstTokenAt, wi, r.ttft, r.first-r.arrive)
		}
		s.served(idx, wi, r)
	}
	if !p.Done {
		return nil
	}
	switch {
	case r.end != notYet:
		return fmt.Errorf("request %d finished twice: %w", idx, ErrInvariant)
	case p.Finish != engine.FinishLength:
		return fmt.Errorf("request %d ended with %q: %w", idx, p.Finish, ErrInvariant)
	case r.first == notYet:
		return fmt.Errorf("request %d finished without a first token: %w", idx, ErrInvariant)
	}
	r.end = p.DoneAt.Sub(epoch)
	w.freedSince += r.kvCharge
	s.setActive(w, now, w.active-1)
	rep := &s.replicas[r.replica]
	rep.active[wi]--
	if a := s.tr.Requests[idx].LoRA; a != "" && rep.lora != nil {
		rep.lora[wi][a]--
	}
	if rep.peer != nil {
		rep.peer.Done(p.DoneAt, idx)
	}
	s.release(idx, r.end)
	return nil
}

// served is the runtime's reaction to a successful (prefill) outcome:
// pin the session (Tier 0) and teach the Tier-1 trie what was routed. For
// the P/D shape the prefill leg succeeds at the first token.
func (s *sim) served(idx, wi int, r *reqState) {
	k := &s.tr.Keys[idx]
	at := epoch.Add(r.first)
	if p := s.replicas[r.replica].peer; p != nil {
		p.FirstToken(at, idx)
		return
	}
	if r.pin && s.session != nil {
		s.session.Put(at, k.SessionKey, ladder.Pin{Prefill: wi, Decode: s.cfg.Fleet.Workers})
	}
	for ri := range s.replicas { // llbd broadcasts trie inserts to every replica
		s.replicas[ri].llb.Learn(k.Prompt, wi)
	}
}

// setActive changes a worker's in-flight count at now, integrating the old
// value over the time it held.
func (s *sim) setActive(w *worker, now time.Duration, v uint32) {
	w.activeArea += float64(w.active) * float64(now-w.lastChange)
	w.lastChange = now
	w.active = v
}

// arrive routes request i at virtual time at and submits it.
func (s *sim) arrive(i int, at time.Time) error {
	tr := &s.tr.Requests[i]
	r := &s.reqs[i]
	n := len(s.workers)
	ri := i % len(s.replicas)
	r.replica = int8(ri)
	s.refreshGossip(at.Sub(epoch))
	var ep int
	if s.replicas[ri].peer != nil {
		ep = s.pickPeer(ri, i, at)
		r.tier = ladder.TierNone
	} else {
		d, err := s.decideLLB(ri, i, at)
		if err != nil {
			return err
		}
		ep = d.Prefill
		if !d.Available() || ep < 0 || ep >= n {
			return fmt.Errorf("request %d: decision %q names no worker: %w", i, d.String(), ErrInvariant)
		}
		r.tier, r.flags, r.kv = d.Tier, d.Flags, d.KV
		r.pin, r.overlap, r.ttft = d.PinSession, s.views[ep].Overlap, d.TTFT
		if s.cfg.RecordRoutes {
			r.route = d.String()
		}
	}
	if ep < 0 || ep >= n {
		return fmt.Errorf("request %d: %s picked worker %d of %d: %w", i, s.cfg.Strategy.Name, ep, n, ErrInvariant)
	}
	if s.replicas[ri].peer != nil {
		if s.kvScore {
			r.overlap = uint32(s.peerEps[ep].Overlap)
		}
		if s.cfg.RecordRoutes {
			r.route = fmt.Sprintf("peer=%s worker=%d", s.cfg.Strategy.Peer, ep)
		}
	}
	w := &s.workers[ep]
	tk, err := w.eng.Submit(at, engine.Request{
		ID: strconv.Itoa(i), Tokens: tr.Tokens, MaxTokens: tr.OutputTokens, Digests: s.tr.Keys[i].Digests,
		LoRAID: s.loraIDs[tr.LoRA], Extra: inventory.ExtraKeys{LoRAName: tr.LoRA},
	})
	if err != nil {
		if errors.Is(err, engine.ErrInvalidRequest) {
			return fmt.Errorf("request %d does not fit the worker: %w: %w", i, ErrConfig, err)
		}
		return fmt.Errorf("request %d: submit: %w", i, err)
	}
	if int(tk) != len(w.tickets)+1 {
		return fmt.Errorf("worker %d issued ticket %d after %d: %w", ep, tk, len(w.tickets), ErrInvariant)
	}
	w.tickets = append(w.tickets, int32(i))
	r.worker = int32(ep)
	if s.replicas[ri].peer == nil {
		pb := uint32(tr.PromptTokens / s.tr.Config.BlockSize)
		r.backlog = pb - min(pb, s.views[ep].Overlap)
		s.replicas[ri].prefill[ep] += r.backlog
		r.kvCharge = r.backlog + s.replicas[ri].llb.DecodeBlocks(&ladder.Request{KV: ladder.KVInput{DecodeTokens: uint32(tr.OutputTokens)}})
		w.sinceScrape += r.kvCharge
	}
	s.replicas[ri].active[ep]++
	if tr.LoRA != "" {
		rep := &s.replicas[ri]
		if rep.lora == nil {
			rep.lora = make([]map[string]int, n)
			for k := range rep.lora {
				rep.lora[k] = map[string]int{}
			}
		}
		rep.lora[ep][tr.LoRA]++
	}
	s.setActive(w, at.Sub(epoch), w.active+1)
	// Submit admits at once when there is room: collect that Progress now
	// so the admission time is the submission time.
	s.prog = w.eng.Advance(at, s.prog[:0])
	for j := range s.prog {
		if err := s.progress(ep, at.Sub(epoch), &s.prog[j]); err != nil {
			return err
		}
	}
	return s.settle(ep)
}

// decideLLB runs llb replica ri's ladder for request i at.
func (s *sim) decideLLB(ri, i int, at time.Time) (ladder.Decision, error) {
	tr := &s.tr.Requests[i]
	k := &s.tr.Keys[i]
	for wi := range s.workers {
		w := &s.workers[wi]
		v := &s.views[wi]
		st := w.eng.Stats()
		*v = ladder.EndpointView{
			ActiveConns:      s.llbActive(ri, wi),
			QueuedRequests:   s.queued(w, at.Sub(epoch), st.Waiting),
			KVUsedBlocks:     s.kvUsed(w, st.BlocksInUse),
			KVCapacityBlocks: uint32(s.cfg.Fleet.Engine.NumBlocks),
			InventoryBlocks:  uint32(w.mirror.Len()),
			KVUsageKnown:     true,
			PrefillBlocks:    s.replicas[ri].prefill[wi],
		}
		if s.kvScore {
			v.Overlap = uint32(w.mirror.Score(k.Chain))
		}
	}
	req := ladder.Request{
		Prompt:     k.Prompt,
		PrefixHash: k.PrefixHash, HasPrefixHash: true,
		ConvHash: k.ConvHash, HasConvHash: k.HasConvHash,
		KV: ladder.KVInput{PromptBlocks: uint32(len(k.Chain)), PromptTokens: uint32(tr.PromptTokens)},
	}
	if s.cfg.Strategy.Objective {
		// The decision is made on arrival: the whole objective is left.
		req.TTFTObjective = s.cfg.slo()
	}
	if s.session != nil && k.SessionKey != "" {
		req.SessionKey = k.SessionKey
		req.Session = s.session.Get(at, k.SessionKey)
	}
	why, masked := s.loraMask(ri, tr.LoRA, at.Sub(epoch))
	d, err := s.replicas[ri].llb.Decide(at, &req, &ladder.Snapshot{Endpoints: s.views})
	for wi := range s.views {
		if masked&(1<<uint(wi)) != 0 {
			s.views[wi].Down = false
		}
	}
	d.LoRA = why
	if err != nil {
		return d, fmt.Errorf("request %d: decide: %w: %w", i, ErrInvariant, err)
	}
	if d.EvictSession && s.session != nil {
		s.session.Evict(k.SessionKey)
	}
	return d, nil
}

// arrivalHeap is a min-heap of (arrival, trace index).
type arrivalHeap struct {
	at  []time.Duration
	idx []int32
}

func (h *arrivalHeap) Len() int { return len(h.at) }

func (h *arrivalHeap) less(a, b int) bool {
	return h.at[a] < h.at[b] || (h.at[a] == h.at[b] && h.idx[a] < h.idx[b])
}

func (h *arrivalHeap) swap(a, b int) {
	h.at[a], h.at[b] = h.at[b], h.at[a]
	h.idx[a], h.idx[b] = h.idx[b], h.idx[a]
}

func (h *arrivalHeap) push(at time.Duration, i int) {
	h.at = append(h.at, at)
	h.idx = append(h.idx, int32(i))
	for c := len(h.at) - 1; c > 0; {
		p := (c - 1) / 2
		if !h.less(c, p) {
			break
		}
		h.swap(c, p)
		c = p
	}
}

func (h *arrivalHeap) peek() (time.Duration, int) { return h.at[0], int(h.idx[0]) }

func (h *arrivalHeap) pop() {
	n := len(h.at) - 1
	h.swap(0, n)
	h.at, h.idx = h.at[:n], h.idx[:n]
	for p := 0; ; {
		c := 2*p + 1
		if c >= n {
			break
		}
		if c+1 < n && h.less(c+1, c) {
			c++
		}
		if !h.less(c, p) {
			break
		}
		h.swap(c, p)
		p = c
	}
}

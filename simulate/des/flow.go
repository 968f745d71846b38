package des

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
)

// The admission simulator: llb's admission gate and admission queue under
// overload, in virtual time. A fleet of simulated engines (simulate/engine)
// sits behind llb's real ladder.Router (a P/D rule in its single-pool
// equivalent, as Run simulates it, with a per-endpoint in-flight cap and
// parking queues) and llb's real admission policy (ladder.FlowQueue): an
// arrival is decided by Router.Decide — admitted to an endpoint, parked,
// or shed (429) — and every slot a finished request frees goes to the
// parked request FlowQueue.Next names, resumed there by Router.Resume, as
// the router actor does. Tenants are charged what the router actor charges
// them: prompt tokens at admission, completion tokens at the end.
//
// Traffic is a set of streams, each one tenant in one class sending
// Poisson arrivals at its own rate with prompt and output lengths drawn
// uniformly from its ranges. It measures, per stream, TTFT (arrival to
// first token, parking included) over the requests answered, and how many
// were shed or timed out; and, for the fairness bound, the largest gap
// between two tenants' service (their counters' growth) over the time both
// had requests parked in one class.

// FlowStream is one tenant's traffic in one class.
type FlowStream struct {
	// Tenant and Class name it ("" is the anonymous tenant).
	Tenant string
	Class  ladder.Class
	// Rate is its arrivals per second (Poisson).
	Rate float64
	// PromptTokens and OutputTokens are drawn uniformly from [Min, Max].
	PromptMin, PromptMax int
	OutputMin, OutputMax int
}

// FlowConfig is one admission run.
type FlowConfig struct {
	// Workers engines of config Engine (KVRole none).
	Workers int
	Engine  engine.Config
	// Cap is the per-endpoint in-flight cap (fc_prefill_max_inflight),
	// Depth the parking queue per endpoint (≤ ladder.MaxQueueDepthPerEP),
	// MaxPark the park deadline (0: none).
	Cap, Depth int
	MaxPark    time.Duration
	// Streams is the traffic; Duration how long it arrives; Warmup how
	// long at the start is left out of every measurement.
	Streams          []FlowStream
	Duration, Warmup time.Duration
	// Seed seeds the arrivals and lengths.
	Seed int64
}

// FlowStreamResult is one stream's measurements.
type FlowStreamResult struct {
	Tenant string
	Class  string
	// Offered is how many requests arrived after the warm-up; Answered
	// how many got their answer; Shed how many were refused 429 (shed,
	// sheddable, displaced); TimedOut how many waited past MaxPark.
	Offered, Answered, Shed, TimedOut int
	// TTFT is arrival → first token of the answered ones; Parked the time
	// parked of those that parked.
	TTFT, Parked Latency
	// Tokens is the prompt and completion tokens answered per second.
	TokensPerSec float64
}

// FlowResult is one admission run's outcome.
type FlowResult struct {
	Streams []FlowStreamResult
	// Throughput is answered requests per second over the measured window.
	Throughput float64
	// MaxGap is, per class (ladder.Class.Index), the largest difference
	// between two tenants' service growth (their FlowQueue counters, in
	// tokens) over any interval in which both had requests parked in that
	// class; U the largest one-request cost (prompt + completion) seen,
	// MaxInflight the most requests one tenant had in flight, MaxOutput
	// the largest completion: the bound 2·U + K·M of ladder/flow.go.
	MaxGap              [ladder.NumClasses]uint64
	U, MaxOutput        int
	MaxInflight         int
	BacklogIntervals    int
	BacklogSecondsTotal float64
}

// flowReq is one request of a run.
type flowReq struct {
	stream            int
	arrive            time.Duration
	prompt, output    int
	first, end        time.Duration
	worker            int
	parkedAt          time.Duration
	parked            bool
	shed, timeout     bool
	deadline          time.Duration
	parkOn            int
	charged, complete bool
}

// arrivalQ orders pending arrivals (time, then index).
type arrivalQ []flowArrival

type flowArrival struct {
	at  time.Duration
	idx int
}

func (q arrivalQ) Len() int { return len(q) }
func (q arrivalQ) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].idx < q[j].idx
}
func (q arrivalQ) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *arrivalQ) Push(x any)   { *q = append(*q, x.(flowArrival)) }
func (q *arrivalQ) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// flowSim is one admission run's state.
type flowSim struct {
	cfg     FlowConfig
	lad     *ladder.Router
	flow    *ladder.FlowQueue
	engines []*engine.Engine
	tickets [][]int // per worker: engine ticket-1 → request index
	active  []uint32
	parked  []uint32 // per worker: requests parked on its queue
	views   []ladder.EndpointView
	reqs    []flowReq
	prog    []engine.Progress
	// inflight per tenant (for K).
	inflight map[string]int
	res      FlowResult
	// fairness bookkeeping: per class, the counters of every tenant when
	// the current both-backlogged interval began (nil: not in one).
	since   [ladder.NumClasses]map[string]uint64
	sinceAt [ladder.NumClasses]time.Duration
	tenants []string
}

var flowEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// RunFlow simulates cfg and returns its measurements. It is deterministic.
func RunFlow(cfg FlowConfig) (*FlowResult, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &flowSim{cfg: cfg, flow: ladder.NewFlowQueue(), inflight: map[string]int{}}
	n := cfg.Workers
	svc := ladder.ServiceSpec{Name: "flow", PDDisagg: true, KVBlockSize: cfg.Engine.BlockSize, CacheThresholdPct: 20,
		BalanceAbsThreshold: 3, SessionTTL: sessionTTL,
		Admission: ladder.AdmissionSpec{MaxInflightPerEP: cfg.Cap, QueueDepthPerEP: cfg.Depth, MaxPark: cfg.MaxPark}}
	eps := make([]ladder.EndpointSpec, 0, n+1)
	for i := range n {
		eps = append(eps, ladder.EndpointSpec{Addr: workerAddr(i), Role: ladder.RolePrefill, Weight: 1})
	}
	eps = append(eps, ladder.EndpointSpec{Addr: workerAddr(n), Role: ladder.RoleDecode, Weight: 1})
	lad, err := ladder.NewRouter(svc, eps, ladder.DefaultEnv(), ladder.RouterConfig{})
	if err != nil {
		return nil, fmt.Errorf("flow: %w: %w", ErrConfig, err)
	}
	s.lad = lad
	s.views = make([]ladder.EndpointView, n+1)
	s.active, s.parked = make([]uint32, n), make([]uint32, n)
	s.tickets = make([][]int, n)
	for range n {
		e, err := engine.New(cfg.Engine)
		if err != nil {
			return nil, fmt.Errorf("flow: %w: %w", ErrConfig, err)
		}
		s.engines = append(s.engines, e)
	}
	seen := map[string]bool{}
	for _, st := range cfg.Streams {
		if !seen[st.Tenant] {
			seen[st.Tenant] = true
			s.tenants = append(s.tenants, st.Tenant)
		}
	}
	s.generate()
	if err := s.run(); err != nil {
		return nil, err
	}
	s.measure()
	return &s.res, nil
}

func (c *FlowConfig) validate() error {
	var errs []error
	if c.Workers < 1 || c.Workers >= ladder.MaxEndpoints {
		errs = append(errs, fmt.Errorf("workers %d", c.Workers))
	}
	if err := c.Engine.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Cap < 1 || c.Depth < 0 || c.Depth > ladder.MaxQueueDepthPerEP {
		errs = append(errs, fmt.Errorf("cap %d depth %d", c.Cap, c.Depth))
	}
	if len(c.Streams) == 0 || c.Duration <= c.Warmup {
		errs = append(errs, fmt.Errorf("%d streams over %v (warm-up %v)", len(c.Streams), c.Duration, c.Warmup))
	}
	for i, st := range c.Streams {
		if !(st.Rate > 0) || st.PromptMin < 1 || st.PromptMax < st.PromptMin || st.OutputMin < 1 || st.OutputMax < st.OutputMin {
			errs = append(errs, fmt.Errorf("stream %d: %+v", i, st))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("flow config: %w: %w", ErrConfig, err)
	}
	return nil
}

// generate draws every stream's arrivals and lengths.
func (s *flowSim) generate() {
	rng := rand.New(rand.NewSource(s.cfg.Seed))
	for si, st := range s.cfg.Streams {
		t := time.Duration(0)
		for {
			t += time.Duration(rng.ExpFloat64() / st.Rate * float64(time.Second))
			if t >= s.cfg.Duration {
				break
			}
			s.reqs = append(s.reqs, flowReq{stream: si, arrive: t, worker: -1, first: -1, end: -1, parkOn: -1,
				prompt: st.PromptMin + rng.Intn(st.PromptMax-st.PromptMin+1),
				output: st.OutputMin + rng.Intn(st.OutputMax-st.OutputMin+1)})
		}
	}
}

// run is the event loop: the earliest of the next arrival, the next park
// deadline and every engine's next event (engines first on a tie).
func (s *flowSim) run() error {
	var q arrivalQ
	for i := range s.reqs {
		q = append(q, flowArrival{at: s.reqs[i].arrive, idx: i})
	}
	heap.Init(&q)
	for {
		wi := -1
		var wt time.Time
		for i, e := range s.engines {
			if t, ok := e.NextEventTime(); ok && (wi < 0 || t.Before(wt)) {
				wi, wt = i, t
			}
		}
		if q.Len() > 0 && (wi < 0 || flowEpoch.Add(q[0].at).Before(wt)) {
			a := heap.Pop(&q).(flowArrival)
			s.expire(a.at)
			s.arrive(a.idx, a.at)
			continue
		}
		if wi < 0 {
			break
		}
		now := wt.Sub(flowEpoch)
		s.expire(now)
		if err := s.step(wi, wt); err != nil {
			return err
		}
	}
	for i := range s.reqs {
		r := &s.reqs[i]
		if r.end < 0 && !r.shed && !r.timeout {
			return fmt.Errorf("flow: request %d never finished: %w", i, ErrInvariant)
		}
	}
	return nil
}

func (s *flowSim) snapshot() *ladder.Snapshot {
	for i := range s.active {
		s.views[i] = ladder.EndpointView{ActiveConns: s.active[i], Parked: s.parked[i],
			QueuedRequests: uint32(s.engines[i].Stats().Waiting)}
	}
	s.views[len(s.active)] = ladder.EndpointView{}
	return &ladder.Snapshot{Endpoints: s.views, ParkedByClass: s.flow.Counts()}
}

func (s *flowSim) request(i int) ladder.Request {
	st := &s.cfg.Streams[s.reqs[i].stream]
	return ladder.Request{Class: st.Class, UnderShare: s.flow.UnderShare(st.Class, st.Tenant, s.lad.Slots()),
		OutranksParked: s.flow.Outranks(st.Class, st.Tenant, uint64(s.reqs[i].prompt))}
}

// arrive decides request i at now.
func (s *flowSim) arrive(i int, now time.Duration) {
	req := s.request(i)
	d, err := s.lad.Decide(flowEpoch.Add(now), &req, s.snapshot())
	if err != nil {
		panic(err) // the snapshot always matches the rule
	}
	s.act(i, now, d)
}

func (s *flowSim) act(i int, now time.Duration, d ladder.Decision) {
	r := &s.reqs[i]
	st := &s.cfg.Streams[r.stream]
	switch d.Admission {
	case ladder.Admit:
		if !d.Available() || d.Prefill >= len(s.engines) {
			r.shed = true
			return
		}
		s.admit(i, d.Prefill, now)
	case ladder.Park:
		park := d.ParkOn
		if d.Displace {
			v, ok := s.flow.Victim(st.Class, st.Tenant, uint64(r.prompt))
			if !ok {
				r.shed = true
				return
			}
			vr := &s.reqs[v.ID]
			vr.shed, vr.parked = true, false
			s.parked[vr.parkOn]--
			park = vr.parkOn
		}
		if !r.parked {
			r.parkedAt = now
			if s.cfg.MaxPark > 0 {
				r.deadline = now + s.cfg.MaxPark
			}
		}
		r.parked, r.parkOn = true, park
		s.parked[park]++
		s.flow.Park(ladder.FlowEntry{ID: uint64(i), Class: st.Class, Tenant: st.Tenant, Allowed: ^ladder.EndpointSet(0)})
		s.fairness(now)
	default:
		r.shed = true
	}
}

// admit sends request i to worker w at now.
func (s *flowSim) admit(i, w int, now time.Duration) {
	r := &s.reqs[i]
	st := &s.cfg.Streams[r.stream]
	toks := make([]uint32, r.prompt)
	for k := range toks {
		toks[k] = uint32(i*7919+k) | 1<<30 // distinct prompts: no prefix-cache effects
	}
	tk, err := s.engines[w].Submit(flowEpoch.Add(now), engine.Request{ID: strconv.Itoa(i), Tokens: toks, MaxTokens: r.output})
	if err != nil {
		panic(fmt.Sprintf("flow: submit %d: %v", i, err))
	}
	if int(tk) != len(s.tickets[w])+1 {
		panic("flow: engine ticket out of order")
	}
	s.tickets[w] = append(s.tickets[w], i)
	r.worker = w
	s.active[w]++
	s.flow.Admitted(st.Class, st.Tenant, uint64(r.prompt))
	r.charged = true
	s.inflight[st.Tenant]++
	s.res.MaxInflight = max(s.res.MaxInflight, s.inflight[st.Tenant])
	s.res.U = max(s.res.U, r.prompt+r.output)
	s.res.MaxOutput = max(s.res.MaxOutput, r.output)
	s.fairness(now)
	s.collect(w, now)
}

// step advances worker w to t.
func (s *flowSim) step(w int, t time.Time) error {
	return s.collect(w, t.Sub(flowEpoch))
}

func (s *flowSim) collect(w int, now time.Duration) error {
	s.prog = s.engines[w].Advance(flowEpoch.Add(now), s.prog[:0])
	prog := append([]engine.Progress(nil), s.prog...)
	for _, p := range prog {
		i := s.tickets[w][p.Ticket-1]
		r := &s.reqs[i]
		if !p.FirstTokenAt.IsZero() && r.first < 0 {
			r.first = p.FirstTokenAt.Sub(flowEpoch)
		}
		if p.Done && r.end < 0 {
			r.end = p.DoneAt.Sub(flowEpoch)
			st := &s.cfg.Streams[r.stream]
			s.flow.Done(st.Class, st.Tenant, uint64(r.output))
			s.inflight[st.Tenant]--
			s.active[w]--
			s.fairness(now)
			s.release(w, now)
		}
	}
	return nil
}

// release offers worker w's freed slot to the parked request the policy
// names.
func (s *flowSim) release(w int, now time.Duration) {
	for s.flow.Len() > 0 {
		e, ok := s.flow.Peek(w)
		if !ok || s.active[w] >= s.lad.CapFor(e.Class, s.flow.UnderShare(e.Class, e.Tenant, s.lad.Slots())) {
			return
		}
		s.flow.Next(w)
		i := int(e.ID)
		r := &s.reqs[i]
		s.parked[r.parkOn]--
		r.parked = false
		req := s.request(i)
		s.active[w]++ // the reserved slot, as the router actor holds it
		d, err := s.lad.Resume(flowEpoch.Add(now), &req, s.snapshot(), w)
		s.active[w]--
		if err != nil {
			panic(err)
		}
		s.fairness(now)
		if d.Available() && d.Prefill == w {
			s.admit(i, w, now)
			continue
		}
		s.act(i, now, d)
	}
}

// expire times out the parked requests whose deadline passed by now.
func (s *flowSim) expire(now time.Duration) {
	if s.cfg.MaxPark <= 0 || s.flow.Len() == 0 {
		return
	}
	for i := range s.reqs {
		r := &s.reqs[i]
		if r.parked && r.deadline <= now {
			if _, ok := s.flow.Remove(uint64(i)); ok {
				r.parked, r.timeout = false, true
				s.parked[r.parkOn]--
			}
		}
	}
	s.fairness(now)
}

// fairness tracks, per class, the intervals in which at least two
// tenants have requests parked, and the largest gap between two tenants'
// counter growth over such an interval.
func (s *flowSim) fairness(now time.Duration) {
	for ci := 0; ci < ladder.NumClasses; ci++ {
		c := ladder.ClassAt(ci)
		var backlogged []string
		for _, t := range s.tenants {
			if s.flow.TenantParked(c, t) > 0 {
				backlogged = append(backlogged, t)
			}
		}
		if len(backlogged) < 2 {
			if s.since[ci] != nil {
				s.res.BacklogIntervals++
				s.res.BacklogSecondsTotal += (now - s.sinceAt[ci]).Seconds()
			}
			s.since[ci] = nil
			continue
		}
		if s.since[ci] == nil {
			s.since[ci] = map[string]uint64{}
			for _, t := range s.tenants {
				s.since[ci][t] = s.flow.Counter(c, t)
			}
			s.sinceAt[ci] = now
			continue
		}
		var lo, hi uint64
		for k, t := range backlogged {
			g := s.flow.Counter(c, t) - s.since[ci][t]
			if k == 0 || g < lo {
				lo = g
			}
			hi = max(hi, g)
		}
		if now >= s.cfg.Warmup {
			s.res.MaxGap[ci] = max(s.res.MaxGap[ci], hi-lo)
		}
	}
}

// measure fills the per-stream results.
func (s *flowSim) measure() {
	n := len(s.cfg.Streams)
	ttft, parked := make([][]float64, n), make([][]float64, n)
	s.res.Streams = make([]FlowStreamResult, n)
	tokens := make([]int, n)
	var last time.Duration
	answered := 0
	for i := range s.reqs {
		r := &s.reqs[i]
		if r.arrive < s.cfg.Warmup {
			continue
		}
		sr := &s.res.Streams[r.stream]
		sr.Offered++
		switch {
		case r.shed:
			sr.Shed++
		case r.timeout:
			sr.TimedOut++
		default:
			sr.Answered++
			answered++
			ttft[r.stream] = append(ttft[r.stream], (r.first - r.arrive).Seconds())
			if r.parkedAt > 0 {
				parked[r.stream] = append(parked[r.stream], (r.first - r.parkedAt).Seconds())
			}
			tokens[r.stream] += r.prompt + r.output
			last = max(last, r.end)
		}
	}
	window := (last - s.cfg.Warmup).Seconds()
	for k, st := range s.cfg.Streams {
		sr := &s.res.Streams[k]
		sr.Tenant, sr.Class = st.Tenant, st.Class.String()
		sr.TTFT, sr.Parked = summarize(ttft[k]), summarize(parked[k])
		if window > 0 {
			sr.TokensPerSec = float64(tokens[k]) / window
		}
	}
	if window > 0 {
		s.res.Throughput = float64(answered) / window
	}
}

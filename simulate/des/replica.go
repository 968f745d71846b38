package des

import (
	"fmt"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/peers"
	"github.com/llbproject/llb/simulate/strategy"
)

// replica is one router replica of a run: llb's ladder.Router or a peer's
// policy, and the in-flight requests it sent to each worker.
type replica struct {
	llb    *ladder.Router
	peer   peers.Policy
	active []uint32
	// prefill is, per worker, the uncached prompt blocks of this
	// replica's requests that have no first token yet (llb only).
	prefill []uint32
	// lora counts, per worker, this replica's requests in flight by
	// adapter (nil until the first adapter request).
	lora []map[string]int
}

// newReplicas builds the run's router replicas.
func newReplicas(cfg *RunConfig) ([]replica, error) {
	n := cfg.Fleet.Workers
	count := max(cfg.Replicas, 1)
	out := make([]replica, count)
	st := &cfg.Strategy
	for i := range out {
		out[i].active = make([]uint32, n)
		out[i].prefill = make([]uint32, n)
		if st.IsPeer() {
			addrs := make([]string, n)
			for w := range addrs {
				addrs[w] = workerAddr(w)
			}
			p, err := peers.New(st.Peer, n, uint64(i)+1, addrs)
			if err != nil {
				return nil, fmt.Errorf("strategy %q: %w: %w", st.Name, ErrConfig, err)
			}
			out[i].peer = p
			continue
		}
		svc, eps := rule(st, n)
		r, err := ladder.NewRouter(svc, eps, st.Env(), ladder.RouterConfig{})
		if err != nil {
			return nil, fmt.Errorf("strategy %q: %w: %w", st.Name, ErrConfig, err)
		}
		out[i].llb = r
	}
	return out, nil
}

// scoresMirrors reports whether the strategy reads the KV-event overlap.
func scoresMirrors(s *strategy.Strategy) bool {
	if s.IsPeer() {
		return s.Peer.UsesKVEvents()
	}
	return s.KVExact
}

// llbActive is what llb replica ri counts as in flight on worker w: its
// own live count plus the other replicas' counts as of the last gossip.
// With one replica it is the live count.
func (s *sim) llbActive(ri, w int) uint32 {
	if len(s.replicas) == 1 {
		return s.replicas[0].active[w]
	}
	a := s.replicas[ri].active[w]
	for o := range s.replicas {
		if o != ri {
			a += s.gossip[o][w]
		}
	}
	return a
}

// refreshGossip copies every replica's live counts into the gossiped
// snapshot when a gossip interval has passed by now.
func (s *sim) refreshGossip(now time.Duration) {
	if len(s.replicas) == 1 {
		return
	}
	every := s.cfg.GossipEvery
	if every <= 0 {
		every = DefaultGossip
	}
	if grid := now / every * every; s.gossipAt < 0 || grid > s.gossipAt {
		for o := range s.replicas {
			copy(s.gossip[o], s.replicas[o].active)
		}
		s.gossipAt = grid
	}
}

// pickPeer routes request i through peer replica ri at.
func (s *sim) pickPeer(ri, i int, at time.Time) int {
	k := &s.tr.Keys[i]
	tr := &s.tr.Requests[i]
	kv := scoresMirrors(&s.cfg.Strategy)
	metrics := s.cfg.Strategy.Peer.UsesMetrics()
	for wi := range s.workers {
		e := peers.Endpoint{}
		if kv {
			e.Overlap = s.workers[wi].mirror.Score(k.Chain)
		}
		if metrics {
			v := s.peerMetrics(wi, at.Sub(epoch))
			e.Waiting, e.KVUsage = v.waiting, v.kvUsage
		}
		s.peerEps[wi] = e
	}
	if tr.LoRA != "" {
		for wi := range s.workers {
			s.peerEps[wi].LoRAStale = s.loraGauge(wi, at.Sub(epoch)).stale
		}
	}
	req := peers.Request{ID: i, Text: k.Prompt, Chain: k.Chain, PromptTokens: tr.PromptTokens,
		OutputTokens: tr.OutputTokens, BlockSize: s.tr.Config.BlockSize, Adapter: tr.LoRA}
	return s.replicas[ri].peer.Pick(at, &req, s.peerEps)
}

// peerScrape is a worker's queue depth and KV usage as a metrics-reading
// peer last refreshed them.
type peerScrape struct {
	waiting int
	kvUsage float64
	at      time.Duration
	has     bool
}

// peerMetrics returns worker wi's metrics as a metrics-reading peer sees
// them at now. llm-d's endpoint picker refreshes every endpoint's metrics
// every peers.MetricsRefresh (50 ms), so when llb's own view is a scrape's
// (RunConfig.ScrapeEvery), the peer's is one too, on that 50 ms grid — the
// engine's state at the first decision after a grid point standing in
// for its state at that point, as for llb's (queued). Without
// ScrapeEvery both read the engines exactly.
func (s *sim) peerMetrics(wi int, now time.Duration) *peerScrape {
	v := &s.workers[wi].peerView
	every := peers.MetricsRefresh
	if s.cfg.ScrapeEvery <= 0 {
		every = 0
	}
	if grid, due := scrapeDue(now, every, v.at, v.has); due {
		st := s.workers[wi].eng.Stats()
		v.waiting, v.kvUsage, v.at, v.has = st.Waiting, st.KVUsage(), grid, true
	}
	return v
}

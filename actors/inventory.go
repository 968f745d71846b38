package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// FeedStarter starts one KV-event subscription. The feed runs on its own
// goroutine, owns its socket, and hands every update to sink in stream
// order until ctx ends; then it closes its socket, unregisters its metrics
// and closes the handle's Done channel. It must not block.
type FeedStarter func(ctx context.Context, spec FeedSpec, sink func(inventory.Update)) FeedHandle

// FeedSpec is one subscription to start.
type FeedSpec struct {
	// ID names the service, endpoint and rank (metric labels, Updates).
	ID inventory.EndpointID
	// Feed is the compiled subscription: a ZMQ publisher ("tcp://…",
	// vLLM and SGLang) or a TensorRT-LLM drain ("http://…/kv_cache_events").
	Feed rule.Feed
	// Addr is the endpoint's ip:port (a drain's identity in a cluster).
	Addr string
	// BlockSize is the rule's kvBlockSize (a drain cuts stored runs at
	// blocks of another size).
	BlockSize int
}

// feedStopWait bounds how long a restarting or stopping inventory actor
// waits for its feeds to close their sockets (a feed notices cancellation
// within its poll interval). Waiting keeps a feed's successor from starting
// while the old one still holds the metric series they share.
const feedStopWait = 2 * time.Second

// feedUpdate is one update from a feed goroutine, tagged with the
// incarnation that started the feed.
type feedUpdate struct {
	gen  uint64
	rank int
	u    inventory.Update
}

// rankSilent fires SilentAfter after a rank's feed disconnected; down is
// when, so a rank that came back and went down again in between is judged
// by its newer disconnection.
type rankSilent struct {
	gen  uint64
	rank int
	down time.Time
}

// inventoryPageReq asks for a page of an endpoint's mirrored keys (the REST
// inventory view).
type inventoryPageReq struct {
	offset, limit int
	reply         chan InventoryPage
}

// InventoryPage is a page of one endpoint's mirrored block keys.
type InventoryPage struct {
	// Keys are engine block keys (the hashes vLLM published).
	Keys []uint64
	// Total is the endpoint's distinct engine block count over all ranks
	// (the keys Keys pages through).
	Total int
	// Ranks holds each DP rank's mirror statistics; Feeds each rank's feed
	// statistics (same order).
	Ranks []inventory.MirrorStats
	Feeds []inventory.FeedStats
}

// inventoryActor owns one prefill endpoint's mirrors (one per DP rank) and
// the feeds that fill them. It answers the router's Score requests with
// the union of the ranks' mirrors, each rank with its own sequence and gap
// state (its feed's). A rank whose feed stays disconnected for SilentAfter
// has its mirror dropped: the union must not keep a dead rank's blocks.
//
// The mirrors are kept by the Service (svc.mirrors), not by the actor, with
// the last sequence number applied to each (svc.feedMarks): a restarted
// inventory actor keeps them and checks the first batch its new feed
// delivers against that mark, like a feed that reconnected — a small gap
// keeps the mirror, a gap beyond the window or a publisher restart clears
// it. Clearing unconditionally would lose Tier 1.5 for every prefix the
// engine already holds: vLLM publishes a block when it stores it, never
// again while it stays cached. A rule replace that keeps the endpoints
// reconfigures the service in place and keeps the mirrors warm.
type inventoryActor struct {
	svc     *Service
	ep      int
	mirrors []*inventory.Mirror
	feeds   []FeedHandle
	// resumed[rank] is set once this incarnation checked its first batch
	// of the rank against the predecessor's mark.
	resumed []bool
	// downSince[rank] is when the rank's feed disconnected (zero while
	// connected); silenced[rank] is set once its mirror was dropped for it.
	downSince []time.Time
	silenced  []bool
	gen       uint64
	cancel    context.CancelFunc
	log       zerolog.Logger
}

// feedMark is the last sequence number applied to one mirror.
type feedMark struct {
	seq  uint64
	have bool
}

func newInventoryActor(svc *Service, ep int) actor.Actor {
	return &inventoryActor{
		svc: svc,
		ep:  ep,
		gen: svc.gen.Add(1),
		log: svc.log.With().Str(logfield.Actor, "inventory").Int(logfield.EndpointIndex, ep).Logger(),
	}
}

// Receive implements actor.Actor.
func (a *inventoryActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *actor.Restarting:
		a.stopFeeds()
	case *actor.Stopping:
		a.stopFeeds()
	case *actor.Stopped:
	case feedUpdate:
		if m.gen != a.gen || m.rank >= len(a.mirrors) {
			return
		}
		switch m.u.Kind {
		case inventory.UpdateBatch:
			a.resume(m.rank, &m.u)
			a.mirrors[m.rank].ApplyUpdate(m.u)
		case inventory.UpdateConnected:
			a.downSince[m.rank], a.silenced[m.rank] = time.Time{}, false
			// A (re)connected engine may have restarted with another cache
			// size: refresh its capacity now.
			ctx.Send(a.svc.endpoints[a.ep], scrapeNow{})
		case inventory.UpdateDisconnected:
			a.rankDown(ctx, m.rank)
		}
	case rankSilent:
		if m.gen == a.gen && m.rank < len(a.mirrors) && !a.silenced[m.rank] && a.downSince[m.rank].Equal(m.down) {
			a.silence(ctx, m.rank)
		}
	case scoreReq:
		ctx.Respond(a.score(m))
	case inventoryPageReq:
		m.reply <- a.page(m.offset, m.limit)
	case resyncReq:
		ctx.Send(a.svc.router, inventorySize{ep: a.ep, blocks: a.blocks()})
	case crash:
		panic("actors: inventory crash requested (chaos)")
	default:
		a.log.Warn().Str(logfield.MsgType, typeName(m)).Msg("inventory actor: unknown message")
	}
}

func (a *inventoryActor) start(ctx actor.Context) {
	a.mirrors = a.svc.mirrorsFor(a.ep)
	a.resumed = make([]bool, len(a.mirrors))
	a.downSince = make([]time.Time, len(a.mirrors))
	a.silenced = make([]bool, len(a.mirrors))
	if a.svc.cfg.KV.StartFeed == nil {
		return
	}
	fctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	self, root, gen := ctx.Self(), ctx.ActorSystem().Root, a.gen
	ep := &a.svc.cfg.Rule.Endpoints[a.ep]
	for rank, fc := range ep.Feeds {
		rank := rank
		spec := FeedSpec{
			ID:   inventory.EndpointID{Service: a.svc.cfg.Rule.Key, EpIdx: a.ep, Rank: fc.Rank},
			Feed: fc, Addr: ep.Addr.String(), BlockSize: a.svc.cfg.KV.Keys.BlockSize(),
		}
		a.feeds = append(a.feeds, a.svc.cfg.KV.StartFeed(fctx, spec, func(u inventory.Update) {
			root.Send(self, feedUpdate{gen: gen, rank: rank, u: u})
		}))
	}
}

// resume checks a batch against the sequence its mirror was left at and
// records it as the new mark. Only the first batch of a rank after a
// restart is checked (a feed checks its own stream): the sequence numbers
// the restart skipped decide, by the feed's own rule, whether the mirror
// is kept (a gap within the window) or cleared first (a larger gap, or a
// sequence that went backwards or repeated: the publisher restarted).
func (a *inventoryActor) resume(rank int, u *inventory.Update) {
	mark := &a.svc.feedMarks[a.ep][rank]
	if !a.resumed[rank] {
		a.resumed[rank] = true
		if mark.have && u.Reset == inventory.ResetNone {
			var tr inventory.SeqTracker
			tr.Observe(mark.seq)
			d := tr.Observe(u.Seq)
			switch d.Action {
			case inventory.SeqRestart, inventory.SeqDuplicate:
				u.Reset = inventory.ResetRestart
			case inventory.SeqGapResync:
				u.Reset = inventory.ResetGap
			}
			a.log.Info().Stringer(logfield.Reason, u.Reset).
				Msgf("kv mirror resumed after the inventory actor restarted (last sequence %d, next %d; reset %s)", mark.seq, u.Seq, u.Reset)
		}
	}
	mark.seq, mark.have = u.Seq, true
}

// rankDown records a rank's disconnection and schedules its silence check.
func (a *inventoryActor) rankDown(ctx actor.Context, rank int) {
	if !a.downSince[rank].IsZero() {
		return
	}
	down := time.Now()
	a.downSince[rank] = down
	self, root, gen := ctx.Self(), ctx.ActorSystem().Root, a.gen
	time.AfterFunc(a.svc.cfg.KV.SilentAfter, func() { root.Send(self, rankSilent{gen: gen, rank: rank, down: down}) })
}

// silence drops a rank's mirror after its feed stayed disconnected for
// SilentAfter: nothing it holds can be trusted any longer (its removals are
// not heard), and the endpoint's union must not keep it alive. Its feed
// keeps reconnecting; blocks count again as the rank publishes them.
func (a *inventoryActor) silence(ctx actor.Context, rank int) {
	a.silenced[rank] = true
	mir := a.mirrors[rank]
	n := mir.Len() + mir.OffloadLen()
	mir.Reset()
	a.log.Warn().Int(logfield.Rank, a.svc.cfg.Rule.Endpoints[a.ep].Feeds[rank].Rank).Int(logfield.Blocks, n).
		Dur(logfield.Duration, a.svc.cfg.KV.SilentAfter).
		Msg("kv rank silent (feed disconnected): its mirrored blocks no longer count for the endpoint")
	ctx.Send(a.svc.router, inventorySize{ep: a.ep, blocks: a.blocks()})
}

// stopFeeds cancels the feeds and waits (bounded) until they have closed
// their sockets. It blocks Receive only on restart and stop.
func (a *inventoryActor) stopFeeds() {
	if a.cancel != nil {
		a.cancel()
		a.cancel = nil
	}
	a.gen = 0
	timeout := time.NewTimer(feedStopWait)
	defer timeout.Stop()
	for _, f := range a.feeds {
		select {
		case <-f.Done():
		case <-timeout.C:
			a.log.Warn().Msg("kv feed did not stop in time")
			a.feeds = nil
			return
		}
	}
	a.feeds = nil
}

// score is the endpoint's overlap: the leading blocks of the chain held by
// the union of its DP ranks (one inventory per endpoint, as LoxiLB scores
// it: the engine spreads a prefix's requests over its ranks), with how many
// of them only an offload tier holds.
func (a *inventoryActor) score(m scoreReq) scoreReply {
	r := scoreReply{id: m.id, ep: a.ep}
	for _, mir := range a.mirrors {
		if mir.Contract().Tripped {
			r.guard = ladder.ReasonHashContract
		}
		r.blocks += uint32(mir.Len())
	}
	if len(a.mirrors) == 1 {
		r.removals = a.mirrors[0].Removals()
		if m.checkRemoved {
			// A ring that no longer holds every removal since the mark
			// answers what it holds: the check is then only less lenient.
			r.removed, _ = a.mirrors[0].RemovedSince(m.since, m.chain)
			return r
		}
	}
	n, off := inventory.ScoreUnion(a.mirrors, m.chain)
	r.overlap, r.offloaded = uint32(n), uint32(off)
	return r
}

func (a *inventoryActor) blocks() uint32 {
	var n uint32
	for _, mir := range a.mirrors {
		n += uint32(mir.Len())
	}
	return n
}

// page lists engine keys (what vLLM published); in token-keyed mode their
// count can differ from the scorable own keys, so paging and Total count
// engine keys.
func (a *inventoryActor) page(offset, limit int) InventoryPage {
	var p InventoryPage
	for _, f := range a.feeds {
		p.Feeds = append(p.Feeds, f.Stats())
	}
	for _, mir := range a.mirrors {
		st := mir.Stats()
		p.Ranks = append(p.Ranks, st)
		p.Total += st.EngineBlocks
		if limit > len(p.Keys) {
			n := st.EngineBlocks
			if offset >= n {
				offset -= n
				continue
			}
			before := len(p.Keys)
			p.Keys = mir.AppendKeys(p.Keys, offset, limit-len(p.Keys))
			offset = max(offset-(len(p.Keys)-before), 0)
		}
	}
	return p
}

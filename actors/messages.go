package actors

import (
	"time"

	"github.com/llbproject/llb/ladder"
)

// Messages are small value structs grouped by the actor that receives them.
// Pointer messages are used only where a reply channel or a large payload
// travels with them. Those whose senders may process the receiving mailbox
// themselves are marked senderRuns (mailbox.go).

// ---- to the router actor --------------------------------------------------

// routeMsg asks the router for a decision. reply receives a parked notice
// (at most once) and then exactly one final answer, unless the request is
// cancelled first. It is buffered (cap 2) so the router never blocks.
type routeMsg struct {
	id    uint64
	rr    *RouteRequest
	reply chan routeReply
	// parkedAt is set when the request comes back from an admission queue.
	parkedAt time.Time
	// deadline is the park deadline carried across re-parks.
	deadline time.Time
	// scored and overlaps hold the inventory answers for this request, kept
	// with it so a parked request resumes on the inputs it was decided on.
	scored    ladder.EndpointSet
	overlaps  [ladder.MaxEndpoints]uint32
	offloaded [ladder.MaxEndpoints]uint32
	// pin is the session table's answer for rr.Pin (the endpoint holding
	// the stored response the request names).
	pin ladder.SessionLookup
	// lora is the LoRA policy's outcome for the request (its adapter).
	lora ladder.LoRAOutcome
}

// The data plane's messages: sent from request goroutines, which hold no
// lock when they call the Service (see senderRunsMailbox). A streamed
// request's route goes through the dispatcher: the goroutine that routes it
// relays the stream for its whole life, and deciding the route there grew
// its stack for that life (45 against 32 KiB of RSS per stream at 1 000
// streams); one hand-off more is nothing beside a stream's.
func (m *routeMsg) senderRuns() bool  { return !m.rr.Streamed }
func (cancelMsg) senderRuns() bool    { return true }
func (reportMsg) senderRuns() bool    { return true }
func (concludeMsg) senderRuns() bool  { return true }
func (firstByteMsg) senderRuns() bool { return true }
func (pinMsg) senderRuns() bool       { return true }
func (finishMsg) senderRuns() bool    { return true }

// routeReply is the router's answer on routeMsg.reply.
type routeReply struct {
	route Route
	err   error
	// parked is an intermediate notice: the request sits in an admission
	// queue until parkDeadline (zero: until capacity frees or the client
	// leaves); the final answer follows.
	parked       bool
	parkDeadline time.Time
}

// cancelMsg withdraws request id: the client left or gave up waiting.
type cancelMsg struct{ id uint64 }

// reportMsg carries Service.Report.
type reportMsg struct{ o Outcome }

// concludeMsg carries Service.Conclude: a leg's outcome and its ticket's
// end in one message.
type concludeMsg struct {
	o   Outcome
	res Result
}

// firstByteMsg carries Service.FirstByte.
type firstByteMsg struct{ t Ticket }

// pinMsg carries Service.Pin.
type pinMsg struct {
	t   Ticket
	key string
}

// finishMsg carries Service.Finish.
type finishMsg struct {
	t   Ticket
	res Result
}

// scoreReply answers scoreReq: the endpoint's overlap with the chain.
type scoreReply struct {
	id      uint64
	ep      int
	overlap uint32
	// offloaded is how many of overlap's blocks the endpoint holds only in
	// its CPU offload tier.
	offloaded uint32
	blocks    uint32
	// removals is the endpoint's mirror's Removals mark (0 for an endpoint
	// of several DP ranks: cache truth makes no prediction for it).
	removals uint64
	// removed answers a scoreReq with checkRemoved: a chain key was
	// removed from the mirror after the request's mark.
	removed bool
	// guard is ReasonHashContract when the endpoint's event stream broke the
	// hash contract (its overlaps cannot be trusted), else ReasonNone.
	guard ladder.Reason
}

// sessionReply answers sessionLookup.
type sessionReply struct {
	id     uint64
	lookup ladder.SessionLookup
}

// decisionDeadline fires when a decision's fan-out replies are overdue.
type decisionDeadline struct{ id uint64 }

// probeState pushes an endpoint's probe transition (up or down); slow:
// down by timeouts alone (probeCore.slow).
type probeState struct {
	ep   int
	up   bool
	slow bool
}

// lifeSign tells an endpoint actor that its endpoint answered outside a
// probe's attempt (Service.LifeSign).
type lifeSign struct{}

// breakerState pushes an endpoint's breaker transition.
type breakerState struct {
	ep    int
	state BreakerState
}

// engineStats pushes an endpoint's scraped engine metrics.
type engineStats struct {
	ep    int
	stats EngineStats
}

// inventorySize pushes an endpoint's mirrored block count (for cold-start
// seeding when no decision scored it recently).
type inventorySize struct {
	ep     int
	blocks uint32
}

// resumeMsg returns a parked request to the router for the slot the
// router reserved on endpoint ep; held is the endpoint whose queue held it.
type resumeMsg struct {
	ep   int
	held int
	req  *routeMsg
}

// unparkedMsg tells the router a parked request left its queue without
// being resumed (timeout, cancellation, or a drain back to the ladder).
type unparkedMsg struct {
	ep int
	id uint64
	// requeue is set when the endpoint drained its queue (breaker trip,
	// probe down): the router decides for the request again.
	requeue *routeMsg
}

// statusReq asks the router for a snapshot of the service.
type statusReq struct{ reply chan ServiceStatus }

// resyncReq asks a child to push its current state to the router again
// (sent by the router after it restarts with fresh state).
type resyncReq struct{}

// sweepTick drives periodic housekeeping (session TTL sweeps, gauges).
type sweepTick struct{}

// ---- to the session shard actors ------------------------------------------

// sessionLookup asks a shard for a key's pin (Request/Respond).
type sessionLookup struct {
	id  uint64
	key string
}

// sessionPin stores a pin after a successful request.
type sessionPin struct {
	key string
	pin ladder.Pin
}

// sessionEvict removes one key (its pinned endpoint proved unhealthy).
type sessionEvict struct{ key string }

// sessionEvictEndpoint removes every pin that names an endpoint.
type sessionEvictEndpoint struct{ ep int }

// ---- to the inventory actors ------------------------------------------------

// scoreReq asks an endpoint's inventory for its overlap with chain
// (Request/Respond, answered with scoreReply).
type scoreReq struct {
	id    uint64
	chain []uint64
	// checkRemoved asks, instead of the overlap, whether the mirror
	// removed one of chain's keys after the Removals mark since.
	checkRemoved bool
	since        uint64
}

// ---- to the breaker actors ----------------------------------------------------

// legResult feeds one leg outcome to an endpoint's breaker.
type legResult struct{ class outcomeClass }

// legResult comes from the router, whatever goroutine runs it.
func (legResult) senderRuns() bool { return true }

// breakerTimer fires when an OPEN breaker's window ends.
type breakerTimer struct{ epoch uint64 }

// ---- to the endpoint actors -----------------------------------------------------

// parkMsg hands a request to an endpoint's admission queue.
type parkMsg struct{ req *routeMsg }

// wakeMsg tells an endpoint actor to hand parked request id back to the
// router for the slot the router reserved on endpoint slot (the admission
// policy, ladder.FlowQueue, chose it).
type wakeMsg struct {
	id   uint64
	slot int
}

// wakeEmpty answers a wake whose request had left the queue meanwhile
// (timed out, dropped), so the router can free the slot it reserved on ep.
type wakeEmpty struct {
	ep int
	id uint64
}

// evictParked removes parked request id and answers it with route (a
// request of a higher class took its place in a full queue: 429).
type evictParked struct {
	id    uint64
	route Route
}

// scrapeNow asks for an immediate engine-metrics scrape (the endpoint's KV
// feed reconnected, so the engine may have restarted).
type scrapeNow struct{}

// reprobe asks a down endpoint to probe again now, when its last probe
// only timed out (a request found no endpoint available).
type reprobe struct{}

// dropParked removes a parked request (the client left).
type dropParked struct{ id uint64 }

// drainParked sends every parked request back to the router for a new
// decision (the endpoint went down or its breaker opened).
type drainParked struct{}

// Timer and goroutine results carry gen, the endpoint actor incarnation
// that scheduled them; a restarted actor ignores its predecessor's.

// parkExpired fires when a parked request's deadline passes.
type parkExpired struct {
	id  uint64
	gen uint64
}

// probeTick and scrapeTick start one probe or scrape.
type probeTick struct{ gen uint64 }
type scrapeTick struct{ gen uint64 }

// probeResult is a probe goroutine's single result.
type probeResult struct {
	gen uint64
	err error
}

// scrapeResult is a scrape goroutine's single result.
type scrapeResult struct {
	gen   uint64
	stats EngineStats
	err   error
	// periodic is set for the scheduled scrape, whose result schedules the
	// next one (an out-of-band scrapeNow does not).
	periodic bool
}

// crash makes an actor panic; chaos tests use it to exercise supervision.
type crash struct{}

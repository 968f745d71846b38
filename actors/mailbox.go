package actors

import (
	"runtime"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// senderRunsMailbox is the mailbox of the actors every request talks to:
// the router and the breakers. A message that marks itself senderRuns and
// finds the mailbox idle is processed by its sender's goroutine, right
// away; every other message, or one that finds the mailbox busy, waits in
// the queue as usual and the goroutine already processing drains it.
//
// protoactor's mailbox hands an idle mailbox to the dispatcher, so a
// request cost three goroutine hand-offs: its route woke a worker for the
// router, the router's answer woke the request again, and its conclusion
// woke a worker once more (and the router's note to the breaker a fourth).
// On two cores those wake-ups, not the routing, were most of what llbd's
// router added to a request. With the sender processing, a route to an
// idle router has its answer in the reply channel when Send returns.
//
// The actor model is unchanged: one goroutine at a time processes the
// mailbox (the running flag, taken under the lock, is the only way in), in
// order, with the actor's supervision (a panic is recovered and escalated
// as protoactor's mailbox does). Which goroutine that is was never the
// actor's concern. A sender processes at most senderBudget messages; if
// more are waiting it hands the rest to the dispatcher (a request is not
// made to drain a burst for everyone), which yields every Throughput
// messages as protoactor's does.
//
// Only messages whose senders hold no lock and may wait a little are
// marked: the data plane's calls (Route, the ticket's reports) and the
// router's breaker notes. Messages from timers, probes, the cluster's
// callbacks and control calls go through the dispatcher as before: those
// senders may hold locks a router callback could want.
// A streamed request's route is not marked either (routeMsg.senderRuns):
// its goroutine relays the stream for the stream's life, and the routing
// would grow that goroutine's stack for as long.
type senderRunsMailbox struct {
	mu sync.Mutex
	// Guarded by mu.
	user, sys msgRing
	running   bool // a goroutine is processing (or about to)
	suspended bool // supervision suspended the user messages

	// Set once by RegisterHandlers, before any message.
	invoker actor.MessageInvoker
	disp    actor.Dispatcher
}

// senderRuns marks a message whose sender may process the receiving
// mailbox itself (see senderRunsMailbox) when senderRuns reports true.
type senderRuns interface{ senderRuns() bool }

// senderBudget is how many messages a sender processes before it hands
// the rest to the dispatcher: its own and a few that came in meanwhile.
const senderBudget = 16

func newSenderRunsMailbox() actor.Mailbox { return &senderRunsMailbox{} }

// PostUserMessage implements actor.Mailbox.
func (m *senderRunsMailbox) PostUserMessage(msg any) {
	m.mu.Lock()
	m.user.push(msg)
	claimed := m.claim()
	m.mu.Unlock()
	if !claimed {
		return
	}
	if sr, ok := actor.UnwrapEnvelopeMessage(msg).(senderRuns); ok && sr.senderRuns() {
		m.process(senderBudget)
		return
	}
	m.disp.Schedule(m.drain)
}

// PostSystemMessage implements actor.Mailbox. Lifecycle and supervision
// messages always go through the dispatcher.
func (m *senderRunsMailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.sys.push(msg)
	claimed := m.claim()
	m.mu.Unlock()
	if claimed {
		m.disp.Schedule(m.drain)
	}
}

// claim takes the processing role when it is free and there is something
// to process. Called with mu held.
func (m *senderRunsMailbox) claim() bool {
	if m.running || (m.suspended && m.sys.n == 0) {
		return false
	}
	m.running = true
	return true
}

// RegisterHandlers implements actor.Mailbox.
func (m *senderRunsMailbox) RegisterHandlers(invoker actor.MessageInvoker, d actor.Dispatcher) {
	m.invoker, m.disp = invoker, d
}

// Start implements actor.Mailbox.
func (m *senderRunsMailbox) Start() {}

// UserMessageCount implements actor.Mailbox.
func (m *senderRunsMailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.user.n
}

// process handles up to budget messages in the caller's goroutine and
// hands what is left to the dispatcher. The caller holds the processing
// role.
func (m *senderRunsMailbox) process(budget int) {
	for range budget {
		msg, sys, ok := m.next()
		if !ok {
			return
		}
		m.invoke(msg, sys)
	}
	m.disp.Schedule(m.drain)
}

// drain handles messages until none is left, yielding every Throughput
// messages. The caller holds the processing role.
func (m *senderRunsMailbox) drain() {
	t := max(m.disp.Throughput(), 1)
	for i := 1; ; i++ {
		if i%t == 0 {
			runtime.Gosched()
		}
		msg, sys, ok := m.next()
		if !ok {
			return
		}
		m.invoke(msg, sys)
	}
}

// next takes the next message to process: system messages first, user
// messages unless suspended. With none, it gives up the processing role
// (under the same lock a sender claims it with, so no message is left
// behind).
func (m *senderRunsMailbox) next() (msg any, sys, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		if msg, ok := m.sys.pop(); ok {
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended = true
				continue
			case *actor.ResumeMailbox:
				m.suspended = false
				continue
			}
			return msg, true, true
		}
		if !m.suspended {
			if msg, ok := m.user.pop(); ok {
				return msg, false, true
			}
		}
		m.running = false
		return nil, false, false
	}
}

// invoke hands one message to the actor; a panic is escalated to its
// supervisor, which suspends the mailbox until it decides.
func (m *senderRunsMailbox) invoke(msg any, sys bool) {
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	if sys {
		m.invoker.InvokeSystemMessage(msg)
		return
	}
	m.invoker.InvokeUserMessage(msg)
}

// msgRing is a growable FIFO ring of messages.
type msgRing struct {
	buf  []any
	head int // index of the oldest message
	n    int
}

func (q *msgRing) push(msg any) {
	if q.n == len(q.buf) {
		grown := make([]any, max(16, 2*len(q.buf)))
		for i := range q.n {
			grown[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = grown, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = msg
	q.n++
}

func (q *msgRing) pop() (any, bool) {
	if q.n == 0 {
		return nil, false
	}
	msg := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return msg, true
}

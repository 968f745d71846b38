package actors

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/llbproject/llb/internal/testwait"
)

// inlineNote is a message its sender may process; plainNote one it may
// not.
type inlineNote struct{ n int }

func (inlineNote) senderRuns() bool { return true }

type plainNote struct{ n int }

// fakeInvoker records what the mailbox handed it; onUser runs inside the
// handling of each user message (to post from inside, or to panic).
type fakeInvoker struct {
	mu        sync.Mutex
	got       []string
	escalated []any
	onUser    func(msg any)
}

func (f *fakeInvoker) InvokeSystemMessage(msg any) {
	f.mu.Lock()
	f.got = append(f.got, fmt.Sprintf("sys:%T", msg))
	f.mu.Unlock()
}

func (f *fakeInvoker) InvokeUserMessage(msg any) {
	f.mu.Lock()
	f.got = append(f.got, fmt.Sprint(msg))
	on := f.onUser
	f.mu.Unlock()
	if on != nil {
		on(msg)
	}
}

func (f *fakeInvoker) EscalateFailure(reason, _ any) {
	f.mu.Lock()
	f.escalated = append(f.escalated, reason)
	f.mu.Unlock()
}

func (f *fakeInvoker) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

// heldDispatcher keeps what it is given until run is called.
type heldDispatcher struct {
	mu  sync.Mutex
	fns []func()
}

func (d *heldDispatcher) Schedule(fn func()) {
	d.mu.Lock()
	d.fns = append(d.fns, fn)
	d.mu.Unlock()
}

func (*heldDispatcher) Throughput() int { return 300 }

// run runs what was scheduled so far and reports how many there were.
func (d *heldDispatcher) run() int {
	d.mu.Lock()
	fns := d.fns
	d.fns = nil
	d.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	return len(fns)
}

func newTestMailbox() (*senderRunsMailbox, *fakeInvoker, *heldDispatcher) {
	m := newSenderRunsMailbox().(*senderRunsMailbox)
	inv, d := &fakeInvoker{}, &heldDispatcher{}
	m.RegisterHandlers(inv, d)
	return m, inv, d
}

func TestSenderRunsMailbox_SenderProcessesAMarkedMessageWhenIdle(t *testing.T) {
	m, inv, d := newTestMailbox()
	m.PostUserMessage(inlineNote{1})
	if got, want := inv.seen(), []string{"{1}"}; !slices.Equal(got, want) {
		t.Fatalf("handled before Post returned: %v; want %v", got, want)
	}
	if n := d.run(); n != 0 {
		t.Fatalf("dispatcher got %d runs; want 0", n)
	}
}

func TestSenderRunsMailbox_UnmarkedAndSystemMessagesGoThroughTheDispatcher(t *testing.T) {
	m, inv, d := newTestMailbox()
	m.PostUserMessage(plainNote{1})
	m.PostSystemMessage(&actor.Started{})
	if got := inv.seen(); len(got) != 0 {
		t.Fatalf("handled in the sender's goroutine: %v; want nothing", got)
	}
	if n := d.run(); n != 1 {
		t.Fatalf("dispatcher got %d runs; want 1 (the mailbox was claimed once)", n)
	}
	// System messages come first, as in protoactor's mailbox.
	if got, want := inv.seen(), []string{"sys:*actor.Started", "{1}"}; !slices.Equal(got, want) {
		t.Fatalf("got %v; want %v", got, want)
	}
}

func TestSenderRunsMailbox_ABusyMailboxQueuesAMarkedMessageForItsRunner(t *testing.T) {
	m, inv, d := newTestMailbox()
	m.PostUserMessage(plainNote{1}) // claimed for the dispatcher, not run yet
	m.PostUserMessage(inlineNote{2})
	if got := inv.seen(); len(got) != 0 {
		t.Fatalf("a marked message ran while the mailbox was claimed: %v", got)
	}
	d.run()
	if got, want := inv.seen(), []string{"{1}", "{2}"}; !slices.Equal(got, want) {
		t.Fatalf("got %v; want %v", got, want)
	}
}

func TestSenderRunsMailbox_ASenderHandsTheRestToTheDispatcherAfterItsBudget(t *testing.T) {
	m, inv, d := newTestMailbox()
	const extra = 2 * senderBudget
	posted := false
	inv.onUser = func(msg any) {
		// The first message posts more from inside its handling (as an
		// actor sending to itself does): they queue behind it.
		if !posted {
			posted = true
			for i := range extra {
				m.PostUserMessage(inlineNote{100 + i})
			}
		}
	}
	m.PostUserMessage(inlineNote{0})
	if got := len(inv.seen()); got != senderBudget {
		t.Fatalf("the sender handled %d messages; want its budget %d", got, senderBudget)
	}
	if n := d.run(); n != 1 {
		t.Fatalf("dispatcher got %d runs; want 1 (the rest)", n)
	}
	got := inv.seen()
	if len(got) != extra+1 {
		t.Fatalf("handled %d messages; want %d", len(got), extra+1)
	}
	for i := 1; i < len(got); i++ {
		if want := fmt.Sprint(inlineNote{100 + i - 1}); got[i] != want {
			t.Fatalf("message %d: got %s; want %s (in order)", i, got[i], want)
		}
	}
}

func TestSenderRunsMailbox_APanicIsEscalatedAndSuspendsUntilResumed(t *testing.T) {
	m, inv, d := newTestMailbox()
	inv.onUser = func(msg any) {
		if msg == (inlineNote{1}) {
			// What actorContext.EscalateFailure does: suspend, then tell
			// the supervisor.
			m.PostSystemMessage(&actor.SuspendMailbox{})
			panic("boom")
		}
	}
	m.PostUserMessage(inlineNote{1})
	m.PostUserMessage(inlineNote{2}) // suspended: waits
	if got := len(inv.escalated); got != 1 {
		t.Fatalf("escalated %d failures; want 1", got)
	}
	d.run()
	if got, want := inv.seen(), []string{"{1}"}; !slices.Equal(got, want) {
		t.Fatalf("while suspended: got %v; want %v", got, want)
	}
	m.PostSystemMessage(&actor.ResumeMailbox{})
	d.run()
	if got, want := inv.seen(), []string{"{1}", "{2}"}; !slices.Equal(got, want) {
		t.Fatalf("after resume: got %v; want %v", got, want)
	}
	if got := m.UserMessageCount(); got != 0 {
		t.Fatalf("UserMessageCount = %d; want 0", got)
	}
}

func TestSenderRunsMailbox_ConcurrentSendersAreProcessedOneAtATimeInOrderPerSender(t *testing.T) {
	m := newSenderRunsMailbox().(*senderRunsMailbox)
	var active, maxActive int
	var mu sync.Mutex
	last := map[int]int{}
	var order sync.Mutex
	inv := &fakeInvoker{}
	inv.onUser = func(msg any) {
		mu.Lock()
		active++
		maxActive = max(maxActive, active)
		mu.Unlock()
		n := msg.(inlineNote).n
		order.Lock()
		sender, seq := n/1_000_000, n%1_000_000
		if seq <= last[sender] && last[sender] != 0 {
			t.Errorf("sender %d: message %d after %d", sender, seq, last[sender])
		}
		last[sender] = seq
		order.Unlock()
		mu.Lock()
		active--
		mu.Unlock()
	}
	m.RegisterHandlers(inv, newWorkerDispatcher(4, 300))
	var wg sync.WaitGroup
	const senders, each = 8, 2000
	for s := 1; s <= senders; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= each; i++ {
				m.PostUserMessage(inlineNote{s*1_000_000 + i})
			}
		}()
	}
	wg.Wait()
	// Every message is handled: the last sender's leaves none behind
	// (a runner gives up the mailbox under the lock senders claim it with).
	testwait.Eventually(t, "every message handled", func() bool { return len(inv.seen()) == senders*each })
	mu.Lock()
	defer mu.Unlock()
	if maxActive != 1 {
		t.Fatalf("%d goroutines processed the mailbox at once; want 1", maxActive)
	}
}

// A streamed request's route is not decided in its sender's goroutine:
// that goroutine relays the stream for its whole life, and the routing
// would grow its stack for that life. Every other data-plane message may
// run in its sender.
func TestSenderRuns_AStreamedRouteGoesThroughTheDispatcher(t *testing.T) {
	tests := []struct {
		name string
		msg  senderRuns
		want bool
	}{
		{"route of a request that answers whole", &routeMsg{rr: &RouteRequest{}}, true},
		{"route of a streamed request", &routeMsg{rr: &RouteRequest{Streamed: true}}, false},
		{"conclusion", &concludeMsg{}, true},
		{"first byte", firstByteMsg{}, true},
		{"leg result to a breaker", legResult{}, true},
	}
	for _, tt := range tests {
		if got := tt.msg.senderRuns(); got != tt.want {
			t.Errorf("%s: senderRuns %v; want %v", tt.name, got, tt.want)
		}
	}
}

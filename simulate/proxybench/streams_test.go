package proxybench

import (
	"context"
	"testing"
	"time"
)

// The harness itself, in process and direct (no HAProxy, no llbd): every
// stream is read whole, every event's delay recorded.
func TestStreamLoad_ReadsEveryEventDirect(t *testing.T) {
	b, err := listenSSEBackend(backendSpec{Addr: "127.0.0.1:0", Events: 12, Gap: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go b.serve()
	defer b.ln.Close()
	const streams = 6
	streamLen := 11 * 5 * time.Millisecond
	l := newStreamLoad(b.ln.Addr().String(), streams, 12, 30*time.Millisecond, 2*streamLen, streamLen)
	l.run(context.Background())
	if got := l.broken.Load() + l.connErrors.Load(); got != 0 || len(l.statuses) != 0 {
		t.Fatalf("broken or dial errors %d, statuses %v; want none", got, l.statuses)
	}
	if got := l.streamsOK.Load(); got < streams {
		t.Fatalf("streams read whole: %d; want at least %d", got, streams)
	}
	delay, first := l.merged()
	if delay.TotalCount() == 0 || delay.TotalCount() != l.eventsInWin.Load() {
		t.Fatalf("delays recorded %d, events in the window %d; want the same, not zero", delay.TotalCount(), l.eventsInWin.Load())
	}
	if first.TotalCount() == 0 {
		t.Fatal("no first-event delay recorded")
	}
}

func TestEventStamp_ReadsTheLastStamp(t *testing.T) {
	ev := appendEventChunk(nil, 3, 10, 1, 1234567890123)
	for _, tc := range []struct {
		give string
		want int64
		ok   bool
	}{
		{give: string(ev), want: 1234567890123, ok: true},
		{give: `{"x":1}`, ok: false},
	} {
		got, ok := eventStamp([]byte(tc.give))
		if got != tc.want || ok != tc.ok {
			t.Errorf("eventStamp(%q) = %d, %v; want %d, %v", tc.give, got, ok, tc.want, tc.ok)
		}
	}
}

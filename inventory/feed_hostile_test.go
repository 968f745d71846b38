package inventory

import (
	"testing"
	"time"
)

// A publisher that sends one bogus sequence number (a jump of 2³¹, then
// back) costs a gap and a restart; it no longer adds billions to the
// lost-batch count.
func TestFeed_BogusSequenceNumberDoesNotInflateLostBatches(t *testing.T) {
	keys := mustExactHasher(t, "0")
	eng := engine{h: keys}
	pub := newTestPub(t, "")
	h := startFeed(t, FeedConfig{Endpoint: pub.addr}, keys)
	n := h.join(t, pub, 0)
	A := seqTokens(1, 16)
	pub.send(t, n, eng.store(t, A, 0, ExtraKeys{}))
	h.waitSeq(t, n)
	pub.send(t, n+1<<31, eng.store(t, A, 0, ExtraKeys{}))
	h.waitSeq(t, n+1<<31)
	pub.send(t, n+1, eng.store(t, A, 0, ExtraKeys{}))
	if u := h.waitSeq(t, n+1); u.Reset != ResetRestart {
		t.Fatalf("back from the bogus number: reset %v; want restart", u.Reset)
	}
	st := h.feed.Stats()
	if st.Gaps != 1 || st.Restarts != 1 || st.LostBatches > 100_000 {
		t.Fatalf("stats %+v; want 1 gap, 1 restart, lost batches capped (not ~2³¹)", st)
	}
}

// A frame above MaxMsgSize is refused by libzmq before it is allocated: the
// connection drops (counted as a disconnect), and — libzmq does not
// reconnect after a protocol error — the feed dials again itself once the
// reconnect backoff has passed, and goes on with the next batch.
func TestFeed_OversizedMessageIsRefusedAndTheFeedRecovers(t *testing.T) {
	keys := mustExactHasher(t, "0")
	eng := engine{h: keys}
	pub := newTestPub(t, "")
	h := startFeed(t, FeedConfig{Endpoint: pub.addr, MaxMsgSize: 64 << 10,
		ReconnectIvl: 20 * time.Millisecond, ReconnectIvlMax: 200 * time.Millisecond}, keys)
	n := h.join(t, pub, 0)
	A, B := seqTokens(1, 16), seqTokens(100, 16)
	base := h.feed.Stats().Batches
	pub.sendRaw(t, []byte("kv@test"), seq8(n), make([]byte, 1<<20)) // 1 MiB: refused
	h.waitFor(t, "the oversized message drops the connection", func() bool { return h.feed.Stats().Disconnects >= 1 })
	// Publish until the reconnected feed takes a batch again (PUB drops
	// while no subscriber is connected).
	seq := n + 1
	h.waitFor(t, "the feed takes batches again after reconnecting", func() bool {
		pub.send(t, seq, eng.store(t, B, 0, ExtraKeys{}))
		seq++
		return h.feed.Stats().Batches > base
	})
	h.waitFor(t, "B mirrored", func() bool { return h.score(keys, B) == 4 })
	if got := h.score(keys, A); got != 0 {
		t.Fatalf("score of A: %d; want 0 (never stored)", got)
	}
	if st := h.feed.Stats(); st.RecvErrors != 0 {
		t.Fatalf("stats %+v; the refused message never reached the decoder", st)
	}
}

// A message of many frames (each under the size limit) is read frame by
// frame and dropped: the Go side never holds more than maxFrames of it, the
// drop is counted, and the next message is applied.
func TestFeed_AMessageOfManyFramesIsDroppedFrameByFrame(t *testing.T) {
	keys := mustExactHasher(t, "0")
	eng := engine{h: keys}
	pub := newTestPub(t, "")
	h := startFeed(t, FeedConfig{Endpoint: pub.addr}, keys)
	n := h.join(t, pub, 0)
	frames := [][]byte{[]byte("kv@test"), seq8(n)}
	for range 40 {
		frames = append(frames, make([]byte, 64<<10))
	}
	base := h.feed.Stats().RecvErrors
	pub.sendRaw(t, frames...)
	A := seqTokens(1, 16)
	pub.send(t, n+1, eng.store(t, A, 0, ExtraKeys{}))
	h.waitSeq(t, n+1)
	if got := h.feed.Stats().RecvErrors - base; got != 1 {
		t.Fatalf("receive errors +%d; want +1 for the 42-frame message", got)
	}
	if got := h.score(keys, A); got != 4 {
		t.Fatalf("score after the dropped message: %d; want 4", got)
	}
}

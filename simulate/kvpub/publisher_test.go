package kvpub

import (
	"encoding/binary"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
	"go.uber.org/goleak"

	"github.com/llbproject/llb/inventory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func startPub(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	if cfg.Endpoint == "" {
		cfg.Endpoint = "tcp://127.0.0.1:*"
	}
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// subscriber is a SUB socket owned by the test goroutine.
type subscriber struct {
	t *testing.T
	s *zmq.Socket
}

func newSubscriber(t *testing.T, endpoint string) *subscriber {
	t.Helper()
	s, err := zmq.NewSocket(zmq.SUB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.SetLinger(0); _ = s.Close() })
	if err := s.SetSubscribe(""); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRcvtimeo(20 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Connect(endpoint); err != nil {
		t.Fatal(err)
	}
	return &subscriber{t: t, s: s}
}

// recv returns the next message, or nil after a receive timeout.
func (s *subscriber) recv() [][]byte {
	s.t.Helper()
	msg, err := s.s.RecvMessageBytes(0)
	if err != nil {
		if zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) { // receive timeout
			return nil
		}
		s.t.Fatal(err)
	}
	return msg
}

// mustRecv waits (with a deadline) for the next message.
func (s *subscriber) mustRecv() inventory.Frame {
	s.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if msg := s.recv(); msg != nil {
			f, err := inventory.ParseFrame(msg)
			if err != nil {
				s.t.Fatal(err)
			}
			return f
		}
	}
	s.t.Fatal("no message before the deadline")
	return inventory.Frame{}
}

var cleared = []inventory.Event{{Kind: inventory.EventAllBlocksCleared}}

// sync beats the ZMQ slow-joiner: it publishes probe batches until one
// arrives, and returns the sequence number of that probe.
func (s *subscriber) sync(p *Publisher) uint64 {
	s.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := p.Publish(time.Now(), cleared); err != nil {
			s.t.Fatal(err)
		}
		if msg := s.recv(); msg != nil {
			f, err := inventory.ParseFrame(msg)
			if err != nil {
				s.t.Fatal(err)
			}
			// Drain probes already in flight so the next receive is fresh.
			last := f.Seq
			for m := s.recv(); m != nil; m = s.recv() {
				g, err := inventory.ParseFrame(m)
				if err != nil {
					s.t.Fatal(err)
				}
				last = g.Seq
			}
			for p.Stats().NextSeq != last+1 {
				if m := s.recv(); m != nil {
					g, _ := inventory.ParseFrame(m)
					last = g.Seq
				}
				if time.Now().After(deadline) {
					s.t.Fatal("probes never drained")
				}
			}
			return last
		}
	}
	s.t.Fatal("subscriber never joined")
	return 0
}

func storedEvent() inventory.Event {
	h, _ := inventory.NewHasher(inventory.AlgoSHA256CBOR, 16, "0")
	toks := make([]uint32, 32)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	ds, _ := h.AppendDigests(nil, inventory.Digest{}, 0, toks, inventory.ExtraKeys{})
	return inventory.Event{
		Kind:         inventory.EventBlockStored,
		BlockHashes:  []uint64{ds[0].Key(), ds[1].Key()},
		BlockDigests: ds,
		TokenIDs:     toks, BlockSize: 16,
		Medium: "GPU", HasMedium: true,
		ExtraKeys: []any{nil, nil}, HasExtraKeys: true,
		HasGroupIdx: true, SpecKind: "full_attention", HasSpecKind: true,
	}
}

func TestPublisher_SendsTopicSeqAndDecodableBatch(t *testing.T) {
	tests := []struct {
		name      string
		give      Config
		wantFirst byte // msgpack head of the first event
	}{
		{"map layout by default", Config{Topic: "kv@127.0.0.1:8000@m"}, 0x8b},
		{"legacy array layout", Config{Topic: "kv@127.0.0.1:8000@m", Layout: inventory.LayoutArray}, 0x9c},
		{"raw digests", Config{DigestHashes: true, DPRank: 2}, 0x8b},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startPub(t, tt.give)
			sub := newSubscriber(t, p.Endpoint())
			last := sub.sync(p)
			ev := storedEvent()
			ts := time.Unix(1700000000, 500_000_000)
			if err := p.Publish(ts, []inventory.Event{ev}); err != nil {
				t.Fatal(err)
			}
			f := sub.mustRecv()
			if string(f.Topic) != tt.give.Topic || f.Seq != last+1 {
				t.Fatalf("topic %q seq %d; want %q and %d", f.Topic, f.Seq, tt.give.Topic, last+1)
			}
			// [ts float64, [event...], rank]: 0x93 0xcb <8 bytes> 0x91 <event>
			if f.Payload[0] != 0x93 || f.Payload[10] != 0x91 || f.Payload[11] != tt.wantFirst {
				t.Fatalf("payload head % x; want event head %#x", f.Payload[:12], tt.wantFirst)
			}
			b, err := inventory.DecodeBatch(f.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if b.TS != 1700000000.5 || b.DPRank != int64(tt.give.DPRank) || len(b.Events) != 1 || b.Invalid != 0 {
				t.Fatalf("batch ts %v rank %d events %d invalid %d", b.TS, b.DPRank, len(b.Events), b.Invalid)
			}
			got := b.Events[0]
			if !slices.Equal(got.BlockHashes, ev.BlockHashes) || !slices.Equal(got.TokenIDs, ev.TokenIDs) || got.Medium != "GPU" {
				t.Fatalf("decoded %+v; want %+v", got, ev)
			}
			if tt.give.DigestHashes && (len(got.BlockDigests) != 2 || got.BlockDigests[1] != ev.BlockDigests[1]) {
				t.Fatalf("digests %v; want the raw digests", got.BlockDigests)
			}
		})
	}
}

func TestPublisher_EmptyBatchPublishesNothing(t *testing.T) {
	p := startPub(t, Config{})
	if err := p.Publish(time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.NextSeq != 0 || s.Published != 0 {
		t.Fatalf("stats %+v; want nothing sent", s)
	}
}

// dealer is a replay client owned by the test goroutine.
func replay(t *testing.T, endpoint string, request [][]byte) [][][]byte {
	t.Helper()
	d, err := zmq.NewSocket(zmq.DEALER)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.SetLinger(0); _ = d.Close() }()
	if err := d.SetRcvtimeo(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := d.Connect(endpoint); err != nil {
		t.Fatal(err)
	}
	parts := make([]any, len(request))
	for i, r := range request {
		parts[i] = r
	}
	if _, err := d.SendMessage(parts...); err != nil {
		t.Fatal(err)
	}
	var out [][][]byte
	for {
		msg, err := d.RecvMessageBytes(0)
		if err != nil {
			t.Fatalf("replay receive: %v", err)
		}
		out = append(out, msg)
		if len(msg) == 4 && len(msg[3]) == 0 {
			return out
		}
	}
}

func seq8(n uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, n)
	return b
}

func TestPublisher_ReplaysBufferedBatchesFromSeq(t *testing.T) {
	p := startPub(t, Config{Topic: "t", ReplayEndpoint: "tcp://127.0.0.1:*", BufferSteps: 3})
	for range 5 {
		if err := p.Publish(time.Now(), []inventory.Event{storedEvent()}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().NextSeq != 5 {
		if time.Now().After(deadline) {
			t.Fatal("batches never sent")
		}
		time.Sleep(time.Millisecond) // polling a counter with a deadline
	}
	tests := []struct {
		name     string
		start    uint64
		wantSeqs []uint64
	}{
		{"from an old seq gives what the buffer holds", 0, []uint64{2, 3, 4}},
		{"from the middle", 3, []uint64{3, 4}},
		{"from the future gives only the end marker", 9, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := replay(t, p.ReplayEndpoint(), [][]byte{{}, seq8(tt.start)})
			var got []uint64
			for _, m := range msgs[:len(msgs)-1] {
				if len(m) != 4 || len(m[0]) != 0 || string(m[1]) != "t" {
					t.Fatalf("replayed message %q; want [\"\", topic, seq8, payload]", m)
				}
				if _, err := inventory.DecodeBatch(m[3]); err != nil {
					t.Fatal(err)
				}
				got = append(got, binary.BigEndian.Uint64(m[2]))
			}
			if !slices.Equal(got, tt.wantSeqs) {
				t.Fatalf("replayed seqs %v; want %v", got, tt.wantSeqs)
			}
			end := msgs[len(msgs)-1]
			if len(end[1]) != 0 || binary.BigEndian.Uint64(end[2]) != ^uint64(0) {
				t.Fatalf("end marker %q; want [\"\", \"\", ff×8, \"\"]", end)
			}
		})
	}
}

func TestPublisher_IgnoresMalformedReplayRequests(t *testing.T) {
	p := startPub(t, Config{ReplayEndpoint: "tcp://127.0.0.1:*"})
	d, err := zmq.NewSocket(zmq.DEALER)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.SetLinger(0); _ = d.Close() }()
	if err := d.Connect(p.ReplayEndpoint()); err != nil {
		t.Fatal(err)
	}
	if _, err := d.SendMessage("", "short"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.SendMessage("", seq8(0), "extra"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().BadReplayRequests != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v; want 2 bad replay requests counted", p.Stats())
		}
		time.Sleep(time.Millisecond) // polling a counter with a deadline
	}
	// A good request still works afterwards.
	if msgs := replay(t, p.ReplayEndpoint(), [][]byte{{}, seq8(0)}); len(msgs) != 1 {
		t.Fatalf("%d replies; want only the end marker", len(msgs))
	}
}

func TestPublisher_ClosedPublisherRefusesAndFreesThePort(t *testing.T) {
	p, err := Start(Config{Endpoint: "tcp://127.0.0.1:*"})
	if err != nil {
		t.Fatal(err)
	}
	ep := p.Endpoint()
	p.Kill()
	p.Close() // idempotent
	if err := p.Publish(time.Now(), cleared); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after kill: %v; want ErrClosed", err)
	}
	// The same address binds again (a restarted worker).
	q, err := Start(Config{Endpoint: ep})
	if err != nil {
		t.Fatalf("rebind %s: %v", ep, err)
	}
	q.Close()
}

func TestStart_ReportsBadConfigAndBindFailures(t *testing.T) {
	busy := startPub(t, Config{})
	tests := []struct {
		name string
		give Config
		want error
	}{
		{"no transport", Config{Endpoint: "127.0.0.1:5557"}, ErrConfig},
		{"negative hwm", Config{Endpoint: "tcp://127.0.0.1:*", HWM: -1}, ErrConfig},
		{"unknown layout", Config{Endpoint: "tcp://127.0.0.1:*", Layout: 7}, ErrConfig},
		{"address in use", Config{Endpoint: busy.Endpoint(), BindRetry: 20 * time.Millisecond}, ErrBind},
		{"unparsable address", Config{Endpoint: "tcp://not an address"}, ErrBind},
		{"replay address in use", Config{Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: busy.Endpoint(), BindRetry: 20 * time.Millisecond}, ErrBind},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Start(tt.give)
			if !errors.Is(err, tt.want) {
				if p != nil {
					p.Close()
				}
				t.Fatalf("error %v; want %v", err, tt.want)
			}
		})
	}
}

func TestPublish_RefusesEventsTheCodecCannotEncode(t *testing.T) {
	p := startPub(t, Config{DigestHashes: true})
	ev := storedEvent()
	ev.BlockDigests = nil // raw-digest mode needs them
	if err := p.Publish(time.Now(), []inventory.Event{ev}); !errors.Is(err, ErrEncode) {
		t.Fatalf("error %v; want ErrEncode", err)
	}
	if p.Stats().NextSeq != 0 {
		t.Fatal("a refused batch consumed a sequence number")
	}
}

package replica

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llbproject/llb/replica/replicapb"
)

// TrieInsert is one Tier-1 lesson: prompt was routed to endpoint Index
// (address Addr) of Service.
type TrieInsert struct {
	Service string
	Prompt  []byte
	Index   int
	Addr    string
}

// Teacher broadcasts Tier-1 trie inserts to every peer in batches, so
// prefix affinity does not dilute by 1/N replicas. Teach never blocks: it
// copies the prompt into the pending batch, which leaves every
// TeachInterval or when it reaches TeachBatchBytes. Prompts longer than
// TeachMaxPrompt are not taught; when more than TeachMaxPending bytes wait
// (no member, or peers slower than the routing rate), new inserts are
// dropped and counted. Peers receive batches through Config.OnTrie and must
// not teach them on (no echo).
type Teacher struct {
	m *Member

	mu sync.Mutex
	// Guarded by mu.
	pending      []*replicapb.TrieInsert
	pendingBytes int
	kick         chan struct{}

	taught, sent, batches, droppedLong, droppedFull, receivedN atomic.Int64
}

func newTeacher(m *Member) *Teacher {
	return &Teacher{m: m, kick: make(chan struct{}, 1)}
}

// Teach queues one insert (copying prompt).
func (t *Teacher) Teach(ins TrieInsert) {
	if len(ins.Prompt) == 0 || ins.Index < 0 {
		return
	}
	if len(ins.Prompt) > t.m.cfg.TeachMaxPrompt {
		t.droppedLong.Add(1)
		return
	}
	size := len(ins.Prompt) + len(ins.Service) + len(ins.Addr) + 16
	t.mu.Lock()
	if t.pendingBytes+size > t.m.cfg.TeachMaxPending {
		t.mu.Unlock()
		t.droppedFull.Add(1)
		return
	}
	t.pending = append(t.pending, &replicapb.TrieInsert{Service: ins.Service, Prompt: bytes.Clone(ins.Prompt), Endpoint: int32(ins.Index), Addr: ins.Addr})
	t.pendingBytes += size
	full := t.pendingBytes >= t.m.cfg.TeachBatchBytes
	t.mu.Unlock()
	t.taught.Add(1)
	if full {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// flushLoop sends the pending batch every TeachInterval or when kicked.
func (t *Teacher) flushLoop(stop <-chan struct{}) {
	tick := time.NewTicker(t.m.cfg.TeachInterval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		case <-t.kick:
		}
		t.flush()
	}
}

// flush sends what is pending in batches of at most TeachBatchBytes. With
// no member (rejoining) the inserts wait, within TeachMaxPending.
func (t *Teacher) flush() {
	inc := t.m.current()
	if inc == nil {
		return
	}
	for {
		t.mu.Lock()
		if len(t.pending) == 0 {
			t.mu.Unlock()
			return
		}
		n, size := 0, 0
		for n < len(t.pending) && (n == 0 || size+len(t.pending[n].Prompt) <= t.m.cfg.TeachBatchBytes) {
			size += len(t.pending[n].Prompt) + len(t.pending[n].Service) + len(t.pending[n].Addr) + 16
			n++
		}
		batch := t.pending[:n:n]
		t.pending = t.pending[n:]
		t.pendingBytes -= size
		if len(t.pending) == 0 {
			t.pending, t.pendingBytes = nil, 0
		}
		t.mu.Unlock()
		msg := &replicapb.PeerMessage{From: inc.id, Body: &replicapb.PeerMessage_Trie{Trie: &replicapb.TrieBatch{Inserts: batch}}}
		if inc.sendPeers(msg) > 0 {
			t.batches.Add(1)
			t.sent.Add(int64(len(batch)))
		}
	}
}

// received hands a peer's batch to Config.OnTrie.
func (t *Teacher) received(from string, b *replicapb.TrieBatch) {
	t.receivedN.Add(int64(len(b.Inserts)))
	f := t.m.cfg.OnTrie
	if f == nil {
		return
	}
	out := make([]TrieInsert, len(b.Inserts))
	for i, in := range b.Inserts {
		out[i] = TrieInsert{Service: in.Service, Prompt: in.Prompt, Index: int(in.Endpoint), Addr: in.Addr}
	}
	f(from, out)
}

// TeachStats counts teaching since start.
type TeachStats struct {
	Taught, Sent, Batches, DroppedTooLong, DroppedBacklog, Received int64
}

// Stats returns the counters.
func (t *Teacher) Stats() TeachStats {
	return TeachStats{Taught: t.taught.Load(), Sent: t.sent.Load(), Batches: t.batches.Load(),
		DroppedTooLong: t.droppedLong.Load(), DroppedBacklog: t.droppedFull.Load(), Received: t.receivedN.Load()}
}

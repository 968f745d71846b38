package attack

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/llbproject/llb/inventory"
)

// SGLang's dialect of the KV family: pages of kvPageSize tokens keyed by
// SGLang's page hash, SGLang's event layout, and kvRanks data-parallel
// ranks, each its own publisher at kvPort + rank with its own sequence.
// Rank 0 is attacked as vLLM's single publisher is; rank 1 publishes
// honestly beside it (a marker after every case), and must come through
// every case on rank 0 untouched. The SGLang kinds add what only SGLang's
// wire can get wrong: pages of the wrong size, token lists that are not
// whole pages, page hashes that are not the tokens', one rank's port
// publishing another rank's batches and sequence, and a rank whose
// sequence jumps or whose publisher goes silent and restarts.

// kvPeerSeq0 is rank 1's first sequence number: far from rank 0's, so a
// rank that takes the other's sequence is seen to.
const kvPeerSeq0 = 1 << 20

// kvPeer is the honest rank 1's publisher.
type kvPeer struct {
	pub  *zmq.Socket
	addr string
	seq  uint64
	// markers are the keys of the blocks rank 1's markers stored.
	markers []uint64
}

// open binds rank 1's PUB socket (again after a close).
func (p *kvPeer) open() error {
	if p.pub != nil {
		_ = p.pub.Close()
	}
	s, err := bindPub(p.addr)
	p.pub = s
	return err
}

// bindPub binds a PUB socket at addr, retrying for 5 s while the port is
// still held by the socket it replaces.
func bindPub(addr string) (*zmq.Socket, error) {
	s, err := zmq.NewSocket(zmq.PUB)
	if err != nil {
		return nil, err
	}
	_ = s.SetLinger(0)
	_ = s.SetSndhwm(0) // never drop on our side: what llbd buffers is what is measured
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err = s.Bind(addr); err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			_ = s.Close()
			return nil, fmt.Errorf("bind %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// peerSend publishes one message on rank 1.
func (f *kvFamily) peerSend(seq uint64, payload []byte) error {
	_, err := f.peer.pub.SendMessage([]byte{}, seqFrame(seq), payload)
	return err
}

// peerView reads rank 1's feed.
func (f *kvFamily) peerView(ctx context.Context) (feedView, error) {
	rv, err := f.d.inventoryDPRank(ctx, f.service, 0, 1)
	if err != nil {
		return feedView{}, err
	}
	r := rv.Feed
	return feedView{Connected: r.Connected, LastSeq: r.LastSeq, RecvErrors: r.RecvErrors, Batches: r.Batches, Events: r.Events,
		Gaps: r.Gaps, Lost: r.LostBatches, Duplicates: r.Duplicates, Restarts: r.Restarts, Resyncs: r.Resyncs}, nil
}

// peerSync is sync for rank 1: a one-page marker at rank 1's next
// sequence number, published every second until rank 1's feed reports it.
func (f *kvFamily) peerSync(ctx context.Context, within time.Duration) (feedView, error) {
	deadline := time.Now().Add(within)
	for ctx.Err() == nil {
		marker := f.peer.seq
		f.peer.seq++
		ev := f.stored(1)
		f.peer.markers = append(f.peer.markers, ev.BlockHashes[0])
		if err := f.peerSend(marker, f.rankBatch(1, ev)); err != nil {
			return feedView{}, err
		}
		resend := time.Now().Add(time.Second)
		for time.Now().Before(resend) {
			v, err := f.peerView(ctx)
			if err == nil && v.LastSeq != nil && *v.LastSeq == marker {
				time.Sleep(10 * time.Millisecond)
				return f.peerView(ctx)
			}
			if time.Now().After(deadline) {
				return v, fmt.Errorf("rank 1's marker seq %d not mirrored within %v (last seen seq %v, %v)", marker, within, ptrStr(v.LastSeq), err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return feedView{}, ctx.Err()
}

// kinds are the case generators of the run's engine.
func (f *kvFamily) kinds() []kvKind {
	if f.peer == nil {
		return kvKinds
	}
	return append(append([]kvKind(nil), kvKinds...), sglangKinds...)
}

// sglangKinds are the SGLang-only case generators; rank1 marks those that
// act on rank 1, whose oracle reads rank 1's deltas itself.
var sglangKinds = []kvKind{
	{name: "page_size", weight: 8, send: pageSizeCase},
	{name: "page_tokens", weight: 6, send: pageTokensCase},
	{name: "page_hash", weight: 6, send: pageHashCase},
	{name: "rank_field", weight: 4, send: rankFieldCase},
	{name: "rank_seq", weight: 6, send: rankSeqCase},
	{name: "peer_seq_gap", weight: 6, rank1: true, send: peerGapCase},
	{name: "peer_silent", weight: 1, limit: 2, rank1: true, send: peerSilentCase},
	{name: "peer_gone", weight: 1, limit: 1, rank1: true, send: peerGoneCase},
}

// pageRun is a BlockStored event of n pages of size size (its own token
// ids, keyed by SGLang's page hash when size is the rule's page size).
func (f *kvFamily) pageRun(n, size int) inventory.Event {
	tokens := make([]uint32, n*size)
	for i := range tokens {
		tokens[i] = f.block + uint32(i)
	}
	f.block += uint32(len(tokens))
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = uint64(f.block)<<20 | uint64(i) // not a page hash: the engine's word for it
	}
	if size == f.bs {
		keys = f.keys.AppendBlockKeys(keys[:0], tokens, inventory.ExtraKeys{})
	}
	return inventory.Event{Kind: inventory.EventBlockStored, BlockHashes: keys, TokenIDs: tokens, BlockSize: size}
}

// pageSizeCase publishes a run whose block_size is not the rule's page
// size: the hash-contract guard is raised at once (Tier 1.5 falls through), the keys
// are kept as the engine's.
func pageSizeCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	sizes := []int{1, 16, 31, 33, 64, 256}
	size := sizes[rng.IntN(len(sizes))]
	ev := f.pageRun(1+rng.IntN(3), size)
	seq := f.next()
	_ = f.send([]byte{}, seqFrame(seq), f.batch(ev))
	// The guard keeps the reason it was raised for (an earlier case's
	// hash_mismatch) until 16 good runs lower it.
	return func(d delta) Outcome {
		return exactly(fmt.Sprintf("pages of %d tokens under a %d-token page size (one batch, the contract mismatch counted, the guard raised)", size, kvPageSize),
			d.batches == 1 && d.recv == 0 && d.mismatched >= 1 && d.contractReason != "")
	}, fmt.Sprintf("publish seq %d: %d pages with block_size %d (page size %d)", seq, len(ev.BlockHashes), size, kvPageSize), 0
}

// pageTokensCase publishes a run at the right page size whose token list
// is not whole pages: llb cannot re-hash it (unverifiable), keeps the
// engine's keys, and nothing breaks.
func pageTokensCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	ev := f.stored(1 + rng.IntN(3))
	cut := 1 + rng.IntN(f.bs-1)
	what := "short of a page"
	if rng.IntN(2) == 0 {
		ev.TokenIDs = ev.TokenIDs[:len(ev.TokenIDs)-cut]
	} else {
		what = "past a page"
		for i := range cut {
			ev.TokenIDs = append(ev.TokenIDs, f.block+uint32(i))
		}
		f.block += uint32(cut)
	}
	seq := f.next()
	_ = f.send([]byte{}, seqFrame(seq), f.batch(ev))
	return func(d delta) Outcome {
		if d.batches != 1 || d.recv != 0 || d.unverifiable < 1 && d.mismatched < 1 && d.invalid < 1 {
			return defect("%d tokens for %d pages of %d (%s): not decoded as one batch, or taken as verified", len(ev.TokenIDs), len(ev.BlockHashes), kvPageSize, what)
		}
		return accepted()
	}, fmt.Sprintf("publish seq %d: %d page hashes over %d tokens (%d tokens %s)", seq, len(ev.BlockHashes), len(ev.TokenIDs), cut, what), 0
}

// pageHashCase publishes runs whose page hashes are not their tokens':
// as many runs as llb samples one in (contractSampleEvery), so at least
// one is re-hashed and the mismatch counted.
func pageHashCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	const runs = 16
	events := make([]inventory.Event, runs)
	how := []string{"random keys", "vLLM's sha256_cbor keys", "keys of the next page"}[rng.IntN(3)]
	for i := range events {
		ev := f.stored(1)
		switch how {
		case "random keys":
			ev.BlockHashes[0] = rng.Uint64()
		case "vLLM's sha256_cbor keys":
			h, _ := inventory.NewHasher(inventory.AlgoSHA256CBOR, kvPageSize, kvSeed)
			ev.BlockHashes = h.AppendBlockKeys(ev.BlockHashes[:0], ev.TokenIDs, inventory.ExtraKeys{})
		default:
			ev.BlockHashes[0] = f.keys.AppendBlockKeys(nil, append(ev.TokenIDs[1:], f.block), inventory.ExtraKeys{})[0]
		}
		events[i] = ev
	}
	seq := f.next()
	_ = f.send([]byte{}, seqFrame(seq), f.batch(events...))
	return func(d delta) Outcome {
		return exactly(fmt.Sprintf("%d runs whose page hashes are %s (a contract mismatch counted)", runs, how),
			d.batches == 1 && d.recv == 0 && d.mismatched >= 1)
	}, fmt.Sprintf("publish seq %d: %d one-page runs whose page hashes are %s", seq, runs, how), 0
}

// rankFieldCase publishes on rank 0's port a valid batch whose
// data_parallel_rank names another rank: the port is the rank, so it is
// rank 0's batch, and rank 1 sees nothing of it.
func rankFieldCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	ranks := []int64{1, 7, -1, 1 << 40}
	r := ranks[rng.IntN(len(ranks))]
	seq := f.next()
	_ = f.send([]byte{}, seqFrame(seq), f.rankBatch(r, f.stored(1)))
	return func(d delta) Outcome {
		if d.batches != 1 || d.recv != 0 || d.gaps != 0 {
			return defect("a valid batch naming rank %d on rank 0's port was not taken as rank 0's", r)
		}
		return accepted()
	}, fmt.Sprintf("publish seq %d on rank 0's port with data_parallel_rank %d", seq, r), 0
}

// rankSeqCase publishes on rank 0's port at rank 1's last sequence
// number: rank 0's sequence state must judge it (a jump, a repeat or a
// restart of rank 0's own stream), rank 1's must not move.
func rankSeqCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	seq, last := f.peer.seq-1, f.seq-1
	f.seq = max(f.seq, seq+1)
	if seq < last {
		f.seq = seq + 1 // rank 0 restarted at rank 1's number
	}
	_ = f.send([]byte{}, seqFrame(seq), f.batch(f.stored(1)))
	return func(d delta) Outcome {
		switch {
		case seq > last:
			return exactly(fmt.Sprintf("rank 1's seq %d on rank 0 (last %d): one gap", seq, last), d.gaps == 1 && d.batches == 1)
		case seq == last:
			return exactly(fmt.Sprintf("rank 1's seq %d on rank 0 (last %d): one duplicate", seq, last), d.dups == 1 && d.batches == 0)
		}
		return exactly(fmt.Sprintf("rank 1's seq %d on rank 0 (last %d): one restart", seq, last), d.restarts == 1 && d.batches == 1)
	}, fmt.Sprintf("publish seq %d (rank 1's last) on rank 0's port, whose last was %d", seq, last), 0
}

// peerGapCase jumps rank 1's sequence while rank 0 goes on: the gap is
// rank 1's alone.
func peerGapCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	jumps := []uint64{2, 10, 65, 1000}
	j := jumps[rng.IntN(len(jumps))]
	seq := f.peer.seq + j - 1
	f.peer.seq = seq + 1
	_ = f.peerSend(seq, f.rankBatch(1, f.stored(1)))
	return func(d delta) Outcome {
		p := d.peer
		switch {
		case p == nil:
			return defect("no view of rank 1")
		case p.gaps != 1:
			return defect("a jump of %d on rank 1: %d gaps counted there (want 1)", j, p.gaps)
		case j > 65 && p.resyncs < 1:
			return defect("a jump of %d on rank 1 past the 64-batch window did not resync rank 1's mirror", j)
		case d.gaps != 0 || d.restarts != 0 || d.recv != 0:
			return defect("a jump on rank 1 moved rank 0's sequence state")
		}
		return refused()
	}, fmt.Sprintf("publish seq %d on rank 1 (a jump of %d)", seq, j), 0
}

// peerSilentCase closes rank 1's publisher, leaves it silent while rank 0
// publishes on, then binds it again from sequence 0 as a restarted rank
// does: rank 1 counts the restart, rank 0 nothing.
func peerSilentCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	// As in pubRestartCase, rank 1 first gets past restartFloor.
	for f.peer.seq < restartFloor {
		_ = f.peerSend(f.peer.seq, f.rankBatch(1, f.stored(1)))
		f.peer.seq++
	}
	if _, err := f.peerSync(context.Background(), kvRecover); err != nil {
		return func(delta) Outcome { return defect("rank 1 did not mirror its batches before going silent: %v", err) }, "", 0
	}
	_ = f.peer.pub.Close()
	f.peer.pub = nil
	silent := time.Duration(1+rng.IntN(3)) * time.Second
	for end := time.Now().Add(silent); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		_ = f.send([]byte{}, seqFrame(f.next()), f.batch(f.stored(1)))
	}
	err := f.peer.open()
	f.peer.seq = 0
	return func(d delta) Outcome {
		p := d.peer
		switch {
		case err != nil:
			return defect("rebinding rank 1: %v", err)
		case p == nil:
			return defect("no view of rank 1")
		case p.restarts < 1 && p.gaps < 1:
			return defect("rank 1 silent %v then restarted at seq 0: no restart counted on rank 1", silent)
		case d.gaps != 0 || d.restarts != 0 || d.recv != 0:
			return defect("rank 1's silence and restart moved rank 0's sequence state")
		}
		return accepted()
	}, fmt.Sprintf("close rank 1's publisher, publish on rank 0 for %v, bind rank 1 again from seq 0", silent), kvRecover
}

// kvRankGone bounds how long a closed rank's blocks may keep counting: the
// ZMTP heartbeat's three silent intervals (6 s) plus llbd's 15 s
// SilentAfter, with room for a loaded machine.
const kvRankGone = 40 * time.Second

// peerGoneCase closes rank 1's publisher for good while rank 0 publishes
// on: once rank 1's feed has been disconnected for SilentAfter its mirror
// must be dropped (a dead rank must not keep the endpoint's inventory
// alive), rank 0's kept. Then rank 1 comes back from sequence 0.
func peerGoneCase(f *kvFamily, rng *rand.Rand) (func(delta) Outcome, string, time.Duration) {
	ctx := context.Background()
	before, _ := f.d.inventoryDPRank(ctx, f.service, 0, 1)
	_ = f.peer.pub.Close()
	f.peer.pub = nil
	start := time.Now()
	var r0, r1 rankView
	var err error
	for time.Since(start) < kvRankGone {
		_ = f.send([]byte{}, seqFrame(f.next()), f.batch(f.stored(1)))
		if r1, err = f.d.inventoryDPRank(ctx, f.service, 0, 1); err == nil && r1.Blocks == 0 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	gone := time.Since(start)
	r0, err0 := f.d.inventoryRank(ctx, f.service, 0)
	rebind := f.peer.open()
	f.peer.seq = 0
	return func(d delta) Outcome {
		switch {
		case rebind != nil:
			return defect("rebinding rank 1: %v", rebind)
		case before.Blocks == 0:
			return defect("rank 1 held no blocks before it went silent")
		case err != nil || r1.Blocks != 0:
			return defect("rank 1 silent for %v still counts %d blocks for the endpoint (%v)", gone.Round(time.Second), r1.Blocks, err)
		case err0 != nil || r0.Blocks == 0:
			return defect("rank 1's silence dropped rank 0's blocks too (%d left, %v)", r0.Blocks, err0)
		}
		return refused()
	}, fmt.Sprintf("close rank 1's publisher (it held %d blocks), publish on rank 0 until rank 1's blocks stop counting (bound %v), bind rank 1 again from seq 0", before.Blocks, kvRankGone), kvRecover
}

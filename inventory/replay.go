package inventory

import (
	"context"
	"encoding/binary"
	"fmt"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// replayEnd is the sequence number vLLM sends in its replay end marker
// (the 8-byte signed -1).
const replayEnd = ^uint64(0)

// maxReplayBatches bounds the gaps replay is asked to fill; vLLM buffers
// 10000 batches by default, so a larger gap cannot be filled anyway.
const maxReplayBatches = 1 << 20

// parseReplayReply reads one reply message as a DEALER receives it, in
// either generation of vllm-contract.md §1.6: ["", seq8, payload] or
// ["", topic, seq8, payload]. end is true for the end marker (seq -1 or an
// empty payload).
func parseReplayReply(parts [][]byte) (seq uint64, payload []byte, end bool, err error) {
	if len(parts) > 0 && len(parts[0]) == 0 {
		parts = parts[1:]
	}
	switch len(parts) {
	case 2:
	case 3:
		parts = parts[1:] // drop the topic
	default:
		return 0, nil, false, fmt.Errorf("replay reply of %d frames: %w", len(parts), ErrMalformed)
	}
	if len(parts[0]) != 8 {
		return 0, nil, false, fmt.Errorf("replay seq frame of %d bytes: %w", len(parts[0]), ErrMalformed)
	}
	seq = binary.BigEndian.Uint64(parts[0])
	if seq == replayEnd || len(parts[1]) == 0 {
		return seq, nil, true, nil
	}
	return seq, parts[1], false, nil
}

// replay asks the publisher's ROUTER for every batch from `from` on and
// hands the decoded batches of [from, to) to deliver, in order, as they
// arrive. It returns the first sequence number it could not deliver (to on
// success) and fails (ErrReplay or ErrTimeout) unless all of them arrive
// before the end marker and within ReplayTimeout. The DEALER socket lives
// only for this call, so a late reply can never be taken for the next
// replay's.
func (f *Feed) replay(ctx context.Context, zctx *zmq.Context, from, to uint64, deliver func(seq uint64, b *Batch)) (uint64, error) {
	next := from
	if to-from > maxReplayBatches {
		return next, fmt.Errorf("gap of %d batches exceeds %d: %w", to-from, maxReplayBatches, ErrReplay)
	}
	dealer, err := zctx.NewSocket(zmq.DEALER)
	if err != nil {
		return next, fmt.Errorf("replay socket: %w: %w", ErrReplay, err)
	}
	defer closeSocket(dealer)
	if err := dealer.SetLinger(0); err != nil {
		return next, fmt.Errorf("replay linger: %w: %w", ErrReplay, err)
	}
	if err := dealer.SetMaxmsgsize(int64(f.cfg.MaxMsgSize)); err != nil {
		return next, fmt.Errorf("replay maxmsgsize: %w: %w", ErrReplay, err)
	}
	if err := dealer.Connect(f.cfg.ReplayEndpoint); err != nil {
		return next, fmt.Errorf("replay connect %s: %w: %w", f.cfg.ReplayEndpoint, ErrReplay, err)
	}
	// DEALER queues the request until the connection is up.
	if _, err := dealer.SendMessageDontwait([]byte{}, binary.BigEndian.AppendUint64(nil, from)); err != nil {
		return next, fmt.Errorf("replay request: %w: %w", ErrReplay, err)
	}
	deadline := time.Now().Add(f.cfg.ReplayTimeout)
	poller := zmq.NewPoller()
	poller.Add(dealer, zmq.POLLIN)
	for {
		if err := ctx.Err(); err != nil {
			return next, fmt.Errorf("replay: %w: %w", ErrReplay, err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return next, fmt.Errorf("replay of seq %d..%d stopped at %d: %w", from, to-1, next, ErrTimeout)
		}
		if _, err := poller.Poll(min(left, f.cfg.PollInterval)); err != nil {
			return next, fmt.Errorf("replay poll: %w: %w", ErrReplay, err)
		}
		for {
			parts, err := recvMessage(dealer, zmq.DONTWAIT)
			if err != nil {
				if zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) {
					break
				}
				return next, fmt.Errorf("replay receive: %w: %w", ErrReplay, err)
			}
			seq, payload, end, err := parseReplayReply(parts)
			if err != nil {
				return next, fmt.Errorf("replay: %w", err)
			}
			if end {
				if next < to {
					return next, fmt.Errorf("replay of seq %d..%d ended at %d (publisher buffer too short?): %w", from, to-1, next, ErrReplay)
				}
				return next, nil
			}
			if seq < next || seq >= to {
				continue // already delivered, or the live stream delivers it
			}
			if seq != next {
				return next, fmt.Errorf("replay skipped seq %d (got %d): %w", next, seq, ErrReplay)
			}
			b := f.decode(Frame{Seq: seq, Payload: payload})
			if b == nil {
				return next, fmt.Errorf("replayed seq %d is malformed: %w", seq, ErrReplay)
			}
			deliver(seq, b)
			next++
		}
	}
}

package inventory

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Frame is one live KV-event message: [topic, seq (8 bytes BE), payload].
type Frame struct {
	// Topic is frame 0, verbatim (often empty).
	Topic []byte
	// Seq is the publisher's batch counter (starts at 0, resets on restart).
	Seq uint64
	// Payload is the msgpack EventBatch.
	Payload []byte
}

// ParseFrame validates a received multipart message. The returned Frame
// aliases parts.
func ParseFrame(parts [][]byte) (Frame, error) {
	if len(parts) != 3 {
		return Frame{}, fmt.Errorf("kv event message of %d frames (want 3: topic, seq, payload): %w", len(parts), ErrMalformed)
	}
	if len(parts[1]) != 8 {
		return Frame{}, fmt.Errorf("seq frame of %d bytes (want 8): %w", len(parts[1]), ErrMalformed)
	}
	return Frame{Topic: parts[0], Seq: binary.BigEndian.Uint64(parts[1]), Payload: parts[2]}, nil
}

// DecodeBatch decodes a msgpack EventBatch into a new Batch.
func DecodeBatch(payload []byte) (*Batch, error) {
	b := &Batch{}
	if err := b.Decode(payload); err != nil {
		return nil, err
	}
	return b, nil
}

// Decode replaces b's contents with the EventBatch in payload, reusing b's
// storage (steady-state decoding allocates only for unusual extra keys and
// non-GPU media). The envelope may be an array [ts, events, dp_rank?, ...]
// or a map {ts, events, data_parallel_rank}; each event a legacy tagged array
// or a tagged map. Bad events are dropped and counted in Invalid; unknown
// tags in Unknown. An error (wrapping ErrMalformed) means the payload itself
// is unusable, and b then holds no events.
func (b *Batch) Decode(payload []byte) error {
	b.reset()
	r := mpReader{b: payload}
	err := b.decodeEnvelope(&r)
	if err == nil && r.remaining() != 0 {
		err = fmt.Errorf("%d trailing bytes after the batch: %w", r.remaining(), ErrMalformed)
	}
	if err != nil {
		b.reset()
		if errors.Is(err, errWrongType) {
			err = fmt.Errorf("batch envelope: %w: %w", ErrMalformed, err)
		}
		return fmt.Errorf("decode kv event batch: %w", err)
	}
	b.finish()
	return nil
}

// decodeEnvelope reads the outer array or map.
func (b *Batch) decodeEnvelope(r *mpReader) error {
	if n, err := r.arrayLen(); err == nil {
		if n < 2 {
			return fmt.Errorf("batch array of %d elements (want >= 2): %w", n, ErrMalformed)
		}
		if err := b.decodeTS(r); err != nil {
			return err
		}
		if err := b.decodeEvents(r); err != nil {
			return err
		}
		if n >= 3 {
			if err := b.decodeRank(r); err != nil {
				return err
			}
		}
		return r.skipN(n-3, 0)
	} else if !errors.Is(err, errWrongType) {
		return err
	}
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	sawEvents := false
	for k := 0; k < n; k++ {
		key, err := r.str()
		if err != nil {
			return fmt.Errorf("batch map key: %w", err)
		}
		switch string(key) {
		case "ts":
			err = b.decodeTS(r)
		case "events":
			sawEvents = true
			err = b.decodeEvents(r)
		case "data_parallel_rank":
			err = b.decodeRank(r)
		default:
			err = r.skip()
		}
		if err != nil {
			return err
		}
	}
	if !sawEvents {
		return fmt.Errorf("batch map without events: %w", ErrMalformed)
	}
	return nil
}

func (b *Batch) decodeTS(r *mpReader) error {
	if r.tryNil() {
		return nil
	}
	ts, err := r.float()
	if err != nil {
		return fmt.Errorf("batch ts: %w", err)
	}
	b.TS = ts
	return nil
}

func (b *Batch) decodeRank(r *mpReader) error {
	if r.tryNil() {
		return nil
	}
	v, err := r.int64v()
	if err != nil {
		return fmt.Errorf("batch data_parallel_rank: %w", err)
	}
	b.DPRank, b.HasDPRank = v, true
	return nil
}

func (b *Batch) decodeEvents(r *mpReader) error {
	n, err := r.arrayLen()
	if err != nil {
		return fmt.Errorf("batch events: %w", err)
	}
	b.Events = slices.Grow(b.Events, n)
	b.spans = slices.Grow(b.spans, n)
	if cap(b.hashes) == 0 {
		// A fresh Batch: size the storage from the payload once rather
		// than growing it block by block (a stored block takes at least
		// ~20 payload bytes with its tokens; a token 1 to 5).
		b.hashes = make([]uint64, 0, len(r.b)/20+4)
		b.tokens = make([]uint32, 0, len(r.b)/3+16)
	}
	for k := 0; k < n; k++ {
		if err := b.decodeEvent(r); err != nil {
			return err
		}
	}
	return nil
}

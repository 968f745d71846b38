package inventory

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// This file decodes one KV event, in either layout, into an Event whose
// slices live in the Batch's storage.

// eventDecoder carries one event's state while its fields are read.
type eventDecoder struct {
	b      *Batch
	ev     Event
	span   eventSpan
	tag    []byte
	hasTag bool
	// sawHashes: block_hashes was present (possibly empty)
	sawHashes bool
	invalid   error
}

// fail records the first semantic problem; the event will be dropped.
func (d *eventDecoder) fail(f fieldID, err error) {
	if d.invalid == nil {
		d.invalid = fmt.Errorf("%s: %w", f, err)
	}
}

// decodeEvent reads one event (array or map) and appends it if valid.
func (b *Batch) decodeEvent(r *mpReader) error {
	d := eventDecoder{b: b}
	d.span = eventSpan{h0: len(b.hashes), d0: len(b.digests), t0: len(b.tokens), x0: len(b.extras)}
	d.span.h1, d.span.d1, d.span.t1, d.span.x1 = d.span.h0, d.span.d0, d.span.t0, d.span.x0
	c, err := r.peek()
	if err != nil {
		return err
	}
	switch {
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		err = d.decodeArrayEvent(r)
	case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
		err = d.decodeMapEvent(r)
	default:
		d.fail(fieldUnknown, fmt.Errorf("msgpack code 0x%02x is neither array nor map: %w", c, ErrMalformed))
		err = r.skip()
	}
	if err != nil {
		return err
	}
	kind := kindOf(d.tag)
	switch {
	case d.invalid == nil && !d.hasTag:
		d.fail(fieldUnknown, fmt.Errorf("event without a tag: %w", ErrMalformed))
	case d.invalid == nil && kind == 0:
		b.rollback(d.span)
		if b.Unknown == 0 {
			b.UnknownTag = tagName(d.tag)
		}
		b.Unknown++
		return nil
	case d.invalid == nil && kind != EventAllBlocksCleared && !d.sawHashes:
		d.fail(fieldBlockHashes, fmt.Errorf("missing: %w", ErrMalformed))
	}
	if d.invalid != nil {
		b.rollback(d.span)
		b.Invalid++
		if b.InvalidErr == nil {
			b.InvalidErr = fmt.Errorf("%s event: %w", tagName(d.tag), d.invalid)
		}
		return nil
	}
	d.ev.Kind = kind
	b.Events = append(b.Events, d.ev)
	b.spans = append(b.spans, d.span)
	return nil
}

// tagName renders a tag for error messages.
func tagName(tag []byte) string {
	if len(tag) == 0 {
		return "untagged"
	}
	if len(tag) > 40 {
		return fmt.Sprintf("%q...", tag[:40])
	}
	return fmt.Sprintf("%q", tag)
}

// rollback discards storage appended for a dropped event.
func (b *Batch) rollback(s eventSpan) {
	b.hashes = b.hashes[:s.h0]
	b.digests = b.digests[:s.d0]
	b.tokens = b.tokens[:s.t0]
	clear(b.extras[s.x0:])
	b.extras = b.extras[:s.x0]
}

// finish points every event's slices into the (now stable) storage.
func (b *Batch) finish() {
	for i := range b.Events {
		s := b.spans[i]
		ev := &b.Events[i]
		ev.BlockHashes = b.hashes[s.h0:s.h1:s.h1]
		if s.d1 > s.d0 {
			ev.BlockDigests = b.digests[s.d0:s.d1:s.d1]
		} else {
			ev.BlockDigests = nil
		}
		if ev.Kind == EventBlockStored {
			ev.TokenIDs = b.tokens[s.t0:s.t1:s.t1]
		}
		if ev.HasExtraKeys {
			ev.ExtraKeys = b.extras[s.x0:s.x1:s.x1]
		}
	}
}

// decodeArrayEvent reads ["Tag", f1, f2, ...].
func (d *eventDecoder) decodeArrayEvent(r *mpReader) error {
	n, err := r.arrayLen()
	if err != nil {
		return err
	}
	if n == 0 {
		d.fail(fieldUnknown, fmt.Errorf("empty array: %w", ErrMalformed))
		return nil
	}
	tag, err := r.str()
	if errors.Is(err, errWrongType) {
		d.fail(fieldUnknown, fmt.Errorf("not a string: %w", ErrMalformed))
		return r.skipN(n, 0)
	}
	if err != nil {
		return err
	}
	d.tag, d.hasTag = tag, true
	kind := kindOf(tag)
	for k := 1; k < n; k++ {
		if f := legacyField(kind, k); f != fieldUnknown {
			if err := d.field(r, f); err != nil {
				return err
			}
			continue
		}
		if err := r.skip(); err != nil {
			return err
		}
	}
	return nil
}

// decodeMapEvent reads {"type": "Tag", key: value, ...}.
func (d *eventDecoder) decodeMapEvent(r *mpReader) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for k := 0; k < n; k++ {
		key, err := r.str()
		if errors.Is(err, errWrongType) {
			if err := r.skipN(2, 0); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if string(key) == "type" {
			tag, err := r.str()
			if errors.Is(err, errWrongType) {
				d.fail(fieldUnknown, fmt.Errorf("not a string: %w", ErrMalformed))
				err = r.skip()
			}
			if err != nil {
				return err
			}
			d.tag, d.hasTag = tag, true
			continue
		}
		if err := d.field(r, mapField(key)); err != nil {
			return err
		}
	}
	return nil
}

// field reads one field; unknown fields are skipped. Only structural
// errors are returned; type problems mark the event invalid.
func (d *eventDecoder) field(r *mpReader, f fieldID) error {
	var err error
	switch f {
	case fieldBlockHashes:
		err = d.hashes(r)
	case fieldParent:
		err = d.parent(r)
	case fieldTokenIDs:
		err = d.tokenIDs(r)
	case fieldBlockSize:
		var v int64
		var ok bool
		if v, ok, err = d.optInt(r, f); ok {
			if v < 0 || v > math.MaxInt32 {
				d.fail(f, fmt.Errorf("%d out of range: %w", v, ErrMalformed))
			}
			d.ev.BlockSize = int(v)
		}
	case fieldLoRAID:
		d.ev.LoRAID, d.ev.HasLoRAID, err = d.optInt(r, f)
	case fieldGroupIdx:
		d.ev.GroupIdx, d.ev.HasGroupIdx, err = d.optInt(r, f)
	case fieldSlidingWindow:
		d.ev.SlidingWindow, d.ev.HasSlidingWindow, err = d.optInt(r, f)
	case fieldMedium:
		d.ev.Medium, d.ev.HasMedium, err = d.optStr(r, f)
	case fieldLoRAName:
		if r.isMap() {
			err = d.metadata(r) // SGLang's BlockStoredWithMetadata
			break
		}
		d.ev.LoRAName, d.ev.HasLoRAName, err = d.optStr(r, f)
	case fieldMetadata:
		err = d.metadata(r)
	case fieldSpecKind:
		d.ev.SpecKind, d.ev.HasSpecKind, err = d.optStr(r, f)
	case fieldExtraKeys:
		err = d.extraKeys(r)
	default:
		err = r.skip()
	}
	return err
}

// recover turns a type mismatch into an invalid event and skips the value.
func (d *eventDecoder) recover(r *mpReader, f fieldID, err error) error {
	if errors.Is(err, errWrongType) {
		d.fail(f, fmt.Errorf("%w: %w", ErrMalformed, err))
		return r.skip()
	}
	return err
}

func (d *eventDecoder) optInt(r *mpReader, f fieldID) (int64, bool, error) {
	if r.tryNil() {
		return 0, false, nil
	}
	v, err := r.int64v()
	if err != nil {
		return 0, false, d.recover(r, f, err)
	}
	return v, true, nil
}

func (d *eventDecoder) optStr(r *mpReader, f fieldID) (string, bool, error) {
	if r.tryNil() {
		return "", false, nil
	}
	s, err := r.str()
	if err != nil {
		return "", false, d.recover(r, f, err)
	}
	// The common values are interned so a GPU event allocates nothing.
	switch string(s) {
	case MediumGPU:
		return MediumGPU, true, nil
	case "gpu":
		return "gpu", true, nil
	case MediumCPU:
		return MediumCPU, true, nil
	case SpecFullAttention:
		return SpecFullAttention, true, nil
	}
	return string(s), true, nil
}

// metadata reads SGLang's BlockStored metadata map ({"cache_salt": str});
// other keys are skipped, nil is no metadata.
func (d *eventDecoder) metadata(r *mpReader) error {
	if r.tryNil() {
		return nil
	}
	n, err := r.mapLen()
	if err != nil {
		return d.recover(r, fieldMetadata, err)
	}
	for k := 0; k < n; k++ {
		key, err := r.str()
		if errors.Is(err, errWrongType) {
			if err := r.skipN(2, 0); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if string(key) != "cache_salt" {
			if err := r.skip(); err != nil {
				return err
			}
			continue
		}
		if d.ev.CacheSalt, d.ev.HasCacheSalt, err = d.optStr(r, fieldMetadata); err != nil {
			return err
		}
	}
	return nil
}

// hash reads one block hash: any msgpack int (its 64-bit pattern) or a bin of
// at least 8 bytes (last 8 bytes big-endian; the full digest kept if <= 32).
func (d *eventDecoder) hash(r *mpReader, f fieldID) (key uint64, dig Digest, isBin bool, err error) {
	u, _, err := r.integer()
	if err == nil {
		return u, Digest{}, false, nil
	}
	if !errors.Is(err, errWrongType) {
		return 0, Digest{}, false, err
	}
	raw, err := r.bin()
	if errors.Is(err, errWrongType) {
		return 0, Digest{}, false, d.recover(r, f, err)
	}
	if err != nil {
		return 0, Digest{}, false, err
	}
	if len(raw) < 8 {
		d.fail(f, fmt.Errorf("hash of %d bytes (want >= 8): %w", len(raw), ErrMalformed))
		return 0, Digest{}, true, nil
	}
	if len(raw) <= MaxDigestSize {
		dig, _ = DigestFromBytes(raw)
	}
	return KeyFromBytes(raw), dig, true, nil
}

func (d *eventDecoder) hashes(r *mpReader) error {
	const name = fieldBlockHashes
	n, err := r.arrayLen()
	if err != nil {
		return d.recover(r, name, err)
	}
	b := d.b
	b.hashes = slices.Grow(b.hashes[:d.span.h0], n)
	b.digests = b.digests[:d.span.d0]
	anyBin := false
	for k := 0; k < n; k++ {
		key, dig, isBin, err := d.hash(r, name)
		if err != nil {
			return err
		}
		if isBin && !anyBin {
			anyBin = true
			for j := 0; j < k; j++ {
				b.digests = append(b.digests, Digest{})
			}
		}
		if anyBin {
			b.digests = append(b.digests, dig)
		}
		b.hashes = append(b.hashes, key)
	}
	d.span.h1, d.span.d1 = len(b.hashes), len(b.digests)
	d.sawHashes = true
	return nil
}

func (d *eventDecoder) parent(r *mpReader) error {
	if r.tryNil() {
		return nil
	}
	key, dig, _, err := d.hash(r, fieldParent)
	if err != nil {
		return err
	}
	d.ev.Parent, d.ev.ParentDigest, d.ev.HasParent = key, dig, true
	return nil
}

func (d *eventDecoder) tokenIDs(r *mpReader) error {
	const name = fieldTokenIDs
	if r.tryNil() {
		return nil
	}
	n, err := r.arrayLen()
	if err != nil {
		return d.recover(r, name, err)
	}
	b := d.b
	b.tokens = b.tokens[:d.span.t0]
	b.tokens = growUint32(b.tokens, n)
	for k := 0; k < n; k++ {
		// Fast path for the shortest unsigned forms.
		if r.i < len(r.b) {
			if c := r.b[r.i]; c <= 0x7f {
				r.i++
				b.tokens = append(b.tokens, uint32(c))
				continue
			}
		}
		u, neg, err := r.integer()
		if err != nil {
			if err = d.recover(r, name, err); err != nil {
				return err
			}
			continue
		}
		if neg || u > math.MaxUint32 {
			d.fail(name, fmt.Errorf("token id %d out of range: %w", int64(u), ErrMalformed))
			continue
		}
		b.tokens = append(b.tokens, uint32(u))
	}
	d.span.t1 = len(b.tokens)
	return nil
}

// growUint32 makes room for n more elements.
func growUint32(s []uint32, n int) []uint32 {
	if cap(s)-len(s) >= n {
		return s
	}
	out := make([]uint32, len(s), 2*cap(s)+n)
	copy(out, s)
	return out
}

func (d *eventDecoder) extraKeys(r *mpReader) error {
	const name = fieldExtraKeys
	if r.tryNil() {
		return nil
	}
	n, err := r.arrayLen()
	if err != nil {
		return d.recover(r, name, err)
	}
	b := d.b
	clear(b.extras[d.span.x0:])
	b.extras = b.extras[:d.span.x0]
	for k := 0; k < n; k++ {
		if r.tryNil() {
			b.extras = append(b.extras, nil)
			continue
		}
		v, err := r.value(0)
		if errors.Is(err, errWrongType) {
			// already consumed: an ext or non-string map key inside
			d.fail(name, fmt.Errorf("unsupported value: %w", ErrMalformed))
			err = nil
		}
		if err != nil {
			return err
		}
		b.extras = append(b.extras, v)
	}
	d.span.x1 = len(b.extras)
	d.ev.HasExtraKeys = true
	return nil
}

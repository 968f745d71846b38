package ladder

import (
	"encoding/binary"
	"math/bits"
)

// XXH64 (the 64-bit xxHash, spec v0.1.1), written out so that ladder stays
// stdlib-only. Keys hashed with it are stable across processes, machines and
// replicas: CHWBL ring points, modulo placement and session shard placement
// all agree everywhere.

const (
	xxPrime1 uint64 = 0x9E3779B185EBCA87
	xxPrime2 uint64 = 0xC2B2AE3D27D4EB4F
	xxPrime3 uint64 = 0x165667B19E3779F9
	xxPrime4 uint64 = 0x85EBCA77C2B2AE63
	xxPrime5 uint64 = 0x27D4EB2F165667C5
)

// Digest64 is a streaming XXH64 state. The zero value is not ready; call
// Reset first. It never allocates.
type Digest64 struct {
	v1, v2, v3, v4 uint64
	seed           uint64
	total          uint64
	mem            [32]byte
	n              int // bytes buffered in mem
}

// Reset starts a new hash with seed.
func (d *Digest64) Reset(seed uint64) {
	d.seed = seed
	d.v1 = seed + xxPrime1 + xxPrime2
	d.v2 = seed + xxPrime2
	d.v3 = seed
	d.v4 = seed - xxPrime1
	d.total = 0
	d.n = 0
}

func xxRound(acc, input uint64) uint64 {
	acc += input * xxPrime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * xxPrime1
}

func xxMerge(acc, val uint64) uint64 {
	val = xxRound(0, val)
	acc ^= val
	return acc*xxPrime1 + xxPrime4
}

// Write absorbs b.
func (d *Digest64) Write(b []byte) {
	d.total += uint64(len(b))
	if d.n+len(b) < 32 {
		d.n += copy(d.mem[d.n:], b)
		return
	}
	if d.n > 0 {
		c := copy(d.mem[d.n:], b)
		b = b[c:]
		d.stripe(d.mem[:])
		d.n = 0
	}
	for len(b) >= 32 {
		d.stripe(b[:32])
		b = b[32:]
	}
	d.n = copy(d.mem[:], b)
}

// WriteString absorbs s without converting it to a byte slice.
func (d *Digest64) WriteString(s string) {
	for len(s) > 0 {
		var chunk [64]byte
		n := copy(chunk[:], s)
		d.Write(chunk[:n])
		s = s[n:]
	}
}

func (d *Digest64) stripe(b []byte) {
	d.v1 = xxRound(d.v1, binary.LittleEndian.Uint64(b[0:]))
	d.v2 = xxRound(d.v2, binary.LittleEndian.Uint64(b[8:]))
	d.v3 = xxRound(d.v3, binary.LittleEndian.Uint64(b[16:]))
	d.v4 = xxRound(d.v4, binary.LittleEndian.Uint64(b[24:]))
}

// Sum64 returns the hash of everything written since Reset. It does not
// change the state.
func (d *Digest64) Sum64() uint64 {
	var h uint64
	if d.total >= 32 {
		h = bits.RotateLeft64(d.v1, 1) + bits.RotateLeft64(d.v2, 7) +
			bits.RotateLeft64(d.v3, 12) + bits.RotateLeft64(d.v4, 18)
		h = xxMerge(h, d.v1)
		h = xxMerge(h, d.v2)
		h = xxMerge(h, d.v3)
		h = xxMerge(h, d.v4)
	} else {
		h = d.seed + xxPrime5
	}
	h += d.total
	b := d.mem[:d.n]
	for ; len(b) >= 8; b = b[8:] {
		h ^= xxRound(0, binary.LittleEndian.Uint64(b))
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	}
	if len(b) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(b)) * xxPrime1
		h = bits.RotateLeft64(h, 23)*xxPrime2 + xxPrime3
		b = b[4:]
	}
	for _, c := range b {
		h ^= uint64(c) * xxPrime5
		h = bits.RotateLeft64(h, 11) * xxPrime1
	}
	h ^= h >> 33
	h *= xxPrime2
	h ^= h >> 29
	h *= xxPrime3
	h ^= h >> 32
	return h
}

// XXH64 hashes b with seed.
func XXH64(b []byte, seed uint64) uint64 {
	var d Digest64
	d.Reset(seed)
	d.Write(b)
	return d.Sum64()
}

// XXH64String hashes s with seed without allocating.
func XXH64String(s string, seed uint64) uint64 {
	var d Digest64
	d.Reset(seed)
	d.WriteString(s)
	return d.Sum64()
}

// PrefixKey is what a CHWBL/modulo prefix hash covers. Empty fields are
// allowed; fields are length-framed, so ("ab","c") and ("a","bc") differ.
type PrefixKey struct {
	// Model is the requested model name.
	Model string
	// Prefix is the extracted prompt prefix (e.g. the system prompt and the
	// leading messages).
	Prefix []byte
	// LoRA is the adapter name, if any.
	LoRA string
	// CacheSalt is the request's cache_salt, if any.
	CacheSalt string
}

// PrefixHash hashes a PrefixKey with XXH64 (seed 0) over the framing
//
//	"llb-prefix-v1" | len(model) model | len(prefix) prefix | len(lora) lora | len(salt) salt
//
// (lengths as 8-byte little-endian). The result is stable across processes
// and replicas; the gateway calls it and puts the value in
// Request.PrefixHash. Changing the framing is a breaking change: bump the
// version tag. It does not allocate.
func PrefixHash(k *PrefixKey) uint64 {
	var d Digest64
	d.Reset(0)
	d.WriteString("llb-prefix-v1")
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(k.Model)))
	d.Write(n[:])
	d.WriteString(k.Model)
	binary.LittleEndian.PutUint64(n[:], uint64(len(k.Prefix)))
	d.Write(n[:])
	d.Write(k.Prefix)
	binary.LittleEndian.PutUint64(n[:], uint64(len(k.LoRA)))
	d.Write(n[:])
	d.WriteString(k.LoRA)
	binary.LittleEndian.PutUint64(n[:], uint64(len(k.CacheSalt)))
	d.Write(n[:])
	d.WriteString(k.CacheSalt)
	return d.Sum64()
}

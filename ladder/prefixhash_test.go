package ladder

import (
	"bytes"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestXXH64_MatchesReferenceImplementation(t *testing.T) {
	var data []byte
	for i := 0; i < 300; i++ {
		data = append(data, byte(i*7+3))
	}
	for n := 0; n <= len(data); n++ {
		give := data[:n]
		if got, want := XXH64(give, 0), xxhash.Sum64(give); got != want {
			t.Fatalf("XXH64(len %d) = %#x; want %#x", n, got, want)
		}
		if got, want := XXH64String(string(give), 0), xxhash.Sum64String(string(give)); got != want {
			t.Fatalf("XXH64String(len %d) = %#x; want %#x", n, got, want)
		}
	}
}

func TestXXH64_KnownVectors(t *testing.T) {
	tests := []struct {
		give string
		seed uint64
		want uint64
	}{
		{give: "", seed: 0, want: 0xEF46DB3751D8E999},
		{give: "a", seed: 0, want: 0xD24EC4F1A98C6E5B},
		{give: "abc", seed: 0, want: 0x44BC2CF5AD770999},
	}
	for _, tt := range tests {
		if got := XXH64([]byte(tt.give), tt.seed); got != tt.want {
			t.Errorf("XXH64(%q, %d) = %#x; want %#x", tt.give, tt.seed, got, tt.want)
		}
	}
}

func TestDigest64_StreamingEqualsOneShot(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdefghij"), 20)
	for split := 0; split <= len(data); split += 7 {
		var d Digest64
		d.Reset(42)
		d.Write(data[:split])
		d.Write(data[split:])
		if got, want := d.Sum64(), XXH64(data, 42); got != want {
			t.Fatalf("split %d: streaming %#x; one-shot %#x", split, got, want)
		}
	}
}

func TestPrefixHash_FramesFields(t *testing.T) {
	a := PrefixHash(&PrefixKey{Model: "ab", Prefix: []byte("c")})
	b := PrefixHash(&PrefixKey{Model: "a", Prefix: []byte("bc")})
	if a == b {
		t.Fatalf("field boundaries collide: %#x", a)
	}
	k := PrefixKey{Model: "m", Prefix: []byte("system prompt"), LoRA: "l", CacheSalt: "s"}
	if PrefixHash(&k) != PrefixHash(&k) {
		t.Fatal("PrefixHash is not deterministic")
	}
	salted := k
	salted.CacheSalt = "t"
	if PrefixHash(&k) == PrefixHash(&salted) {
		t.Fatal("cache_salt does not change the hash")
	}
}

func TestPrefixHash_DoesNotAllocate(t *testing.T) {
	k := PrefixKey{Model: "m", Prefix: bytes.Repeat([]byte("x"), 4096), LoRA: "l"}
	if n := testing.AllocsPerRun(100, func() { _ = PrefixHash(&k) }); n != 0 {
		t.Fatalf("PrefixHash allocates %v times per call; want 0", n)
	}
}

package ladder

import (
	"strings"
	"testing"
	"time"
	"unsafe"
)

func TestSessionKeyFor(t *testing.T) {
	long := strings.Repeat("x", MaxSessionKeyLen+1)
	tests := []struct {
		name, user, conv string
		wantKey          string
		wantSrc          KeySource
	}{
		{"header wins", "u1", "c1", "c1", KeyConversation},
		{"user id alone", "u1", "", "u1", KeyUserID},
		{"auto header ignored for user id", "u1", "auto-123", "u1", KeyUserID},
		{"auto header alone gives no key", "", "auto-123", "", KeyNone},
		{"auto applies to the header only", "auto-u", "", "auto-u", KeyUserID},
		{"nothing", "", "", "", KeyNone},
		{"overlong header ignored", "u1", long, "u1", KeyUserID},
		{"overlong user ignored", long, "", "", KeyNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, src := SessionKeyFor(tt.user, tt.conv)
			if key != tt.wantKey || src != tt.wantSrc {
				t.Fatalf("got (%q,%d); want (%q,%d)", key, src, tt.wantKey, tt.wantSrc)
			}
		})
	}
}

func TestSessionShard_TTLIsSlidingAndStrict(t *testing.T) {
	tab := NewSessionTable(SessionConfig{Shards: 1, TTL: 10 * time.Second})
	s := tab.Shard(0)
	t0 := time.Unix(1000, 0)
	s.Put(t0, "k", Pin{Prefill: 1, Decode: 3})
	if got := s.Get(t0.Add(10*time.Second), "k"); !got.Found || got.Pin != (Pin{1, 3}) {
		t.Fatalf("at exactly TTL: %+v; want the pin (expiry is strictly after TTL)", got)
	}
	// That Get refreshed the pin: 15 s after the refresh it has expired.
	if got := s.Get(t0.Add(19*time.Second), "k"); !got.Found {
		t.Fatal("9 s after a refresh: pin missing; want it alive")
	}
	if got := s.Get(t0.Add(40*time.Second), "k"); got.Found {
		t.Fatal("21 s idle: pin found; want expired")
	}
	if s.Len() != 0 {
		t.Fatalf("expired pin still stored: len %d", s.Len())
	}
}

func TestSessionShard_LRUCapEvictsLeastRecentlyUsed(t *testing.T) {
	tab := NewSessionTable(SessionConfig{Shards: 1, MaxEntries: 2})
	s := tab.Shard(0)
	now := time.Unix(0, 0)
	s.Put(now, "a", Pin{0, 2})
	s.Put(now, "b", Pin{1, 2})
	s.Get(now, "a")
	s.Put(now, "c", Pin{0, 3})
	if s.Get(now, "b").Found {
		t.Fatal("b survived; want it evicted (least recently used)")
	}
	if !s.Get(now, "a").Found || !s.Get(now, "c").Found || s.Len() != 2 {
		t.Fatal("a or c missing; want both")
	}
}

func TestSessionShard_EvictAndEvictEndpoint(t *testing.T) {
	var s SessionShard // the zero value is usable
	now := time.Unix(0, 0)
	s.Put(now, "a", Pin{0, 4})
	s.Put(now, "b", Pin{1, 4})
	s.Put(now, "c", Pin{1, 5})
	if !s.Evict("a") || s.Evict("a") {
		t.Fatal("Evict should report presence exactly once")
	}
	if n := s.EvictEndpoint(4); n != 1 || s.Get(now, "b").Found || !s.Get(now, "c").Found {
		t.Fatalf("EvictEndpoint(4) removed %d; want exactly b", n)
	}
	if n := s.EvictEndpoint(1); n != 1 || s.Len() != 0 {
		t.Fatalf("EvictEndpoint(1) removed %d, len %d; want 1, 0", n, s.Len())
	}
}

func TestSessionShard_PutRejectsBadInput(t *testing.T) {
	var s SessionShard
	now := time.Unix(0, 0)
	for _, tt := range []struct {
		key string
		pin Pin
	}{{"", Pin{0, 1}}, {strings.Repeat("k", MaxSessionKeyLen+1), Pin{0, 1}}, {"k", Pin{-1, 1}}} {
		if s.Put(now, tt.key, tt.pin) {
			t.Errorf("Put(%d-byte key, %+v) = true; want false", len(tt.key), tt.pin)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("len %d; want 0", s.Len())
	}
}

func TestSessionShard_SweepDropsOnlyExpired(t *testing.T) {
	tab := NewSessionTable(SessionConfig{Shards: 1, TTL: 5 * time.Second})
	s := tab.Shard(0)
	t0 := time.Unix(0, 0)
	s.Put(t0, "old", Pin{0, 1})
	s.Put(t0.Add(4*time.Second), "new", Pin{0, 1})
	if n := s.Sweep(t0.Add(6 * time.Second)); n != 1 || s.Len() != 1 {
		t.Fatalf("swept %d, len %d; want 1, 1", n, s.Len())
	}
}

func TestSessionShard_PutDoesNotRetainTheCallersBuffer(t *testing.T) {
	var s SessionShard
	body := `{"user":"conversation-42","padding":"` + strings.Repeat("p", 1<<16) + `"}`
	key := body[9:24] // a window into the whole body
	s.Put(time.Unix(0, 0), key, Pin{0, 1})
	for k := range s.t.m {
		if k != key {
			t.Fatalf("stored key %q; want %q", k, key)
		}
		if unsafe.StringData(k) == unsafe.StringData(key) {
			t.Fatal("the stored key aliases the request body; want a copy")
		}
	}
}

func TestShardFor_IsStableAndInRange(t *testing.T) {
	tab := NewSessionTable(SessionConfig{Shards: 7})
	for i := 0; i < 7000; i++ {
		k := "conv-" + strings.Repeat("z", i%13) + string(rune('a'+i%26))
		s := tab.ShardFor(k)
		if s != ShardFor(k, 7) || s < 0 || s >= 7 {
			t.Fatalf("ShardFor(%q) = %d; unstable or out of range", k, s)
		}
	}
	if ShardFor("user-1", 16) != int(XXH64String("user-1", 0)%16) {
		t.Fatal("ShardFor is not XXH64 modulo n")
	}
	if ShardFor("x", 0) != 0 || ShardFor("x", 1) != 0 {
		t.Fatal("ShardFor with n ≤ 1 must be 0")
	}
}

func TestSessionShard_GetDoesNotAllocate(t *testing.T) {
	var s SessionShard
	now := time.Unix(0, 0)
	s.Put(now, "conversation-1", Pin{0, 1})
	key := "conversation-1"
	if n := testing.AllocsPerRun(100, func() { s.Get(now, key) }); n != 0 {
		t.Fatalf("Get allocates %v times; want 0", n)
	}
}

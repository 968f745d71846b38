package inventory

import (
	"encoding/json"
	"testing"
)

func TestInventoryView_HasLoxiLBShape(t *testing.T) {
	v := NewInventoryView("rule-1", 2, "sha256_cbor", 10, []uint64{7, 18446744073709551615}, 12)
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"service_id":"rule-1","ep_idx":2,"hash_algo":"sha256_cbor","blocks":[{"block_idx":10,"hash_uint64":7},{"block_idx":11,"hash_uint64":18446744073709551615}],"total":12}`
	if string(raw) != want {
		t.Fatalf("got %s\nwant %s", raw, want)
	}
	empty, _ := json.Marshal(NewInventoryView("r", 0, HashAlgoTokenKeyed, 0, nil, 0))
	if string(empty) != `{"service_id":"r","ep_idx":0,"hash_algo":"token_keyed","blocks":[],"total":0}` {
		t.Fatalf("empty view %s; blocks must be [] not null", empty)
	}
}

func TestEndpointSnapshot_CombinesFeedMirrorAndCapacity(t *testing.T) {
	id := EndpointID{Service: "s", EpIdx: 1, Rank: 2}
	tests := []struct {
		name     string
		feed     FeedStats
		mirror   MirrorStats
		capacity CacheConfig
		check    func(t *testing.T, s EndpointSnapshot)
	}{
		{"healthy", FeedStats{Connected: true, HaveSeq: true, LastSeq: 0, Gaps: 1}, MirrorStats{Blocks: 5, Evictions: 2}, CacheConfig{NumGPUBlocks: 100},
			func(t *testing.T, s EndpointSnapshot) {
				if !s.Connected || s.LastSeq == nil || *s.LastSeq != 0 || s.Blocks != 5 || s.Evictions != 2 || s.Contract != "ok" || !s.CapacityKnown || s.Gaps != 1 {
					t.Fatalf("%+v", s)
				}
			}},
		{"no batch yet and capacity unknown", FeedStats{}, MirrorStats{}, CacheConfig{},
			func(t *testing.T, s EndpointSnapshot) {
				if s.LastSeq != nil || s.CapacityKnown || s.CapacityBlocks != 0 {
					t.Fatalf("%+v", s)
				}
			}},
		{"tripped contract", FeedStats{}, MirrorStats{Contract: ContractState{Tripped: true, Reason: ContractBlockSize, Detail: "fix it"}}, CacheConfig{},
			func(t *testing.T, s EndpointSnapshot) {
				if s.Contract != ContractBlockSize || s.ContractDetail != "fix it" {
					t.Fatalf("%+v", s)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, NewEndpointSnapshot(id, tt.feed, tt.mirror, tt.capacity))
		})
	}
}

func TestHashAlgoName_NamesBothModes(t *testing.T) {
	if got := HashAlgoName(mustExactHasher(t, "0")); got != "sha256_cbor" {
		t.Fatalf("got %s", got)
	}
	if got := HashAlgoName(mustTokenHasher(t, 16)); got != HashAlgoTokenKeyed {
		t.Fatalf("got %s", got)
	}
}

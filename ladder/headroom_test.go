package ladder

import (
	"math"
	"testing"
	"time"
)

func TestConcurrencyEstimate_WorkedValues(t *testing.T) {
	tests := []struct {
		name            string
		capacity        uint64
		blocks, maxSeqs uint32
		want            uint64
	}{
		{"kv bound", 170, 28, 256, 6},         // 170/28 = 6.07
		{"batch bound", 31250, 128, 256, 244}, // 244 < 256
		{"batch bound below kv", 31250, 16, 256, 256},
		{"zero blocks counts as one", 100, 0, 256, 100},
		{"capacity below one prompt", 10, 28, 256, 0},
		{"huge capacity", math.MaxUint64, 1, 65535, 65535},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ConcurrencyEstimate(tt.capacity, tt.blocks, tt.maxSeqs); got != tt.want {
				t.Fatalf("ConcurrencyEstimate(%d, %d, %d) = %d; want %d", tt.capacity, tt.blocks, tt.maxSeqs, got, tt.want)
			}
		})
	}
}

func TestHeadroomFor_WorkedValues(t *testing.T) {
	tests := []struct {
		name        string
		k           uint64
		queued, pct uint32
		want        uint32
	}{
		{"all of K", 6, 0, 100, 6},
		{"half of K rounds down", 7, 0, 50, 3},
		{"pct 0 is hard", 6, 0, 0, 0},
		{"a queue removes it", 244, 1, 100, 0},
		{"saturates", math.MaxUint64 / 200, 0, 100, math.MaxUint32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HeadroomFor(tt.k, tt.queued, tt.pct); got != tt.want {
				t.Fatalf("HeadroomFor(%d, %d, %d) = %d; want %d", tt.k, tt.queued, tt.pct, got, tt.want)
			}
		})
	}
}

// The floor only ever adds room: with a headroom, the law picks at least
// as much overlap as without it (whatever the loads), and with Headroom 0
// it is exactly hard.
func TestSelectUnified_HeadroomNeverSpillsMoreThanHard(t *testing.T) {
	for load0 := uint32(0); load0 < 12; load0++ {
		for load1 := uint32(0); load1 < 12; load1++ {
			for room := uint32(0); room < 10; room++ {
				cs := []Candidate{
					{Endpoint: 0, Overlap: 20, Load: load0, Capacity: 100, Headroom: room},
					{Endpoint: 1, Overlap: 5, Load: load1, Capacity: 100, Headroom: room},
				}
				withRoom := SelectUnified(cs, 24, LawParams{Mode: LBHeadroom, FactorPct: 175})
				cs[0].Headroom, cs[1].Headroom = 0, 0
				hard := SelectUnified(cs, 24, LawParams{Mode: LBHard, FactorPct: 175})
				if cs[withRoom.Pos].Overlap < cs[hard.Pos].Overlap {
					t.Fatalf("loads %d/%d room %d: headroom picked ep%d, hard ep%d", load0, load1, room, withRoom.Pos, hard.Pos)
				}
				if room == 0 && (withRoom.Pos != hard.Pos || withRoom.Spilled != hard.Spilled) {
					t.Fatalf("loads %d/%d: room 0 gave %+v; hard %+v", load0, load1, withRoom, hard)
				}
			}
		}
	}
}

func TestPendingTable_RemembersWithinTTL(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var p pendingTable
	tests := []struct {
		name   string
		key    uint64
		at     time.Duration
		wantEP int
		wantOK bool
	}{
		{"unknown key", 7, 0, -1, false},
		{"just placed", 42, 0, 3, true},
		{"at the TTL", 42, PendingTTL, 3, true},
		{"past the TTL", 42, PendingTTL + time.Nanosecond, -1, false},
		{"colliding key does not answer for it", 42 + pendingSlots, 0, -1, false},
		{"clock before the entry", 42, -time.Second, -1, false},
	}
	p.note(t0, 42, 3)
	p.note(t0, 99, MaxEndpoints) // out of range: ignored
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep, ok := p.lookup(t0.Add(tt.at), tt.key)
			if ep != tt.wantEP || ok != tt.wantOK {
				t.Fatalf("lookup(%v, %d) = %d, %v; want %d, %v", tt.at, tt.key, ep, ok, tt.wantEP, tt.wantOK)
			}
		})
	}
	if _, ok := p.lookup(t0, 99); ok {
		t.Fatal("an out-of-range endpoint was recorded")
	}
}

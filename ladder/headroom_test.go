package ladder

import (
	"math"
	"testing"
	"time"
)

func TestConcurrencyEstimate_WorkedValues(t *testing.T) {
	tests := []struct {
		name                     string
		capacity                 uint64
		blocks, overlap, maxSeqs uint32
		want                     uint64
	}{
		{"kv bound", 170, 28, 0, 256, 6},         // 170/28 = 6.07
		{"batch bound", 31250, 128, 0, 256, 244}, // 244 < 256
		{"batch bound below kv", 31250, 16, 0, 256, 256},
		{"zero blocks counts as one", 100, 0, 0, 256, 100},
		{"capacity below one prompt", 10, 28, 0, 256, 0},
		{"huge capacity", math.MaxUint64, 1, 0, 65535, 65535},
		{"a shared prefix is held once", 1152, 136, 128, 256, 128}, // (1152-128)/8
		{"a full hit needs one block", 1152, 136, 136, 256, 256},   // (1152-136)/1, batch bound
		{"overlap above the prompt is the prompt", 1152, 136, 500, 64, 64},
		{"overlap above the capacity", 100, 200, 150, 256, 0}, // (100-100)/50
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ConcurrencyEstimate(tt.capacity, tt.blocks, tt.overlap, tt.maxSeqs); got != tt.want {
				t.Fatalf("ConcurrencyEstimate(%d, %d, %d, %d) = %d; want %d", tt.capacity, tt.blocks, tt.overlap, tt.maxSeqs, got, tt.want)
			}
		})
	}
}

func TestHoldWinner_WorkedValues(t *testing.T) {
	known := func(used, prefill uint32) EndpointView {
		return EndpointView{KVUsageKnown: true, KVUsedBlocks: used, PrefillBlocks: prefill}
	}
	tests := []struct {
		name           string
		w, t           EndpointView
		capW           uint64
		blocks, oW, oT uint32
		want           bool
	}{
		// P=136, o_w=128: the winner's cost is 8 + its queue, the target's 136 + its queue.
		{"idle winner holds", known(500, 0), known(0, 0), 1152, 136, 128, 0, true},
		{"a queue of hits is cheaper than a full prefill", known(500, 150), known(0, 0), 1152, 136, 128, 0, true}, // 158 <= 136+64
		{"a long queue spills", known(500, 200), known(0, 0), 1152, 136, 128, 0, false},                           // 208 > 200
		{"no room for the new blocks spills", known(1145, 0), known(0, 0), 1152, 136, 128, 0, false},              // 1145+8 > 1152
		{"exactly full still fits", known(1144, 0), known(0, 0), 1152, 136, 128, 0, true},
		{"unknown usage never holds", EndpointView{}, known(0, 0), 1152, 136, 128, 0, false},
		{"a target holding the prefix too", known(500, 70), known(0, 0), 1152, 136, 128, 128, false}, // 78 > 8+64
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HoldWinner(tt.w, tt.t, tt.capW, tt.blocks, tt.oW, tt.oT); got != tt.want {
				t.Fatalf("HoldWinner = %v; want %v", got, tt.want)
			}
		})
	}
}

func TestRebalance_WorkedValues(t *testing.T) {
	q := func(prefill uint32) EndpointView { return EndpointView{PrefillBlocks: prefill} }
	tests := []struct {
		name           string
		p, t           EndpointView
		blocks, oP, oT uint32
		want           bool
	}{
		// P=200, o_p=190, o_t=62: the pick's cost is 10 + its queue, the target's 138 + its queue.
		{"a short queue stays", q(300), q(0), 200, 190, 62, false},      // 310 <= 138+256
		{"exactly the margin stays", q(384), q(0), 200, 190, 62, false}, // 394 == 394
		{"one block past the margin moves", q(385), q(0), 200, 190, 62, true},
		{"the target's queue counts", q(500), q(200), 200, 190, 62, false}, // 510 <= 338+256
		{"a target holding it too", q(300), q(0), 200, 190, 190, true},     // 310 > 10+256
		{"overlaps above the prompt count as the prompt", q(257), q(0), 200, 500, 500, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Rebalance(tt.p, tt.t, tt.blocks, tt.oP, tt.oT); got != tt.want {
				t.Fatalf("Rebalance = %v; want %v", got, tt.want)
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

func TestAutoFactor_MovesAnEighthTowardsTheQueueTarget(t *testing.T) {
	tests := []struct {
		name      string
		prev      uint32
		queued, n int
		want      uint32
	}{
		{"no queue keeps the loose cap", 300, 0, 8, 300},
		{"every engine queues: an eighth towards 150", 300, 8, 8, 281}, // 300 − ceil(150/8)
		{"half queue: target 225", 300, 4, 8, 290},                     // 300 − ceil(75/8)
		{"back up when the queues drain", 150, 0, 8, 169},              // 150 + ceil(150/8)
		{"at the target it stays", 225, 4, 8, 225},
		{"one step short still arrives", 226, 4, 8, 225},
		{"an unset start takes the target", 0, 2, 8, 263},
		{"no endpoints: the loose cap", 200, 0, 0, 213},
		{"more queued than endpoints counts as all", 300, 9, 8, 281},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AutoFactor(tt.prev, tt.queued, tt.n); got != tt.want {
				t.Fatalf("AutoFactor(%d, %d, %d) = %d; want %d", tt.prev, tt.queued, tt.n, got, tt.want)
			}
		})
	}
}

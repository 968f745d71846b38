package inventory

import "testing"

func TestSeqTracker_ClassifiesEverySequenceCase(t *testing.T) {
	tests := []struct {
		name    string
		replay  bool
		give    []uint64
		want    []SeqAction
		missing uint64 // of the last decision
	}{
		{"first batch at any seq is accepted", false, []uint64{57}, []SeqAction{SeqApply}, 0},
		{"consecutive", false, []uint64{0, 1, 2}, []SeqAction{SeqApply, SeqApply, SeqApply}, 0},
		{"duplicate is dropped", false, []uint64{4, 4, 5}, []SeqAction{SeqApply, SeqDuplicate, SeqApply}, 0},
		{"gap of 64 keeps", false, []uint64{0, 65}, []SeqAction{SeqApply, SeqGapKeep}, 64},
		{"gap of 65 resyncs", false, []uint64{0, 66}, []SeqAction{SeqApply, SeqGapResync}, 65},
		{"backwards is a restart", false, []uint64{10, 3, 4}, []SeqAction{SeqApply, SeqRestart, SeqApply}, 0},
		{"restart to zero", false, []uint64{10, 0}, []SeqAction{SeqApply, SeqRestart}, 0},
		{"a restart counts the new publisher's lost first batches", false, []uint64{10, 3}, []SeqAction{SeqApply, SeqRestart}, 3},
		{"with replay every gap replays", true, []uint64{0, 2, 500}, []SeqAction{SeqApply, SeqGapReplay, SeqGapReplay}, 497},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := SeqTracker{Replay: tt.replay}
			var d SeqDecision
			for i, s := range tt.give {
				d = tr.Observe(s)
				if d.Action != tt.want[i] {
					t.Fatalf("seq %d (#%d): got %v; want %v", s, i, d.Action, tt.want[i])
				}
			}
			if d.Missing != tt.missing {
				t.Fatalf("missing %d; want %d", d.Missing, tt.missing)
			}
			if last, ok := tr.Last(); !ok || last != tt.give[len(tt.give)-1] {
				t.Fatalf("last %d/%v; want %d", last, ok, tt.give[len(tt.give)-1])
			}
		})
	}
}

func TestSeqTracker_FallbackUsesTheWindow(t *testing.T) {
	tr := SeqTracker{Window: 10, Replay: true}
	tests := []struct {
		give SeqDecision
		want SeqAction
	}{
		{SeqDecision{Missing: 10}, SeqGapKeep},
		{SeqDecision{Missing: 11}, SeqGapResync},
	}
	for _, tt := range tests {
		if got := tr.Fallback(tt.give); got != tt.want {
			t.Errorf("Fallback(%d missing) = %v; want %v", tt.give.Missing, got, tt.want)
		}
	}
}

// After a disconnection a PUB socket cannot repeat a batch: a sequence
// number seen before is a restarted publisher whose first batches were
// lost, even when it equals the last one.
func TestSeqTracker_AfterADisconnectionARepeatIsARestart(t *testing.T) {
	tests := []struct {
		name    string
		give    uint64 // the first seq after the disconnection; the last was 1
		want    SeqAction
		missing uint64
	}{
		{"the same seq again", 1, SeqRestart, 1},
		{"back to zero", 0, SeqRestart, 0},
		{"the next one", 2, SeqApply, 0},
		{"a gap", 5, SeqGapKeep, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr SeqTracker
			tr.Observe(0)
			tr.Observe(1)
			tr.Disconnected()
			d := tr.Observe(tt.give)
			if d.Action != tt.want || d.Missing != tt.missing {
				t.Fatalf("seq %d after a disconnection: %v (%d missing); want %v (%d missing)", tt.give, d.Action, d.Missing, tt.want, tt.missing)
			}
			// Only the first batch after the disconnection is judged so.
			if d := tr.Observe(tt.give); d.Action != SeqDuplicate {
				t.Fatalf("seq %d again on the new connection: %v; want duplicate", tt.give, d.Action)
			}
		})
	}
}

package engine

import (
	"testing"
	"time"

	"github.com/llbproject/llb/inventory"
)

func TestLoRA_AnAdapterPastMaxLoRAsWaitsAndTheQueueMovesPastIt(t *testing.T) {
	for _, sched := range []Scheduler{SchedLoadFactor, SchedStep} {
		c := testConfig()
		c.Scheduler = sched
		c.MaxLoRAs = 1
		c.LoRASwapIn = 30 * time.Millisecond
		e := newEngine(t, c)
		req := func(id string, lora int, name string) Request {
			return Request{ID: id, Tokens: tokensFrom(100*len(id)+lora, 8), MaxTokens: 3, LoRAID: lora, Extra: inventory.ExtraKeys{LoRAName: name}}
		}
		a := submit(t, e, t0, req("a1", 1, "a"))
		b := submit(t, e, t0, req("b1", 2, "b")) // one adapter too many: skipped
		base := submit(t, e, t0, req("base", 0, ""))
		st := e.Stats()
		if st.RunningLoRAs != "a" || st.WaitingLoRAs != "b" {
			t.Fatalf("%v: running %q waiting %q; want a and b", sched, st.RunningLoRAs, st.WaitingLoRAs)
		}
		got := runToEnd(t, e)
		if !got[b].AdmittedAt.After(got[a].DoneAt.Add(-time.Nanosecond)) {
			t.Errorf("%v: b admitted at %v before a ended at %v", sched, got[b].AdmittedAt, got[a].DoneAt)
		}
		if !got[base].AdmittedAt.Before(got[b].AdmittedAt) {
			t.Errorf("%v: the base request (admitted %v) waited behind b (%v)", sched, got[base].AdmittedAt, got[b].AdmittedAt)
		}
		if st := e.Stats(); st.LoRASwaps != 2 || st.RunningLoRAs != "" {
			t.Errorf("%v: swaps %d running %q; want 2 and none", sched, st.LoRASwaps, st.RunningLoRAs)
		}
	}
}

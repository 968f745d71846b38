package ladder

import (
	"strconv"
	"time"
)

// MaxTraceSteps bounds Decision.Trace; a decision records at most one step per
// stage, so the bound is never reached in practice (extra steps are dropped).
const MaxTraceSteps = 8

// TraceStep is one fall-through: the stage and why it did not decide.
type TraceStep struct {
	// Tier is the stage that fell through.
	Tier Tier
	// Reason is why it fell through.
	Reason Reason
}

// Trace is the fixed-size list of fall-through steps, in ladder order.
type Trace struct {
	// Steps holds the recorded steps in Steps[:N].
	Steps [MaxTraceSteps]TraceStep
	// N is the number of recorded steps.
	N uint8
}

func (t *Trace) add(tier Tier, r Reason) {
	if int(t.N) < len(t.Steps) {
		t.Steps[t.N] = TraceStep{Tier: tier, Reason: r}
		t.N++
	}
}

// Len returns the number of recorded steps.
func (t *Trace) Len() int { return int(t.N) }

// At returns step i (0 ≤ i < Len).
func (t *Trace) At(i int) TraceStep { return t.Steps[i] }

// Reason returns the recorded reason of tier, or ReasonNone.
func (t *Trace) Reason(tier Tier) Reason {
	for i := 0; i < int(t.N); i++ {
		if t.Steps[i].Tier == tier {
			return t.Steps[i].Reason
		}
	}
	return ReasonNone
}

// KVDetail records the law's inputs and outputs when Tier 1.5 ran its
// selection (Decision.KV.Ran), for traces and tests.
type KVDetail struct {
	// Ran is true when candidates reached the selection law.
	Ran bool
	// Mode is the resolved law.
	Mode LBMode
	// FactorPct is the (1+ε)·100 actually used (adaptive: ε(L)).
	FactorPct uint32
	// Lambda is the λ actually used (adaptive-soft: λ(L)).
	Lambda uint32
	// Load is L = Σ active_conns over the positive-overlap candidates.
	Load uint64
	// Candidates is the positive-overlap candidate count.
	Candidates uint8
	// BestOverlap is the highest candidate overlap, in blocks.
	BestOverlap uint32
	// Affinity is the overlap winner the law started from (endpoint index).
	Affinity int
	// Relief is true when spill relief was enabled for this decision.
	Relief bool
}

// Decision is Decide's result: a value the caller acts on. It never holds
// references into the inputs.
type Decision struct {
	// Prefill is the chosen prefill endpoint (P/D), the chosen endpoint
	// (single pool), or the rescue endpoint; -1 when none.
	Prefill int
	// Decode is the chosen decode endpoint; -1 when none (single pool,
	// rescue, or no pick).
	Decode int
	// Tier is the stage that chose Prefill; TierNone when nothing was chosen.
	Tier Tier
	// Selector names the single-pool selector when Tier is TierSelector.
	Selector SelectorKind
	// Trace lists why each earlier stage fell through.
	Trace Trace
	// Flags are the trade-offs taken (spill, cold seed, rescue, ties, ...).
	Flags Flags
	// Admission is the gate's outcome; only Admit comes with endpoints.
	Admission Admission
	// ParkOn is the endpoint whose queue holds the request when Admission is
	// Park; -1 otherwise.
	ParkOn int
	// Displace is set with Park when every queue is full: the request
	// takes the place of the parked request FlowQueue.Victim names (of a
	// lower class), which is shed; ParkOn is then -1 and the runtime parks
	// it where the victim was.
	Displace bool
	// ParkDeadline is when the runtime reaps a parked request (504); zero
	// when parking is unbounded or the request is not parked.
	ParkDeadline time.Time
	// Unavailable is ReasonPDPoolUnavailable, ReasonNoHealthyBackend or
	// ReasonModelNotServed when
	// the ladder found nothing to serve the request (answer 503); ReasonNone
	// otherwise.
	Unavailable Reason
	// EvictSession tells the caller to evict Request.SessionKey from its
	// shard: the pinned prefill was down, CB-open or masked.
	EvictSession bool
	// PinSession tells the caller to pin (Prefill, Decode) under
	// Request.SessionKey once the request succeeds.
	PinSession bool
	// KV records the Tier-1.5 law's inputs when it ran.
	KV KVDetail
	// TTFT is the predicted time to first token on Prefill, when the
	// decision chose an endpoint.
	TTFT TTFTPrediction
}

// DisplacedDecision is the decision a parked request receives when a
// request of a higher class takes its place (Decision.Displace): shed.
func DisplacedDecision() Decision {
	d := newDecision()
	d.Admission = Shed
	d.Trace.add(TierAdmission, ReasonDisplaced)
	return d
}

func newDecision() Decision {
	return Decision{Prefill: -1, Decode: -1, ParkOn: -1, KV: KVDetail{Affinity: -1}}
}

// Available reports whether the decision selected an endpoint to send the
// request to now.
func (d *Decision) Available() bool {
	return d.Admission == Admit && d.Prefill >= 0 && d.Unavailable == ReasonNone
}

// String renders the compact route form used for the X-Llb-Route header and
// debug logs, e.g.
//
//	tier=1.5 prefill=2 decode=4 via=session_miss,match_rate_below_threshold spill
func (d *Decision) String() string {
	var buf [192]byte
	return string(d.AppendText(buf[:0]))
}

// AppendText appends the String form to b without allocating when b has room.
func (d *Decision) AppendText(b []byte) []byte {
	b = append(b, "tier="...)
	b = append(b, d.Tier.String()...)
	if d.Tier == TierSelector {
		b = append(b, " sel="...)
		b = append(b, d.Selector.String()...)
	}
	b = append(b, " prefill="...)
	b = strconv.AppendInt(b, int64(d.Prefill), 10)
	b = append(b, " decode="...)
	b = strconv.AppendInt(b, int64(d.Decode), 10)
	if d.Trace.N > 0 {
		b = append(b, " via="...)
		for i := 0; i < int(d.Trace.N); i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, d.Trace.Steps[i].Reason.String()...)
		}
	}
	if d.Admission != Admit {
		b = append(b, " admission="...)
		b = append(b, d.Admission.String()...)
		if d.Admission == Park {
			b = append(b, " park="...)
			b = strconv.AppendInt(b, int64(d.ParkOn), 10)
			if d.Displace {
				b = append(b, " displace"...)
			}
		}
	}
	if d.Unavailable != ReasonNone {
		b = append(b, " unavailable="...)
		b = append(b, d.Unavailable.String()...)
	}
	for i, name := range flagNames {
		if d.Flags&(1<<i) != 0 {
			b = append(b, ' ')
			b = append(b, name...)
		}
	}
	if d.EvictSession {
		b = append(b, " evict_session"...)
	}
	return b
}

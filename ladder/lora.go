package ladder

// LoRA residency: which endpoints may take a request for a LoRA adapter.
//
// vLLM batches at most max_lora adapters at once (--max-loras). A waiting
// request whose adapter would be one too many is skipped until the batch's
// adapters drop below that, and an adapter not in the GPU's slots is swapped
// in before its prefill. The engine says which adapters its running and
// waiting requests use in the vllm:lora_requests_info gauge (labels
// running_lora_adapters, waiting_lora_adapters, max_lora); llb adds the
// adapters of the requests it sent there since the gauge was read. From
// that, for a request for adapter a, with H the eligible endpoints where a
// is resident (running or waiting there) and R the eligible endpoints where
// it is not but one more adapter fits (fewer than max_lora distinct
// adapters):
//
//	H has an endpoint that is not busy → the idle holders     (lora_resident)
//	H all busy, R not empty            → H ∪ R                (lora_spread)
//	H all busy, R empty                → H                    (lora_busy)
//	H empty, R not empty               → R                    (lora_room)
//	H and R empty                      → every eligible one   (lora_full)
//
// An endpoint is busy when requests wait in its queue, or a is waiting
// there (blocked behind the batch's other adapters). In R, endpoints that
// serve a come before endpoints that would load it at runtime
// (/v1/load_lora_adapter): those count only when no server has room. The
// set is a mask: the rule's tiers then pick within it (Tier 1.5 on the
// adapter's blocks, min-load, the selector). Without any endpoint's gauge
// the policy restricts nothing (lora_unknown).

// LoRACandidate is one endpoint as the LoRA policy sees it for a request.
type LoRACandidate struct {
	// Eligible: the endpoint may serve the request otherwise (healthy, not
	// avoided, serving or able to load the adapter).
	Eligible bool
	// Known: its gauge has been read.
	Known bool
	// Resident: the adapter is running or waiting there (gauge, or llb's
	// own requests since the gauge).
	Resident bool
	// Waiting: the adapter waits there (its requests are blocked).
	Waiting bool
	// Adapters is the number of distinct adapters running or waiting
	// there; MaxLoRA is max_lora (0: unknown, no limit).
	Adapters, MaxLoRA int
	// Queued is the engine's waiting requests.
	Queued uint32
	// Loadable: the endpoint does not serve the adapter but can load it at
	// runtime.
	Loadable bool
}

// room reports whether one more adapter fits.
func (c *LoRACandidate) room() bool { return c.MaxLoRA <= 0 || c.Adapters < c.MaxLoRA }

// busy reports whether a request for the adapter would wait there.
func (c *LoRACandidate) busy() bool { return c.Queued > 0 || c.Waiting }

// LoRA policy outcomes (Decision.LoRA).
const (
	// LoRAResident: the adapter's idle holders.
	LoRAResident = iota + 1
	// LoRASpread: every holder queues; the endpoints with room join.
	LoRASpread
	// LoRABusy: every holder queues and no other endpoint has room.
	LoRABusy
	// LoRARoom: no holder; the endpoints with room for one more adapter.
	LoRARoom
	// LoRAFull: no holder, no room anywhere.
	LoRAFull
	// LoRAUnknown: no endpoint's gauge is known.
	LoRAUnknown
)

// LoRAOutcome is the LoRA policy's reason for its mask.
type LoRAOutcome uint8

var loraNames = [...]string{"", "lora_resident", "lora_spread", "lora_busy", "lora_room", "lora_full", "lora_unknown"}

// String returns the outcome's snake_case name ("" for none).
func (o LoRAOutcome) String() string {
	if int(o) < len(loraNames) {
		return loraNames[o]
	}
	return "lora(?)"
}

// LoRAChoice returns the endpoints a request for an adapter may go to, by
// the rule above, and why. cands are indexed by endpoint (at most
// MaxEndpoints).
func LoRAChoice(cands []LoRACandidate) (EndpointSet, LoRAOutcome) {
	var eligible, holders, idle, roomServe, roomLoad EndpointSet
	known := false
	for i := range cands {
		c := &cands[i]
		if !c.Eligible || i >= MaxEndpoints {
			continue
		}
		eligible = eligible.With(i)
		known = known || c.Known
		switch {
		case c.Resident:
			holders = holders.With(i)
			if !c.busy() {
				idle = idle.With(i)
			}
		case c.room() && c.Loadable:
			roomLoad = roomLoad.With(i)
		case c.room():
			roomServe = roomServe.With(i)
		}
	}
	if !known {
		return eligible, LoRAUnknown
	}
	room := roomServe
	if room == 0 {
		room = roomLoad
	}
	switch {
	case idle != 0:
		return idle, LoRAResident
	case holders != 0 && room != 0:
		return holders | room, LoRASpread
	case holders != 0:
		return holders, LoRABusy
	case room != 0:
		return room, LoRARoom
	}
	return eligible, LoRAFull
}

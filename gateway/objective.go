package gateway

import (
	"net/http"
	"strconv"
	"time"
)

// TTFT objectives at the front door. A request may carry an
// objective for its time to first token, in milliseconds:
// X-Llb-Ttft-Objective-Ms, else llm-d's x-slo-ttft-ms. Each routing
// attempt hands the router the budget left (the objective minus the time
// the request has spent in llb so far, at least 1 ns); the router prefers
// an endpoint predicted to meet it and refuses a sheddable request that
// none is predicted to meet with 429 ttft_objective_unreachable
// (ladder/objective.go).

// Headers that carry a TTFT objective.
const (
	// HeaderTTFTObjective is llb's TTFT objective header: milliseconds, a
	// positive number.
	HeaderTTFTObjective = "X-Llb-Ttft-Objective-Ms"
	// HeaderSLOTTFT is llm-d's SLO header for the same, read when llb's
	// is absent.
	HeaderSLOTTFT = "X-Slo-Ttft-Ms"
)

// CodeTTFTObjective: the request is sheddable and no endpoint is
// predicted to give it its first token within its TTFT objective (429).
const CodeTTFTObjective = "ttft_objective_unreachable"

// maxTTFTObjective bounds an objective (an hour).
const maxTTFTObjective = time.Hour

// readObjective settles x's TTFT objective from its headers. It answers
// the client and returns false for a malformed one.
func (x *exchange) readObjective() bool {
	name := HeaderTTFTObjective
	v := x.in.Header.Peek(name)
	if len(v) == 0 {
		name = HeaderSLOTTFT
		if v = x.in.Header.Peek(name); len(v) == 0 {
			return true
		}
	}
	ms, err := strconv.ParseFloat(string(v), 64)
	if err != nil || !(ms > 0) || ms > float64(maxTTFTObjective/time.Millisecond) {
		x.fail(requestError(http.StatusBadRequest, CodeInvalidField, name,
			name+" must be the TTFT objective in milliseconds: a positive number up to 3600000"))
		return false
	}
	x.objective = time.Duration(ms * float64(time.Millisecond))
	return true
}

// objectiveLeft is the budget the router gets for x's first token: its
// objective minus the time x has spent so far (at least 1 ns); 0 without
// an objective.
func (x *exchange) objectiveLeft() time.Duration {
	if x.objective <= 0 {
		return 0
	}
	return max(x.objective-time.Since(x.start), 1)
}

package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// DropMode says when an injected connection drop happens.
type DropMode string

// Drop modes.
const (
	// DropBeforeHeaders closes the connection before any response byte.
	DropBeforeHeaders DropMode = "before_headers"
	// DropMidStream closes it after DropAfterTokens tokens were sent (a
	// non-streaming response is cut in the middle of its JSON body).
	DropMidStream DropMode = "mid_stream"
)

// Faults are the failures a worker injects into its generation endpoints
// (/v1/completions, /v1/chat/completions). /health reports Dead; /tokenize,
// /metrics and the control endpoints are never faulted.
type Faults struct {
	// Latency is added before every generation request is served.
	Latency time.Duration `json:"-"`
	// ErrorRate (0..1) is the chance a request fails with ErrorStatus.
	ErrorRate float64 `json:"error_rate"`
	// ErrorStatus is the injected status, 500..599. Default 500.
	ErrorStatus int `json:"error_status"`
	// FailNext makes the next N requests fail with ErrorStatus.
	FailNext int `json:"fail_next"`
	// DropRate (0..1) is the chance a request's connection is dropped.
	DropRate float64 `json:"drop_rate"`
	// DropNext drops the next N requests' connections.
	DropNext int `json:"drop_next"`
	// DropMode is when drops happen. Default before_headers.
	DropMode DropMode `json:"drop_mode"`
	// DropAfterTokens is how many tokens a mid-stream drop lets through
	// first. Default 1.
	DropAfterTokens int `json:"drop_after_tokens"`
	// Dead simulates EngineDeadError: /health answers 503 and generation
	// requests 500.
	Dead bool `json:"dead"`
	// Stall makes generation requests hang until the client gives up or the
	// worker stops.
	Stall bool `json:"stall"`
}

// validate reports out-of-range fields.
func (f Faults) validate() error {
	var errs []error
	if f.Latency < 0 {
		errs = append(errs, fmt.Errorf("latency %v (want >= 0)", f.Latency))
	}
	if !(f.ErrorRate >= 0 && f.ErrorRate <= 1) {
		errs = append(errs, fmt.Errorf("error_rate %v (want 0..1)", f.ErrorRate))
	}
	if !(f.DropRate >= 0 && f.DropRate <= 1) {
		errs = append(errs, fmt.Errorf("drop_rate %v (want 0..1)", f.DropRate))
	}
	if f.ErrorStatus != 0 && (f.ErrorStatus < 500 || f.ErrorStatus > 599) {
		errs = append(errs, fmt.Errorf("error_status %d (want 500..599)", f.ErrorStatus))
	}
	if f.FailNext < 0 || f.DropNext < 0 || f.DropAfterTokens < 0 {
		errs = append(errs, fmt.Errorf("fail_next %d, drop_next %d, drop_after_tokens %d (want >= 0)", f.FailNext, f.DropNext, f.DropAfterTokens))
	}
	switch f.DropMode {
	case "", DropBeforeHeaders, DropMidStream:
	default:
		errs = append(errs, fmt.Errorf("drop_mode %q (want %s or %s)", f.DropMode, DropBeforeHeaders, DropMidStream))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("faults: %w", errors.Join(errs...))
}

// faultKind is the fault decided for one request.
type faultKind uint8

const (
	faultNone faultKind = iota
	faultDead
	faultStall
	faultError
	faultDrop
)

// String names the kind for metrics and logs.
func (k faultKind) String() string {
	return [...]string{"none", "dead", "stall", "error", "drop"}[k]
}

// faultDecision is what happens to one request, decided once on arrival.
type faultDecision struct {
	kind      faultKind
	latency   time.Duration
	status    int
	mode      DropMode
	dropAfter int
}

// faultState holds the live faults. Guarded by mu; the dice are seeded.
type faultState struct {
	mu       sync.Mutex
	f        Faults
	rng      *rand.Rand
	injected map[string]uint64
}

func newFaultState(f Faults, seed uint64) *faultState {
	return &faultState{f: f, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), injected: map[string]uint64{}}
}

// decide takes the fault for the next generation request (consuming one of
// FailNext/DropNext when it applies).
func (s *faultState) decide() faultDecision {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &s.f
	d := faultDecision{latency: f.Latency, status: f.ErrorStatus, mode: f.DropMode, dropAfter: f.DropAfterTokens}
	if d.status == 0 {
		d.status = http.StatusInternalServerError
	}
	if d.mode == "" {
		d.mode = DropBeforeHeaders
	}
	if d.dropAfter == 0 {
		d.dropAfter = 1
	}
	switch {
	case f.Dead:
		d.kind = faultDead
	case f.Stall:
		d.kind = faultStall
	case f.FailNext > 0:
		f.FailNext--
		d.kind = faultError
	case f.DropNext > 0:
		f.DropNext--
		d.kind = faultDrop
	case f.ErrorRate > 0 && s.rng.Float64() < f.ErrorRate:
		d.kind = faultError
	case f.DropRate > 0 && s.rng.Float64() < f.DropRate:
		d.kind = faultDrop
	}
	if d.kind != faultNone {
		s.injected[d.kind.String()]++
	}
	return d
}

// dead reports the Dead flag (for /health).
func (s *faultState) dead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Dead
}

// snapshot returns the faults and the injection counters.
func (s *faultState) snapshot() (Faults, map[string]uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inj := make(map[string]uint64, len(s.injected))
	for k, v := range s.injected {
		inj[k] = v
	}
	return s.f, inj
}

// faultPatch is the body of POST /_sim/faults: present fields change, absent
// ones stay; "clear" resets everything first; "crash" stops the worker
// abruptly after answering.
type faultPatch struct {
	Clear           bool      `json:"clear"`
	Crash           bool      `json:"crash"`
	LatencyMS       *float64  `json:"latency_ms"`
	ErrorRate       *float64  `json:"error_rate"`
	ErrorStatus     *int      `json:"error_status"`
	FailNext        *int      `json:"fail_next"`
	DropRate        *float64  `json:"drop_rate"`
	DropNext        *int      `json:"drop_next"`
	DropMode        *DropMode `json:"drop_mode"`
	DropAfterTokens *int      `json:"drop_after_tokens"`
	Dead            *bool     `json:"dead"`
	Stall           *bool     `json:"stall"`
}

// FaultsView is how GET/POST /_sim/faults and Debug show the fault state.
type FaultsView struct {
	Faults
	// LatencyMS is Faults.Latency in milliseconds.
	LatencyMS float64 `json:"latency_ms"`
	// Injected counts injected faults by kind (dead, stall, error, drop).
	Injected map[string]uint64 `json:"injected"`
}

// apply validates and applies a patch; on error nothing changes.
func (s *faultState) apply(p faultPatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.f
	if p.Clear {
		f = Faults{}
	}
	if p.LatencyMS != nil {
		f.Latency = time.Duration(*p.LatencyMS * float64(time.Millisecond))
	}
	setIf(&f.ErrorRate, p.ErrorRate)
	setIf(&f.ErrorStatus, p.ErrorStatus)
	setIf(&f.FailNext, p.FailNext)
	setIf(&f.DropRate, p.DropRate)
	setIf(&f.DropNext, p.DropNext)
	setIf(&f.DropMode, p.DropMode)
	setIf(&f.DropAfterTokens, p.DropAfterTokens)
	setIf(&f.Dead, p.Dead)
	setIf(&f.Stall, p.Stall)
	if err := f.validate(); err != nil {
		return err
	}
	s.f = f
	return nil
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// handleFaults serves GET and POST /_sim/faults.
func (w *Worker) handleFaults(rw http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, 64<<10))
		if err != nil {
			writeError(rw, http.StatusBadRequest, "fault body: "+err.Error())
			return
		}
		var p faultPatch
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			writeError(rw, http.StatusBadRequest, "fault body must be a JSON object of known fault fields: "+err.Error())
			return
		}
		if err := w.faults.apply(p); err != nil {
			writeError(rw, http.StatusBadRequest, err.Error())
			return
		}
		w.log.Info().Str(logFaults, string(body)).Msg("faults changed")
		if p.Crash {
			writeJSON(rw, http.StatusOK, map[string]any{"crashing": true})
			if fl, ok := rw.(http.Flusher); ok {
				fl.Flush()
			}
			go w.Crash() // after this handler returns its bytes
			return
		}
	}
	f, inj := w.faults.snapshot()
	writeJSON(rw, http.StatusOK, FaultsView{Faults: f, LatencyMS: float64(f.Latency) / float64(time.Millisecond), Injected: inj})
}

// SetFaults replaces the live faults (Go API twin of POST /_sim/faults).
func (w *Worker) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return fmt.Errorf("set faults: %w: %w", ErrConfig, err)
	}
	w.faults.mu.Lock()
	w.faults.f = f
	w.faults.mu.Unlock()
	w.log.Info().Msg("faults replaced")
	return nil
}

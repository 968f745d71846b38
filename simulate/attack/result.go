package attack

import (
	"cmp"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Verdict is what one case showed.
type Verdict int

// Verdicts.
const (
	// Accepted: llbd served the input normally (it was valid, or a
	// mutation that left it valid).
	Accepted Verdict = iota
	// Refused: llbd refused the input cleanly — a 4xx or a documented
	// code within the bound, a clean close, a counted drop.
	Refused
	// Defective: the oracle failed (a 5xx, a hang, a crash, a 200 for
	// an incomplete request, an uncounted drop, ...).
	Defective
)

// Outcome is one case's verdict with, for a defect, why.
type Outcome struct {
	// Verdict is the case's verdict.
	Verdict Verdict
	// Why says what the oracle saw (defects only).
	Why string
}

func accepted() Outcome { return Outcome{Verdict: Accepted} }
func refused() Outcome  { return Outcome{Verdict: Refused} }
func defect(f string, a ...any) Outcome {
	return Outcome{Verdict: Defective, Why: fmt.Sprintf(f, a...)}
}

// Defect is one oracle failure with what reproduces it.
type Defect struct {
	// Family and Case locate the case (Case -1: a family-level check).
	Family string
	Case   int
	// Kind is the case's generator ("mutated_rule", "te_cl_smuggle", ...).
	Kind string
	// Why is what the oracle saw.
	Why string
	// Repro is the exact request (quoted bytes, shortened when long) or
	// the steps.
	Repro string
}

// maxDefectsKept bounds the defects a tally keeps per kind and reason;
// the rest are only counted.
const maxDefectsKept = 3

// Tally is one family's counts.
type Tally struct {
	// Family is the family's name.
	Family string
	// Tried counts cases run; Accepted, Refused and Defective split them.
	Tried, Accepted, Refused, Defective int
	// Checks counts family-level oracle checks (liveness, resources,
	// persistence) and Failed the ones that failed (each also a Defect).
	Checks, Failed int
	// Defects are the defects kept (at most maxDefectsKept per kind and
	// reason), DefectsSeen all of them.
	Defects     []Defect
	DefectsSeen int
	// Kinds counts cases per generator.
	Kinds map[string]int
	// Notes are facts measured on the way (baselines, peaks).
	Notes []string
	// Elapsed is the family's wall time.
	Elapsed time.Duration

	seen map[string]int // kind + why prefix → defects seen
}

func newTally(family string) *Tally {
	return &Tally{Family: family, Kinds: map[string]int{}, seen: map[string]int{}}
}

// add records one case.
func (t *Tally) add(c int, kind string, o Outcome, repro func() string) {
	t.Tried++
	t.Kinds[kind]++
	switch o.Verdict {
	case Accepted:
		t.Accepted++
	case Refused:
		t.Refused++
	default:
		t.Defective++
		t.keep(Defect{Family: t.Family, Case: c, Kind: kind, Why: o.Why}, repro)
	}
}

// check records one family-level oracle check; a failure is a defect.
func (t *Tally) check(kind string, ok bool, why string, repro string) {
	t.Checks++
	if ok {
		return
	}
	t.Failed++
	t.keep(Defect{Family: t.Family, Case: -1, Kind: kind, Why: why}, func() string { return repro })
}

func (t *Tally) keep(d Defect, repro func() string) {
	t.DefectsSeen++
	sig := d.Kind + "|" + signature(d.Why)
	t.seen[sig]++
	if t.seen[sig] > maxDefectsKept {
		return
	}
	if repro != nil {
		d.Repro = repro()
	}
	t.Defects = append(t.Defects, d)
}

// note records a measured fact.
func (t *Tally) note(f string, a ...any) { t.Notes = append(t.Notes, fmt.Sprintf(f, a...)) }

// signature is the part of a reason that names the failure, without the
// numbers that vary from case to case.
func signature(why string) string {
	var b strings.Builder
	for _, r := range why {
		if r >= '0' && r <= '9' {
			continue
		}
		b.WriteRune(r)
		if b.Len() >= 48 {
			break
		}
	}
	return b.String()
}

// Report is a whole run.
type Report struct {
	// Seed and Net reproduce the run (llbsim attack --seed --net).
	Seed uint64
	Net  string
	// Engine is the workers' dialect (llbsim attack --engine).
	Engine string
	// Tallies are the families run, in order.
	Tallies []*Tally
	// Elapsed is the run's wall time.
	Elapsed time.Duration
}

// Defects counts every defect of the run.
func (r *Report) Defects() int {
	n := 0
	for _, t := range r.Tallies {
		n += t.DefectsSeen
	}
	return n
}

// Write prints the per-family table, the notes, and every kept defect
// with its reproducer.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "llb attack: seed %d, net %s, engine %s, %s\n\n", r.Seed, r.Net, cmp.Or(r.Engine, "vllm"), r.Elapsed.Round(time.Second))
	fmt.Fprintf(w, "%-10s %8s %8s %8s %8s %8s %10s\n", "family", "tried", "refused", "served", "defects", "checks", "time")
	for _, t := range r.Tallies {
		fmt.Fprintf(w, "%-10s %8d %8d %8d %8d %5d/%-3d %9s\n", t.Family, t.Tried, t.Refused, t.Accepted,
			t.DefectsSeen, t.Checks-t.Failed, t.Checks, t.Elapsed.Round(time.Second))
	}
	for _, t := range r.Tallies {
		fmt.Fprintf(w, "\n%s: cases by kind:", t.Family)
		kinds := make([]string, 0, len(t.Kinds))
		for k := range t.Kinds {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			fmt.Fprintf(w, " %s=%d", k, t.Kinds[k])
		}
		fmt.Fprintln(w)
		for _, n := range t.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	if r.Defects() == 0 {
		fmt.Fprintln(w, "\nno defects")
		return
	}
	fmt.Fprintf(w, "\n%d defects (at most %d shown per kind and reason):\n", r.Defects(), maxDefectsKept)
	for _, t := range r.Tallies {
		for _, d := range t.Defects {
			where := fmt.Sprintf("case %d", d.Case)
			if d.Case < 0 {
				where = "family check"
			}
			fmt.Fprintf(w, "\n- %s %s (%s): %s\n", d.Family, where, d.Kind, d.Why)
			if d.Case >= 0 {
				engine := ""
				if r.Engine != "" && r.Engine != "vllm" {
					engine = " --engine " + r.Engine
				}
				fmt.Fprintf(w, "  reproduce: llbsim attack --seed %d --net %s%s --family %s --case %d\n", r.Seed, r.Net, engine, d.Family, d.Case)
			}
			if d.Repro != "" {
				fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(d.Repro, "\n", "\n  "))
			}
		}
	}
}

// quote shows b as a Go string literal, shortened to about max bytes
// (head and tail) when longer.
func quote(b []byte, max int) string {
	if len(b) <= max {
		return fmt.Sprintf("%q", b)
	}
	h := max * 3 / 4
	return fmt.Sprintf("%q … (%d bytes elided) … %q [%d bytes in all]", b[:h], len(b)-max, b[len(b)-(max-h):], len(b))
}

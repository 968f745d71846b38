package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// seedSet is one seed's runs of a law and two peers on "a" (load-factor)
// and "a-step" at load 0.5.
func seedSet(law, dynamo, llmd, lawStep, peerStep float64) *Dataset {
	d := &Dataset{Scenarios: []Scenario{{Name: "a"}, {Name: "a-step"}}}
	d.Runs = append(d.Runs,
		run("a", GroupStrategies, "headroom", 0.5, law, law, 0.8),
		run("a", GroupStrategies, "dynamo", 0.5, dynamo, dynamo, 0.8),
		run("a", GroupStrategies, "llm-d", 0.5, llmd, llmd, 0.8),
		run("a", GroupStrategies, "rr", 0.5, 0.001, 0.001, 0.1), // not a peer: never the best peer
		run("a-step", GroupStrategies, "headroom", 0.5, lawStep, lawStep, 0.8),
		run("a-step", GroupStrategies, "sglang", 0.5, peerStep, peerStep, 0.8),
	)
	return d
}

func TestSeedComparison_GeomeanOfEachSeedsRatioToItsBestPeer(t *testing.T) {
	ds := []*Dataset{seedSet(1.0, 2.0, 0.5, 1, 1), seedSet(1.0, 0.5, 4.0, 1, 1.01)}
	cells := SeedComparison(ds, "headroom")
	if len(cells) != 2 {
		t.Fatalf("got %d cells; want 2", len(cells))
	}
	a := cells[0]
	// Seed 1: 1.0 / llm-d's 0.5 = 2; seed 2: 1.0 / dynamo's 0.5 = 2.
	if a.Scenario != "a" || len(a.Ratios) != 2 || math.Abs(a.Geomean-2) > 1e-12 || a.Verdict() != "lose" || a.Best != 0.5 || a.Law != 1 {
		t.Fatalf("cell a %+v", a)
	}
	// 1/1 and 1/1.01: geomean 0.995, a tie.
	if got := cells[1]; got.Verdict() != "tie" || math.Abs(got.Geomean-math.Sqrt(1/1.01)) > 1e-12 {
		t.Fatalf("cell a-step %+v", got)
	}
	var out bytes.Buffer
	if err := WriteSeedComparison(&out, ds, []string{"headroom"}, -1); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 seeds", "load-factor      0     0      1", "step             0     1      0", "2.00 2.00"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestMerge_JoinsScenariosOfOneSeedAndNamesTheOtherCommit(t *testing.T) {
	a := sample()
	a.Meta.Commit = "aaa"
	b := &Dataset{Meta: a.Meta, Scenarios: []Scenario{{Name: "trace"}}, Runs: []Run{run("trace", GroupStrategies, "headroom", 0.5, 1, 1, 0.3)}}
	b.Meta.Commit = "bbb"
	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Scenarios) != 3 || len(m.Runs) != len(a.Runs)+1 || m.Meta.Commit != "aaa" {
		t.Fatalf("%d scenarios, %d runs, commit %q", len(m.Scenarios), len(m.Runs), m.Meta.Commit)
	}
	if note := m.Meta.Notes[len(m.Meta.Notes)-1]; !strings.Contains(note, "trace") || !strings.Contains(note, "bbb") {
		t.Fatalf("last note %q; want one naming the scenario and its commit", note)
	}
	if len(a.Meta.Notes) != 1 {
		t.Fatal("merge changed its first input's notes")
	}
	if _, err := Merge(a, a); err == nil {
		t.Fatal("merging a scenario twice: no error")
	}
	c := *b
	c.Meta.Seed = 2
	if _, err := Merge(a, &c); err == nil {
		t.Fatal("merging two seeds: no error")
	}
}

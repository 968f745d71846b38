package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// run builds a synthetic run.
func run(scenario, group, strategy string, load, p90, mean, hit float64) Run {
	return Run{
		Scenario: scenario, Group: group, Strategy: strategy, Load: load, Rate: 10 * load, Requests: 100,
		TTFT:    Latency{Mean: mean, P50: mean / 2, P90: p90, P99: 2 * p90},
		E2E:     Latency{P90: p90 + 3},
		HitRate: hit, OracleHitRate: 0.9, Throughput: 10 * load, Goodput: 9 * load, TTFTSLO: 2,
		TierMix: map[string]int{"1.5": 90, "sel:rr": 10}, LoadSkew: 1.1, HottestTTFTP90: p90 * 1.5,
		Workers: []Worker{{Requests: 50, TTFTP90: p90, HitRate: hit, MeanActive: 3}, {Requests: 50, TTFTP90: p90, HitRate: hit, MeanActive: 2}},
	}
}

// sample is a small dataset with every group and both target scenarios.
func sample() *Dataset {
	d := &Dataset{
		Meta: Meta{Schema: SchemaVersion, Source: SourceDES, Generator: "test", Seed: 1, Method: "m", Notes: []string{"n"}},
		Scenarios: []Scenario{
			{Name: "shared-prefix", Workload: "w", Workers: 2, Worker: "x", CacheBlocksPerWorker: 10, BlockSize: 16, Requests: 100,
				WorkingSetBlocks: 30, Pressure: 1.5, OracleHitRate: 0.9, PooledHitRate: 0.8, PooledLoad: 0.7, SaturationRate: 10, SaturationStrategy: "hard",
				Probes: []Probe{{Rate: 5, Stable: true}, {Rate: 20}}},
			{Name: "hot-prefix", Workload: "h", Workers: 2, SaturationRate: 50},
		},
	}
	for _, l := range []float64{0.5, 0.7} {
		d.Runs = append(d.Runs,
			run("shared-prefix", GroupStrategies, "rr", l, 2.0, 1.0, 0.1),
			run("shared-prefix", GroupStrategies, "chwbl", l, 0.5, 0.3, 0.6),
			run("shared-prefix", GroupStrategies, "headroom", l, 0.2, 0.1, 0.85),
			run("hot-prefix", GroupStrategies, "off", l, 20, 10, 0.9),
			run("hot-prefix", GroupStrategies, "headroom", l, 0.1, 0.05, 0.9),
		)
	}
	for _, f := range []struct {
		name   string
		factor uint32
		p90    [2]float64
	}{{"hard@125", 125, [2]float64{0.30, 0.20}}, {"hard@175", 175, [2]float64{0.20, 0.40}}, {"adaptive", 175, [2]float64{0.25, 0.25}}} {
		for i, l := range []float64{0.5, 0.7} {
			r := run("shared-prefix", GroupEpsilon, f.name, l, f.p90[i], f.p90[i]/2, 0.8)
			r.FactorPct, r.MeanFactorPct = f.factor, 180+float64(i)*40
			d.Runs = append(d.Runs, r)
		}
	}
	for _, l := range []float64{0.5, 0.7} {
		r := run("shared-prefix", GroupLambda, "soft@32", l, 0.2, 0.1, 0.8)
		r.Lambda = 32
		a := run("shared-prefix", GroupLambda, "adaptive-soft", l, 0.2, 0.1, 0.8)
		a.Lambda, a.MeanLambda = 32, 50000
		d.Runs = append(d.Runs, r, a)
	}
	return d
}

func TestJSONL_RoundTrips(t *testing.T) {
	d := sample()
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, d); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1+len(d.Scenarios)+len(d.Runs) {
		t.Fatalf("%d lines; want one per meta, scenario and run", n)
	}
	got, err := ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, d) {
		t.Fatalf("round trip changed the dataset:\n got %+v\nwant %+v", got, d)
	}
}

func TestReadJSONL_RejectsBadFiles(t *testing.T) {
	meta := `{"kind":"meta","meta":{"schema":1,"source":"http","generator":"g","seed":1}}`
	for _, tc := range []struct {
		name string
		give string
	}{
		{"empty", ""},
		{"no meta", `{"kind":"scenario","scenario":{"name":"a"}}`},
		{"other schema", `{"kind":"meta","meta":{"schema":2}}`},
		{"two metas", meta + "\n" + meta},
		{"not JSON", meta + "\n{"},
		{"kind without payload", meta + "\n" + `{"kind":"run"}`},
		{"unknown kind", meta + "\n" + `{"kind":"x","run":{}}`},
		{"run of an unknown scenario", meta + "\n" + `{"kind":"run","run":{"scenario":"nope","strategy":"rr"}}`},
		{"repeated scenario", meta + "\n" + `{"kind":"scenario","scenario":{"name":"a"}}` + "\n" + `{"kind":"scenario","scenario":{"name":"a"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReadJSONL(strings.NewReader(tc.give)); !errors.Is(err, ErrSchema) {
				t.Fatalf("got %v; want ErrSchema", err)
			}
		})
	}
	// A harness dataset with only what HTTP can measure is fine.
	ok := meta + "\n" + `{"kind":"scenario","scenario":{"name":"a"}}` + "\n" + `{"kind":"run","run":{"scenario":"a","group":"strategies","strategy":"hard","load":0.7,"ttft_s":{"p90":0.3}}}`
	if _, err := ReadJSONL(strings.NewReader(ok)); err != nil {
		t.Fatalf("a minimal harness file: %v", err)
	}
}

func TestWrite_ProducesParseableSVGAndMarkdown(t *testing.T) {
	dir := t.TempDir()
	files, err := Write(dir, sample(), DefaultTargets())
	if err != nil {
		t.Fatal(err)
	}
	var svgs int
	for _, f := range files {
		if !strings.HasSuffix(f, ".svg") {
			continue
		}
		svgs++
		checkSVG(t, filepath.Join(dir, f))
	}
	// shared-prefix: ttft, hit, throughput, two heat maps; hot-prefix: three.
	if svgs != 8 {
		t.Fatalf("%d SVG files (%v); want 8", svgs, files)
	}
	md, err := os.ReadFile(filepath.Join(dir, ReadmeFile))
	if err != nil {
		t.Fatal(err)
	}
	checkMarkdown(t, dir, string(md))
	for _, want := range []string{
		"## Targets (issues 7 and 18)", "## shared-prefix", "### Strategies at 70% load", "pooled cache (bound)",
		"### ε sweep", "### λ sweep", "hit 0.850 / oracle 0.900 = 94.4%", "30.0 s → 0.150 s (−100%)",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("README lacks %q", want)
		}
	}
}

// checkSVG parses path as XML to the end and wants an <svg> root.
func checkSVG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q; want svg", path, root)
	}
}

// checkMarkdown checks that every image link names a written file and every
// table row has its header's column count.
func checkMarkdown(t *testing.T, dir, md string) {
	t.Helper()
	for _, m := range regexp.MustCompile(`!\[[^\]]*\]\(([^)]+)\)`).FindAllStringSubmatch(md, -1) {
		if _, err := os.Stat(filepath.Join(dir, m[1])); err != nil {
			t.Errorf("image link %s: %v", m[1], err)
		}
	}
	cells := func(row string) int { return len(regexp.MustCompile(`(^|[^\\])\|`).FindAllString(row, -1)) - 1 }
	want := -1
	for i, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			want = -1
			continue
		}
		if want < 0 {
			want = cells(line)
			continue
		}
		if got := cells(line); got != want {
			t.Errorf("markdown line %d has %d cells; its table has %d: %s", i+1, got, want, line)
		}
	}
}

func TestTargets_Evaluate(t *testing.T) {
	d := sample()
	got := DefaultTargets().Evaluate(d)
	want := []struct {
		pass  bool
		value float64
	}{
		{true, 0.85 / 0.9}, // hit rate vs oracle
		{true, 0.2 / 2.0},  // vs RR
		{true, 0.2 / 0.5},  // vs CHWBL
		{true, 1 - 0.15/30},
	}
	if len(got) != len(want) {
		t.Fatalf("%d targets; want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Pass != w.pass || math.Abs(got[i].Value-w.value) > 1e-9 || got[i].Missing {
			t.Errorf("target %d (%s): %+v; want pass=%v value=%v", i, got[i].Target, got[i], w.pass, w.value)
		}
	}
	// Worse numbers miss; absent runs are reported missing, never passed.
	for i := range d.Runs {
		if d.Runs[i].Strategy == "headroom" && d.Runs[i].Group == GroupStrategies {
			d.Runs[i].HitRate, d.Runs[i].TTFT.P90, d.Runs[i].HottestTTFTP90 = 0.5, 1.9, 25
		}
	}
	for _, r := range DefaultTargets().Evaluate(d) {
		if r.Pass {
			t.Errorf("%s passed with worse numbers: %s", r.Target, r.Measured)
		}
	}
	// The shared-prefix targets are read on the Also scenarios the dataset
	// holds, after the issue's own scenario and before the hot-prefix one.
	d.Scenarios = append(d.Scenarios, Scenario{Name: "shared-prefix-zipf"})
	for _, r := range d.Select("shared-prefix", GroupStrategies) {
		r.Scenario = "shared-prefix-zipf"
		d.Runs = append(d.Runs, r)
	}
	all := DefaultTargets().Evaluate(d)
	if len(all) != 7 || all[3].Scenario != "shared-prefix-zipf" || all[6].Scenario != "hot-prefix" {
		t.Fatalf("with an Also scenario: %+v", all)
	}
	tg := DefaultTargets()
	tg.Load = 0.9
	for _, r := range tg.Evaluate(d) {
		if !r.Missing || r.Pass {
			t.Errorf("%s at a load without runs: %+v", r.Target, r)
		}
	}
}

func TestSweepBest_LowestP90TiesBrokenByMean(t *testing.T) {
	g := NewGrid(sample().Select("shared-prefix", GroupEpsilon))
	knob := func(r *Run) float64 { return float64(r.FactorPct) }
	bs := SweepBest(g, "adaptive", knob)
	if len(bs) != 2 {
		t.Fatalf("%d loads; want 2", len(bs))
	}
	if bs[0].Strategy != "hard@175" || bs[0].Knob != 175 || bs[0].Value != 0.20 || bs[0].Adaptive != 0.25 || bs[0].AdaptiveKnob != 180 {
		t.Fatalf("load 50%%: %+v", bs[0])
	}
	if bs[1].Strategy != "hard@125" || bs[1].Knob != 125 || bs[1].AdaptiveKnob != 220 {
		t.Fatalf("load 70%%: %+v", bs[1])
	}
	if got := BestTrend(bs); got != TrendShrinks {
		t.Fatalf("trend %q; want %q", got, TrendShrinks)
	}

	// Ties within 2 % go to the lower mean TTFT.
	tied := []Run{
		run("s", GroupEpsilon, "hard@125", 0.5, 1.00, 0.9, 0),
		run("s", GroupEpsilon, "hard@300", 0.5, 1.01, 0.5, 0),
		run("s", GroupEpsilon, "hard@200", 0.5, 1.30, 0.1, 0),
	}
	for i, f := range []uint32{125, 300, 200} {
		tied[i].FactorPct = f
	}
	b := SweepBest(NewGrid(tied), "adaptive", knob)[0]
	if b.Strategy != "hard@300" || len(b.Strategies) != 2 || !math.IsNaN(b.Adaptive) {
		t.Fatalf("tie: %+v; want hard@300 best among hard@125 and hard@300, no adaptive", b)
	}
}

func TestBestTrend(t *testing.T) {
	seq := func(knobs ...float64) []Best {
		out := make([]Best, len(knobs))
		for i, k := range knobs {
			out[i] = Best{Knob: k}
		}
		return out
	}
	for _, tc := range []struct {
		give []Best
		want Trend
	}{
		{seq(150), TrendFlat},
		{seq(150, 150, 150), TrendFlat},
		{seq(125, 150, 150, 300), TrendGrows},
		{seq(300, 175, 175), TrendShrinks},
		{seq(150, 300, 125), TrendMixed},
	} {
		if got := BestTrend(tc.give); got != tc.want {
			t.Errorf("%v: got %q; want %q", tc.give, got, tc.want)
		}
	}
}

func TestRowPosition_InterpolatesOnTheKnobScale(t *testing.T) {
	rows := []float64{100, 125, 150, 175, 200, 250, 300}
	id := func(v float64) float64 { return v }
	for _, tc := range []struct{ give, want float64 }{
		{50, 0}, {100, 0}, {112.5, 0.5}, {175, 3}, {225, 4.5}, {300, 6}, {400, 6},
	} {
		if got := rowPosition(rows, tc.give, id); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("rowPosition(%v) = %v; want %v", tc.give, got, tc.want)
		}
	}
}

func TestWriteSummary_PrintsTablesTargetsAndTrends(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSummary(&buf, sample(), DefaultTargets()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"shared-prefix at 70% load", "headroom ", "best factor by load: 50%→175, 70%→125; the best factor shrinks with load",
		"[pass] headroom hit rate", "targets (issues 7 and 18):",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func TestWrite_SingleStrategyAtOneLoadRendersItsLogAxes(t *testing.T) {
	d := &Dataset{
		Meta:      Meta{Schema: SchemaVersion, Source: SourceHTTP, Generator: "test", Seed: 1},
		Scenarios: []Scenario{{Name: "shared-prefix", Workers: 2, SaturationRate: 10}},
		Runs:      []Run{run("shared-prefix", GroupStrategies, "headroom", 0.7, 0.5, 0.3, 0.8)},
	}
	files, err := Write(t.TempDir(), d, DefaultTargets())
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if len(files) == 0 {
		t.Fatal("no files written")
	}
}

// closedSample is a closed-loop light-load scenario: chwbl and headroom at
// three client counts.
func closedSample() *Dataset {
	d := &Dataset{
		Meta: Meta{Schema: SchemaVersion, Source: SourceDES, Generator: "test", Seed: 1},
		Scenarios: []Scenario{{Name: "light-load", Workload: "w", Workers: 4, Worker: "x", CacheBlocksPerWorker: 170,
			WorkingSetBlocks: 900, Pressure: 1.3, OracleHitRate: 0.9, Concurrency: []int{1, 4, 16, 32}}},
	}
	for i, c := range []int{1, 4, 16, 32} {
		chwbl := run("light-load", GroupStrategies, "chwbl", 0, 0.12, 0.05, 0.6)
		mine := run("light-load", GroupStrategies, "headroom", 0, 0.12-0.01*float64(i), 0.04, 0.7)
		for _, r := range []*Run{&chwbl, &mine} {
			r.Load, r.Rate, r.Concurrency, r.Throughput = 0, 0, c, float64(min(c, 16))
		}
		d.Runs = append(d.Runs, chwbl, mine)
	}
	return d
}

func TestTargets_LightLoadHoldsAtEveryConcurrencyOrNamesTheMisses(t *testing.T) {
	tg := DefaultTargets()
	tg.LightLoad = []string{"light-load"}
	d := closedSample()
	if got := SaturationLevel(NewGrid(d.Select("light-load", GroupStrategies)), "headroom"); got != 16 {
		t.Fatalf("saturation level %v; want 16 (throughput peaks there)", got)
	}
	got := tg.Evaluate(d)
	ll := got[len(got)-2:]
	if !ll[0].Pass || !strings.Contains(ll[0].Measured, "all 3 levels to saturation at c=16") {
		t.Errorf("%s: %+v; want a pass over c=1..16", ll[0].Target, ll[0])
	}
	if !ll[1].Pass || !strings.Contains(ll[1].Measured, "all 4 levels") {
		t.Errorf("%s: %+v; want a pass over all 4 levels", ll[1].Target, ll[1])
	}
	// Worse at c=4: both targets miss and name that level. Worse hit rate
	// past saturation (c=32) is listed but not judged.
	for i := range d.Runs {
		r := &d.Runs[i]
		if r.Strategy != "headroom" {
			continue
		}
		switch r.Concurrency {
		case 4:
			r.HitRate, r.TTFT.P90 = 0.5, 0.2
		case 32:
			r.HitRate = 0.4
		}
	}
	got = tg.Evaluate(d)
	for _, r := range got[len(got)-2:] {
		if r.Pass || !strings.Contains(r.Measured, "levels miss: c=4") {
			t.Errorf("%s: %+v; want a miss naming c=4", r.Target, r)
		}
	}
	if m := got[len(got)-2].Measured; !strings.Contains(m, "past saturation, not judged: c=32: 0.400 vs 0.600") {
		t.Errorf("hit-rate target %q does not list c=32 past saturation", m)
	}
}

func TestWrite_ClosedLoopScenarioTablesByConcurrency(t *testing.T) {
	dir := t.TempDir()
	tg := DefaultTargets()
	tg.LightLoad = []string{"light-load"}
	if _, err := Write(dir, closedSample(), tg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ReadmeFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### TTFT p90 (s) by concurrency", "| strategy | c=1 | c=4 | c=16 | c=32 |", "closed loop, 1–32 in flight",
		"headroom hit rate ≥ chwbl's up to saturation", "light-load-ttft.svg"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("README lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "light-load-hit.svg")); err != nil {
		t.Fatal(err)
	}
}

package harness

import (
	"bufio"
	"math"
	"strconv"
	"strings"
	"testing"
)

// exposition renders llbd's prediction histogram for endpoints whose
// cumulative bucket counts are cums, as /metrics writes it, with a series
// of another name around it.
func exposition(cums ...[14]float64) string {
	bounds := []string{"-0.75", "-0.5", "-0.2", "-0.1", "-0.05", "0", "0.05", "0.1", "0.2", "0.5", "1", "2", "4", "+Inf"}
	var b strings.Builder
	b.WriteString("# HELP llb_ttft_prediction_error_ratio x\n# TYPE llb_ttft_prediction_error_ratio histogram\nllb_other_total 7\n")
	for i, cum := range cums {
		labels := `service="s",ep_idx="` + strconv.Itoa(i) + `",endpoint="10.0.0.1:8000"`
		for j, le := range bounds {
			b.WriteString("llb_ttft_prediction_error_ratio_bucket{" + labels + `,le="` + le + `"} ` + strconv.FormatFloat(cum[j], 'g', -1, 64) + "\n")
		}
		b.WriteString("llb_ttft_prediction_error_ratio_sum{" + labels + "} 1.5\n")
		b.WriteString("llb_ttft_prediction_error_ratio_count{" + labels + "} " + strconv.FormatFloat(cum[13], 'g', -1, 64) + "\n")
	}
	return b.String()
}

func TestPredCounts_MeasuredWindowSharesWithin20And50Pct(t *testing.T) {
	parse := func(s string) predCounts {
		t.Helper()
		p, err := parsePredCounts(bufio.NewScanner(strings.NewReader(s)))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// At the warm-up boundary endpoint 0 had 10 predictions, all more
	// than 50 % off (the prior); endpoint 1 none.
	warm := parse(exposition([14]float64{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 10, 10, 10, 10}, [14]float64{}))
	// At the end: endpoint 0 added 10, 6 of them within 20 %, 9 within
	// 50 %; endpoint 1 has 10, 4 within 20 % and 10 within 50 %.
	end := parse(exposition(
		[14]float64{5, 5, 6, 7, 8, 9, 10, 11, 12, 14, 20, 20, 20, 20},
		[14]float64{0, 0, 3, 4, 5, 5, 5, 6, 7, 10, 10, 10, 10, 10}))
	got := end.since(warm)
	if got.Compared != 20 || math.Abs(got.Within20-0.5) > 1e-9 || math.Abs(got.Within50-0.95) > 1e-9 {
		t.Fatalf("got %+v; want 20 compared, 50 %% within 20 %%, 95 %% within 50 %%", got)
	}
	if none := warm.since(warm); none != (TTFTPrediction{}) {
		t.Fatalf("no predictions in the window: got %+v", none)
	}
	if _, err := parsePredCounts(bufio.NewScanner(strings.NewReader(`llb_ttft_prediction_error_ratio_count{ep_idx="0"} many` + "\n"))); err == nil {
		t.Fatal("a malformed value parsed")
	}
}

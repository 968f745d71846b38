package report

import (
	"os"
	"testing"
)

func TestScratchPNG(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	f, _ := os.Open("/tmp/full/results.jsonl")
	d, err := ReadJSONL(f)
	if err != nil {
		t.Fatal(err)
	}
	figs, err := Figures(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, fg := range figs {
		if fg.File == "shared-prefix-epsilon-heat.svg" || fg.File == "shared-prefix-ttft.svg" || fg.File == "shared-prefix-hit.svg" {
			if err := fg.plot.Save(plotW, plotH, "/tmp/"+fg.File+".png"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

package ladder

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// The LoRA policy's golden scenarios (testdata/lora): one `lora` command per
// request, one input line per endpoint:
//
//	<ep> [res] [wait] [load] [unknown] [out] adapters=N max=N queued=N
//
// res: the adapter is resident; wait: it waits there; load: the endpoint
// would load it at runtime; unknown: no gauge; out: not eligible. The
// output is the mask and the outcome. `go test ./ladder -run TestLoRAGolden
// -rewrite` regenerates it.
func TestLoRAGolden(t *testing.T) {
	datadriven.Walk(t, "testdata/lora", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "lora" {
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			var cands []LoRACandidate
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				f := strings.Fields(line)
				c := LoRACandidate{Eligible: true, Known: true}
				for _, w := range f[1:] {
					k, v, _ := strings.Cut(w, "=")
					n, _ := strconv.Atoi(v)
					switch k {
					case "res":
						c.Resident = true
					case "wait":
						c.Resident, c.Waiting = true, true
					case "load":
						c.Loadable = true
					case "unknown":
						c.Known = false
					case "out":
						c.Eligible = false
					case "adapters":
						c.Adapters = n
					case "max":
						c.MaxLoRA = n
					case "queued":
						c.Queued = uint32(n)
					default:
						d.Fatalf(t, "unknown field %q", w)
					}
				}
				cands = append(cands, c)
			}
			set, why := LoRAChoice(cands)
			var eps []string
			for i := range cands {
				if set.Has(i) {
					eps = append(eps, fmt.Sprintf("ep%d", i))
				}
			}
			return fmt.Sprintf("mask=%s why=%s\n", strings.Join(eps, ","), why)
		})
	})
}

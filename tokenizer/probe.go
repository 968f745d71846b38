package tokenizer

import (
	"fmt"
	"time"

	"github.com/llbproject/llb/tokenizer/jinja"
)

// RenderProbe renders a template with variables given as a JSON object,
// with strftime_now on clock now. It exists for the parity tests'
// feature probes.
func RenderProbe(src string, varsJSON []byte, now time.Time) (string, error) {
	tmpl, err := jinja.Parse(src)
	if err != nil {
		return "", err
	}
	v, err := jinja.ParseJSON(varsJSON)
	if err != nil {
		return "", err
	}
	d, ok := v.(*jinja.Dict)
	if !ok {
		return "", fmt.Errorf("probe vars: not an object")
	}
	vars := map[string]jinja.Value{"strftime_now": jinja.StrftimeNow(func() time.Time { return now })}
	for _, k := range d.Keys() {
		vars[k], _ = d.Get(k)
	}
	return tmpl.Render(vars)
}

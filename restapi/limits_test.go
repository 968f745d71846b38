package restapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func ruleOnPort(port int, annotation string) string {
	ann := ""
	if annotation != "" {
		ann = fmt.Sprintf(`,"annotations":{"note":%q}`, annotation)
	}
	return fmt.Sprintf(`{"serviceArguments":{"externalIP":"10.0.0.1","port":%d,"protocol":"tcp","mode":4%s},`+
		`"endpoints":[{"endpointIP":"10.0.1.1","targetPort":8000,"weight":1}]}`, port, ann)
}

func TestLimits_RuleCountIsBounded(t *testing.T) {
	ts := started(t, func(c *Config) { c.MaxRules = 3 })
	for p := 1; p <= 3; p++ {
		ts.mustPost(ruleOnPort(2000+p, ""))
	}
	r := ts.post(ruleOnPort(2004, ""))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "at most 3 rules (--max-rules), got 4") {
		t.Fatalf("fourth rule: %d %s; want 422 naming the limit", r.status, r.body)
	}
	if got := len(ts.all()); got != 3 {
		t.Fatalf("%d rules stored; want 3", got)
	}
	// Replacing an existing rule at the limit still works.
	ts.mustPost(ruleOnPort(2001, "replaced"))
}

func TestLimits_RuleSizeIsBoundedAndNamesTheLargestPart(t *testing.T) {
	ts := started(t, func(c *Config) { c.MaxRuleBytes = 4 << 10 })
	r := ts.post(ruleOnPort(2001, strings.Repeat("x", 8<<10)))
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("oversized rule: %d %s; want 422", r.status, r.body)
	}
	b := r.errBody(t)
	if len(b.Fields) != 1 || b.Fields[0] != "serviceArguments.annotations" || !strings.Contains(b.Message, "more than the limit of 4096 bytes (--max-rule-bytes)") {
		t.Fatalf("error %+v; want the annotations named and the limit", b)
	}
	if got := len(ts.all()); got != 0 {
		t.Fatalf("%d rules stored; want none", got)
	}
	ts.mustPost(ruleOnPort(2001, strings.Repeat("x", 1<<10)))
}

package catalog

import (
	"strings"
	"testing"

	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

func TestTable_DecisionsAreValuesWithTraces(t *testing.T) {
	req := func(body string) rule.Rule {
		t.Helper()
		return normalized(t, body)
	}
	ids := seqIDs()
	t0 := newRules(nil)
	t1, ch, err := t0.Upsert(req(ruletest.SingleEntry(t).JSON(t)), 0, testEpoch, ids)
	if err != nil || ch.Kind != ChangeCreated || ch.Old != nil || ch.New.ID() != "id-1" {
		t.Fatalf("create: got %+v, %v; want created with a minted id", ch, err)
	}
	if len(t0.order) != 0 {
		t.Fatalf("the old table changed: tables are immutable")
	}
	_, ch, err = t1.Upsert(req(ruletest.SingleEntry(t).Set("endpoints.0.weight", 3).JSON(t)), 0, testEpoch, ids)
	if err != nil || ch.Kind != ChangeReplaced || ch.Old == nil {
		t.Fatalf("replace: got %+v, %v", ch, err)
	}
	trace := strings.Join(ch.Trace, "; ")
	if !strings.Contains(trace, "endpoint order kept: 2 kept in place, 0 appended, 0 dropped") || !strings.Contains(trace, "kept id from the stored rule") {
		t.Errorf("trace: got %q", trace)
	}
}

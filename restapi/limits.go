package restapi

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/rule"
)

// Configuration bounds: a single POST must not be able to grow the rule file
// (and the heap that holds it) without limit. Both are checked on every
// write, after the merge, against the rules as they would be stored.
const (
	// DefaultMaxRules is the most rules the daemon holds (Config.MaxRules).
	DefaultMaxRules = 1024
	// DefaultMaxRuleBytes bounds one rule as stored, in bytes of compact
	// JSON (Config.MaxRuleBytes). A 32-endpoint rule with every probe and
	// mTLS field set stays well below it.
	DefaultMaxRuleBytes = 64 << 10
)

// checkLimits refuses a write whose result holds more rules than MaxRules
// (only when the write adds one: a daemon restored above a lowered limit
// keeps serving and may still shrink) or a changed rule larger than
// MaxRuleBytes, with a 422 naming the limit and the rule's largest part.
func (s *Server) checkLimits(prev, next *catalog.Rules, changes []catalog.Change) error {
	var ps []rule.Problem
	if n := next.Len(); n > s.cfg.MaxRules && n > prev.Len() {
		ps = append(ps, rule.SchemaProblem("rules", rule.CodeMax,
			"should hold at most %d rules (--max-rules), got %d: delete a rule first", s.cfg.MaxRules, n))
	}
	for _, ch := range changes {
		if ch.New == nil {
			continue
		}
		rec, ok := next.ByKey(ch.Key)
		if !ok || rec.Size() <= s.cfg.MaxRuleBytes {
			continue
		}
		field, size := largestPart(&rec.Rule.Entry)
		ps = append(ps, rule.Problem{Field: field, Code: rule.CodeMax, Msg: fmt.Sprintf(
			"rule %s is %d bytes as stored, more than the limit of %d bytes (--max-rule-bytes); its largest part is %s (%d bytes)",
			ch.Key, rec.Size(), s.cfg.MaxRuleBytes, field, size)})
	}
	return rule.ProblemsErr(ps)
}

// largestPart names the biggest top-level part of a rule as stored (a
// serviceArguments key, endpoints, secondaryVIPs, ...) and its size.
func largestPart(e *rule.LoadbalanceEntry) (string, int) {
	type part struct {
		name string
		size int
	}
	var parts []part
	add := func(name string, v any) {
		if b, err := json.Marshal(v); err == nil {
			parts = append(parts, part{name, len(b)})
		}
	}
	add("endpoints", e.Endpoints)
	add("secondaryIPs", e.SecondaryIPs)
	add("secondaryVIPs", e.SecondaryVIPs)
	add("allowedSources", e.AllowedSources)
	if sa := e.ServiceArguments; sa != nil {
		if b, err := json.Marshal(sa); err == nil {
			var keys map[string]json.RawMessage
			if json.Unmarshal(b, &keys) == nil {
				for k, v := range keys {
					parts = append(parts, part{rule.SAField(k), len(v)})
				}
			}
		}
	}
	best := slices.MaxFunc(parts, func(a, b part) int {
		if a.size != b.size {
			return a.size - b.size
		}
		return -cmp.Compare(a.name, b.name) // ties: the alphabetically first name
	})
	return best.name, best.size
}

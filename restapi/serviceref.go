package restapi

import (
	"fmt"
	"strings"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/rule"
)

// How the data-plane views (KV inventory, controller) name a rule and one of
// its endpoints. LoxiLB names a rule by its numeric service id; llb accepts
// the rule key as RuleKey.String prints it ("tcp:10.10.10.254:2020@10.10.10.254")
// or the rule's id (serviceArguments.id, which LoxiLB-style numeric ids fit),
// and an endpoint by its index in the rule (ep_idx).

// lookupService finds the rule ref names: its key first, then its id. A miss
// wraps ErrNoRule and, when ref is a prefix of a rule key (a key typed
// without its host or block suffix), names that rule.
func lookupService(t *catalog.Rules, ref string) (*catalog.RuleRecord, error) {
	for _, r := range t.All() {
		if r.Rule.Key.String() == ref {
			return r, nil
		}
	}
	if r, ok := t.ByID(ref); ok {
		return r, nil
	}
	hint := ""
	for _, r := range t.All() {
		if k := r.Rule.Key.String(); strings.HasPrefix(k, ref) {
			hint = fmt.Sprintf(" (did you mean rule %s? give the whole key, as GET by key shows it, or the rule id)", k)
			break
		}
	}
	return nil, fmt.Errorf("%w: no rule has key or id %q%s", ErrNoRule, ref, hint)
}

// endpointIndex checks that ep indexes one of r's endpoints, or wraps
// ErrNoEndpoint.
func endpointIndex(r *rule.Rule, ep int) error {
	if n := len(r.Effective.Endpoints); ep < 0 || ep >= n {
		return fmt.Errorf("%w: rule %s has %d endpoints (ep_idx 0–%d), not ep_idx %d", ErrNoEndpoint, r.Key, n, n-1, ep)
	}
	return nil
}

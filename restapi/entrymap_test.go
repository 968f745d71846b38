package restapi

import (
	"testing"

	"github.com/llbproject/llb/rule/ruletest"
)

// Request bodies that test cases edit by dotted path come from ruletest,
// which rule's validation table shares.
type entry = ruletest.Entry

// Fixtures: minimal valid rules of each shape, and the seed page's two curl
// examples with 127.0.0.1 for every address (shared with cmd/llbd's
// end-to-end tests; README shows the same bodies).
const (
	singleFixture = ruletest.SingleJSON
	l4Fixture     = ruletest.L4JSON
)

var (
	pdExample    = ruletest.SeedExample("pd-kv-exact.json")
	chwblExample = ruletest.SeedExample("chwbl.json")
)

func single(t testing.TB) entry { return ruletest.SingleEntry(t) }
func l4(t testing.TB) entry     { return ruletest.L4Entry(t) }
func pd(t testing.TB) entry     { return ruletest.PDEntry(t) }
func chwbl(t testing.TB) entry  { return ruletest.CHWBLEntry(t) }

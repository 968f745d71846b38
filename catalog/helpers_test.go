package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/catalog/statefs"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

// The seed page's two curl examples with 127.0.0.1 for every address.
var (
	pdExample    = ruletest.SeedExample("pd-kv-exact.json")
	chwblExample = ruletest.SeedExample("chwbl.json")
)

var testEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testNow() time.Time { return testEpoch }

func seqIDs() func() string {
	var n atomic.Int64
	return func() string { return fmt.Sprintf("id-%d", n.Add(1)) }
}

// decodeEntry decodes a rule body as plain encoding/json does (the
// fixtures are well formed; restapi.DecodeEntry adds the shape checks).
func decodeEntry(b []byte) (*rule.LoadbalanceEntry, error) {
	var e rule.LoadbalanceEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// normalized is body validated and normalized.
func normalized(t *testing.T, body string) rule.Rule {
	t.Helper()
	e, err := decodeEntry([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := rule.Validate(e); err != nil {
		t.Fatal(err)
	}
	r, err := rule.NormalizeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// nopRuntime applies nothing.
type nopRuntime struct{}

func (nopRuntime) Apply(context.Context, rule.Rule) error     { return nil }
func (nopRuntime) Remove(context.Context, rule.RuleKey) error { return nil }

// newTestCatalog is a Catalog on fsys at dir with a fixed clock and
// sequential ids.
func newTestCatalog(t *testing.T, fsys statefs.FS, dir string) *Catalog {
	t.Helper()
	c, err := New(Config{
		Logger: zerolog.Nop(), Metrics: metrics.NewSet(), Runtime: nopRuntime{}, DecodeEntry: decodeEntry,
		FS: fsys, StateDir: dir, StateFile: StateFileName, Now: testNow, NewID: seqIDs(), ApplyTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

package ruletest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Minimal valid rules of each shape in LoxiLB's JSON.
const (
	// SingleJSON is a round-robin mode:4 rule over two endpoints.
	SingleJSON = `{"serviceArguments":{"externalIP":"127.0.0.1","port":3000,"protocol":"tcp","mode":4},
	  "endpoints":[{"endpointIP":"127.0.0.1","targetPort":8000,"weight":1},{"endpointIP":"127.0.0.2","targetPort":8000,"weight":1}]}`
	// L4JSON is an L4 (mode 0) rule over one endpoint.
	L4JSON = `{"serviceArguments":{"externalIP":"127.0.0.1","port":3000,"protocol":"tcp"},
	  "endpoints":[{"endpointIP":"127.0.0.1","targetPort":8000,"weight":1}]}`
)

// SeedExample returns one of the repository's seed example rules
// (testdata/seed/<name>: the seed page's curl examples with 127.0.0.1 for
// every address, which README shows too). It panics when the file is
// missing: a test's fixture is wrong.
func SeedExample(name string) string {
	_, here, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "testdata", "seed", name))
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b))
}

// Entry is a rule in LoxiLB's JSON as a generic tree that a test edits by
// dotted path ("serviceArguments.sel", "endpoints.0.weight") before sending
// or validating it.
type Entry map[string]any

// ParseEntry parses s, failing t when it is not a JSON object.
func ParseEntry(t testing.TB, s string) Entry {
	t.Helper()
	var e Entry
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return e
}

// SingleEntry is SingleJSON as an Entry.
func SingleEntry(t testing.TB) Entry { return ParseEntry(t, SingleJSON) }

// L4Entry is L4JSON as an Entry.
func L4Entry(t testing.TB) Entry { return ParseEntry(t, L4JSON) }

// PDEntry is the seed page's P/D example with KV-exact routing.
func PDEntry(t testing.TB) Entry { return ParseEntry(t, SeedExample("pd-kv-exact.json")) }

// CHWBLEntry is the seed page's CHWBL example (duplicate endpoints included).
func CHWBLEntry(t testing.TB) Entry { return ParseEntry(t, SeedExample("chwbl.json")) }

// JSON encodes e.
func (e Entry) JSON(t testing.TB) string {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Set assigns v at path, creating missing objects on the way, and returns e.
func (e Entry) Set(path string, v any) Entry {
	e.walk(path, func(parent any, key string) {
		switch p := parent.(type) {
		case map[string]any:
			p[key] = v
		case []any:
			i, _ := strconv.Atoi(key)
			p[i] = v
		}
	})
	return e
}

// Del removes the key at path and returns e.
func (e Entry) Del(path string) Entry {
	e.walk(path, func(parent any, key string) {
		if p, ok := parent.(map[string]any); ok {
			delete(p, key)
		}
	})
	return e
}

// walk calls fn with the object or array holding path's last element.
func (e Entry) walk(path string, fn func(parent any, key string)) {
	parts := strings.Split(path, ".")
	var cur any = map[string]any(e)
	for _, p := range parts[:len(parts)-1] {
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[p]
			if !ok {
				next = map[string]any{}
				c[p] = next
			}
			cur = next
		case []any:
			i, _ := strconv.Atoi(p)
			cur = c[i]
		}
	}
	fn(cur, parts[len(parts)-1])
}

// EndpointEntries is n role-less endpoints, 127.0.0.1:8000+i, as Entry
// values for "endpoints".
func EndpointEntries(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"endpointIP": "127.0.0.1", "targetPort": 8000 + i, "weight": 1}
	}
	return out
}

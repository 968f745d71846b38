package restapi

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// entry is a request body as a generic JSON tree that test cases edit by
// dotted path ("serviceArguments.sel", "endpoints.0.weight").
type entry map[string]any

func parseEntry(t testing.TB, s string) entry {
	t.Helper()
	var e entry
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return e
}

func (e entry) json(t testing.TB) string {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// set assigns v at path; a nil v with del removes the key.
func (e entry) walk(path string, fn func(parent any, key string)) {
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

func (e entry) set(path string, v any) entry {
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

func (e entry) del(path string) entry {
	e.walk(path, func(parent any, key string) {
		if p, ok := parent.(map[string]any); ok {
			delete(p, key)
		}
	})
	return e
}

// Fixtures: minimal valid rules of each shape.
const (
	singleFixture = `{"serviceArguments":{"externalIP":"127.0.0.1","port":3000,"protocol":"tcp","mode":4},
	  "endpoints":[{"endpointIP":"127.0.0.1","targetPort":8000,"weight":1},{"endpointIP":"127.0.0.2","targetPort":8000,"weight":1}]}`
	l4Fixture = `{"serviceArguments":{"externalIP":"127.0.0.1","port":3000,"protocol":"tcp"},
	  "endpoints":[{"endpointIP":"127.0.0.1","targetPort":8000,"weight":1}]}`
)

func single(t testing.TB) entry { return parseEntry(t, singleFixture) }
func l4(t testing.TB) entry     { return parseEntry(t, l4Fixture) }
func pd(t testing.TB) entry     { return parseEntry(t, pdExample) }
func chwbl(t testing.TB) entry  { return parseEntry(t, chwblExample) }

func endpoints(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"endpointIP": "127.0.0.1", "targetPort": 8000 + i, "weight": 1}
	}
	return out
}

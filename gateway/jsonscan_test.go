package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

var jsonSeeds = []string{
	`{}`, `[]`, `""`, `0`, `-0.5e+3`, `true`, `null`, ` {"a" : [1, 2.0, {"b":null}] } `,
	`{"s":"\u00e9\ud83d\ude00\n\"x\\"}`, `"\ud800"`, `"\udc00x"`, "\"\xff\xfe\"", `"é"`,
	`{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`, `{"a"}`, `{"a":}`, `[`, `]`, `{"a":1}}`, `"\x"`,
	"\"a\tb\"", `tru`, `nul`, `[1 2]`, `{"a":1 "b":2}`, `{1:2}`, `"\u12"`, strings.Repeat("[", 20) + strings.Repeat("]", 20),
}

func TestValidJSON_AgreesWithEncodingJSON(t *testing.T) {
	for _, s := range jsonSeeds {
		if got, want := validJSON([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("validJSON(%q) = %v; want %v", s, got, want)
		}
	}
	deep := strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1)
	if validJSON([]byte(deep)) {
		t.Error("validJSON accepted nesting deeper than maxJSONDepth")
	}
}

func TestUnquote_AgreesWithEncodingJSON(t *testing.T) {
	for _, s := range []string{`""`, `"plain"`, `"a\nb\t\"c\"\\/\b\f\r"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`,
		`"\ud800"`, `"\ud800\u0041"`, `"\udc00"`, "\"\xff\"", `"é😀"`} {
		var want string
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatalf("seed %q: %v", s, err)
		}
		if got := unquote([]byte(s)); got != want {
			t.Errorf("unquote(%q) = %q; want %q", s, got, want)
		}
	}
}

func TestAppendTokenIDs(t *testing.T) {
	tests := []struct {
		give    string
		want    []uint32
		wantErr bool
	}{
		{`[1, 2 ,4294967295]`, []uint32{1, 2, 4294967295}, false},
		{`[]`, nil, false},
		{`[4294967296]`, nil, true},
		{`[-1]`, nil, true},
		{`[1.0]`, nil, true},
		{`[1e2]`, nil, true},
		{`["1"]`, nil, true},
		{`[01]`, nil, true},
	}
	for _, tt := range tests {
		got, err := appendTokenIDs(nil, []byte(tt.give))
		if (err != nil) != tt.wantErr || (!tt.wantErr && !reflect.DeepEqual(got, tt.want)) {
			t.Errorf("appendTokenIDs(%s) = %v, %v; want %v, err %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}

func FuzzJSONScan(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := validJSON(b)
		if valid != json.Valid(b) {
			t.Fatalf("validJSON(%q) = %v; encoding/json says %v", b, valid, !valid)
		}
		if !valid {
			return
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		if s, ok := v.(string); ok {
			if got := unquote(trimSpaceJSON(b)); got != s {
				t.Fatalf("unquote(%q) = %q; want %q", b, got, s)
			}
		}
		if obj, ok := v.(map[string]any); ok {
			n := 0
			if err := forEachMember(b, func(m *member) error {
				if _, ok := obj[string(m.key)]; !ok {
					t.Fatalf("member %q not in %v", m.key, obj)
				}
				if !json.Valid(m.val) {
					t.Fatalf("member value %q is not a JSON value", m.val)
				}
				n++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if n < len(obj) {
				t.Fatalf("forEachMember saw %d members of %d", n, len(obj))
			}
		}
		if arr, ok := v.([]any); ok {
			n := 0
			_ = forEachElement(b, func(_ int, e []byte) error {
				if !json.Valid(e) {
					t.Fatalf("element %q is not a JSON value", e)
				}
				n++
				return nil
			})
			if n != len(arr) {
				t.Fatalf("forEachElement saw %d elements of %d", n, len(arr))
			}
		}
	})
}

func trimSpaceJSON(b []byte) []byte {
	i := skipSpace(b, 0)
	j := len(b)
	for j > i && (b[j-1] == ' ' || b[j-1] == '\t' || b[j-1] == '\n' || b[j-1] == '\r') {
		j--
	}
	return b[i:j]
}

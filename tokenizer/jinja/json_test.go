package jinja

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// canonical renders a decoded JSON value with sorted keys and numbers as
// float64, for comparing ParseJSON with encoding/json.
func canonical(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case string:
		return strconv.Quote(x)
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return strconv.FormatFloat(float64(n), 'g', -1, 64) // "-0" is int 0, as in Python
		}
		f, _ := strconv.ParseFloat(string(x), 64)
		return strconv.FormatFloat(f, 'g', -1, 64)
	case int64:
		return strconv.FormatFloat(float64(x), 'g', -1, 64)
	case BigInt:
		f, _ := strconv.ParseFloat(string(x), 64)
		return strconv.FormatFloat(f, 'g', -1, 64)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = canonical(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = strconv.Quote(k) + ":" + canonical(x[k])
		}
		return "{" + strings.Join(parts, ",") + "}"
	case *Dict:
		m := map[string]any{}
		for _, k := range x.Keys() {
			m[k], _ = x.Get(k)
		}
		return canonical(m)
	}
	return fmt.Sprintf("?%T", v)
}

func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,-0,1e3,"x\u00e9\ud83d\ude00",null,true,false],"b":{}}`, `"\ud800"`, `[]`, ` 12345678901234567890 `,
		`{"a":1,"a":2}`, `"a\\b\/c\n"`, `[1,]`, `{"x"}`, `01`, `"\x01"`, "\"\xff\xfe\"", `1.`, `-`, `[[[[]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseJSON(data)
		if valid := json.Valid(data); valid != (err == nil) {
			t.Fatalf("%q: json.Valid = %v, ParseJSON error = %v", data, valid, err)
		}
		if err != nil {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		if got, w := canonical(v), canonical(want); got != w {
			t.Fatalf("%q:\n got %s\nwant %s", data, got, w)
		}
	})
}

func TestParseJSON_KeepsOrderAndTypes(t *testing.T) {
	v, err := ParseJSON([]byte(`{"z":1,"a":1.0,"m":[1e2,-0.5],"z2":12345678901234567890}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := repr(v), `{'z': 1, 'a': 1.0, 'm': [100.0, -0.5], 'z2': 12345678901234567890}`; got != want {
		t.Errorf("got %s; want %s", got, want)
	}
}

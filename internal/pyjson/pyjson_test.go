package pyjson

import (
	"errors"
	"testing"
)

// The wants are what CPython 3 prints for json.dumps(json.loads(give)).
func TestDumps_AsPythonsJSONDumps(t *testing.T) {
	tests := []struct{ give, want string }{
		{`{}`, `{}`},
		{`{"q":"select 1","n":2}`, `{"q": "select 1", "n": 2}`},
		{`{"b":1,"a":[1,2,{"c":null}]}`, `{"b": 1, "a": [1, 2, {"c": null}]}`},
		{` { "x" : true , "y" : false } `, `{"x": true, "y": false}`},
		{`{"s":"caf\u00e9 ü 😀"}`, `{"s": "caf\u00e9 \u00fc \ud83d\ude00"}`},
		{`{"s":"a\"b\\c\/d\n\t\r\b\f\u0001\u007f"}`, `{"s": "a\"b\\c/d\n\t\r\b\f\u0001\u007f"}`},
		{`[1.0, 1.5, -0.0, 0.0, 1e2, 1E-5, 0.0001, 123456789012345678, 1e16, 1.5e300, 2.5e-7, 100.25, -0]`,
			`[1.0, 1.5, -0.0, 0.0, 100.0, 1e-05, 0.0001, 123456789012345678, 1e+16, 1.5e+300, 2.5e-07, 100.25, 0]`},
		{`[0.1, 1234567890123456.7, 9007199254740993.0]`, `[0.1, 1234567890123456.8, 9007199254740992.0]`},
		{`"plain"`, `"plain"`},
		{`[]`, `[]`},
	}
	for _, tt := range tests {
		got, err := Dumps(nil, []byte(tt.give))
		if err != nil || string(got) != tt.want {
			t.Errorf("Dumps(%s) = %s, %v; want %s", tt.give, got, err, tt.want)
		}
	}
}

func TestDumps_RefusesWhatItCannotReproduce(t *testing.T) {
	for _, give := range []string{`{"a":1,"a":2}`, `{"s":"\ud800"}`, "{\"s\":\"\xff\"}", `[1e400]`, `{"a":1} x`, `{"a":`} {
		if _, err := Dumps(nil, []byte(give)); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Dumps(%s): %v; want ErrUnsupported", give, err)
		}
	}
}

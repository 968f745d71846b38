package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func members(t *testing.T, doc string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := forEachMember([]byte(doc), func(m *member) error {
		out[string(m.key)] = string(m.val)
		return nil
	}); err != nil {
		t.Fatalf("forEachMember(%s): %v", doc, err)
	}
	return out
}

func TestForEachMember_YieldsRawTopLevelValues(t *testing.T) {
	tests := []struct {
		name string
		give string
		want map[string]string
	}{
		{"empty", `{}`, map[string]string{}},
		{"spaces", " {\n \"a\" :\t1 , \"b\":[1, {\"c\":\"}\"}] }\n", map[string]string{"a": "1", "b": `[1, {"c":"}"}]`}},
		{"escaped key", `{"\u006dodel":"m"}`, map[string]string{"model": `"m"`}},
		{"string with quotes and brackets", `{"p":"a\"]}{[\\","q":null}`, map[string]string{"p": `"a\"]}{[\\"`, "q": "null"}},
		{"numbers kept verbatim", `{"x":1e3,"y":-0.50,"z":18446744073709551615}`, map[string]string{"x": "1e3", "y": "-0.50", "z": "18446744073709551615"}},
		{"literals", `{"t":true,"f":false}`, map[string]string{"t": "true", "f": "false"}},
		{"last duplicate wins in map", `{"a":1,"a":2}`, map[string]string{"a": "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := members(t, tt.give); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}

func TestForEachMember_RejectsNonObjects(t *testing.T) {
	for _, give := range []string{`[]`, `"s"`, `1`, `null`} {
		if err := forEachMember([]byte(give), func(*member) error { return nil }); err == nil {
			t.Errorf("forEachMember(%s) = nil; want an error", give)
		}
	}
}

func TestPrefillBody_RewritesOnlyTheContractFields(t *testing.T) {
	give := `{"model":"m","prompt":"hi","stream":true,"stream_options":{"include_usage":true},` +
		`"max_tokens":100,"max_completion_tokens":50,"min_tokens":3,"min_completion_tokens":2,` +
		`"kv_transfer_params":{"old":1},"temperature":0.70,"seed":12345678901234567890,"logit_bias":{"5":1e2}}`
	got, err := PrefillBody([]byte(give))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(got) {
		t.Fatalf("prefill body %s is not valid JSON", got)
	}
	m := members(t, string(got))
	want := map[string]string{
		"model":                 `"m"`,
		"prompt":                `"hi"`,
		"temperature":           `0.70`,
		"seed":                  `12345678901234567890`,
		"logit_bias":            `{"5":1e2}`,
		"kv_transfer_params":    prefillKVParams,
		"stream":                "false",
		"max_tokens":            "1",
		"max_completion_tokens": "1",
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("prefill members = %v; want %v", m, want)
	}
	var kv map[string]any
	if err := json.Unmarshal([]byte(m["kv_transfer_params"]), &kv); err != nil {
		t.Fatal(err)
	}
	wantKV := map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
		"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	if !reflect.DeepEqual(kv, wantKV) {
		t.Errorf("kv_transfer_params = %v; want %v", kv, wantKV)
	}
}

func TestPrefillBody_AddsMaxCompletionTokensOnlyWhenPresent(t *testing.T) {
	got, err := PrefillBody([]byte(`{"model":"m","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := members(t, string(got))
	if _, ok := m["max_completion_tokens"]; ok {
		t.Errorf("prefill body %s has max_completion_tokens; the client did not send it", got)
	}
	if m["max_tokens"] != "1" || m["stream"] != "false" {
		t.Errorf("prefill body %s; want max_tokens 1 and stream false", got)
	}
}

func TestDecodeBody_ReplacesOrRemovesKVParams(t *testing.T) {
	params := []byte(`{"remote_block_ids":[[7]],"remote_engine_id":"e"}`)
	tests := []struct {
		name       string
		give       string
		params     []byte
		want       map[string]string
		wantSame   bool
		wantNoKeys []string
	}{
		{"adds params", `{"model":"m","stream":true,"max_tokens":9}`, params,
			map[string]string{"model": `"m"`, "stream": "true", "max_tokens": "9", "kv_transfer_params": string(params)}, false, nil},
		{"replaces the client's", `{"kv_transfer_params":{"x":1},"model":"m","kv_transfer_params":null}`, params,
			map[string]string{"model": `"m"`, "kv_transfer_params": string(params)}, false, nil},
		{"removes when prefill sent none", `{"model":"m","kv_transfer_params":{"x":1}}`, nil,
			map[string]string{"model": `"m"`}, false, []string{"kv_transfer_params"}},
		{"unchanged when nothing to do", `{"model":"m", "stream_options": {"include_usage": true}}`, nil, nil, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeBody([]byte(tt.give), tt.params)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantSame {
				if string(got) != tt.give {
					t.Errorf("got %s; want the original bytes %s", got, tt.give)
				}
				return
			}
			if m := members(t, string(got)); !reflect.DeepEqual(m, tt.want) {
				t.Errorf("got %v; want %v", m, tt.want)
			}
		})
	}
}

func TestExtractKVParams_Outcomes(t *testing.T) {
	big := `{"kv_transfer_params":{"pad":"` + strings.Repeat("a", MaxKVParamsBytes) + `"}}`
	tests := []struct {
		name string
		give string
		want KVParamsOutcome
		raw  string
	}{
		{"found verbatim", `{"id":"x","kv_transfer_params":{"remote_port": 5600 ,"b":[1]}}`, KVParamsFound, `{"remote_port": 5600 ,"b":[1]}`},
		{"absent", `{"id":"x"}`, KVParamsMissing, ""},
		{"null", `{"kv_transfer_params":null}`, KVParamsMissing, ""},
		{"not an object", `{"kv_transfer_params":[1]}`, KVParamsInvalid, ""},
		{"invalid JSON", `{"kv_transfer_params":{`, KVParamsInvalid, ""},
		{"oversize", big, KVParamsOversize, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, got := ExtractKVParams([]byte(tt.give))
			if got != tt.want || string(raw) != tt.raw {
				t.Errorf("got (%q, %v); want (%q, %v)", raw, got, tt.raw, tt.want)
			}
		})
	}
}

func TestPDRequestID_HasLoxiLBForm(t *testing.T) {
	re := regexp.MustCompile(`^___prefill_addr_10\.0\.0\.1:8100___decode_addr_\[::1\]:8200___[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}___$`)
	a, b := PDRequestID("10.0.0.1:8100", "[::1]:8200"), PDRequestID("10.0.0.1:8100", "[::1]:8200")
	if !re.MatchString(a) {
		t.Errorf("id %q does not match %s", a, re)
	}
	if a == b {
		t.Errorf("two ids are equal (%q); want fresh uuids", a)
	}
}

func TestObjectEditor_CopiesMembersInOrder(t *testing.T) {
	doc := []byte(`{"a":1, "b" : [2], "c":"3"}`)
	ed := newObjectEditor(len(doc))
	_ = forEachMember(doc, func(m *member) error {
		if string(m.key) != "b" {
			ed.copyMember(doc, m)
		}
		return nil
	})
	ed.add("d", []byte("4"))
	if got, want := ed.bytes(), []byte(`{"a":1,"c":"3","d":4}`); !bytes.Equal(got, want) {
		t.Errorf("got %s; want %s", got, want)
	}
}

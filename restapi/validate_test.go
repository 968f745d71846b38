package restapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/llbproject/llb/rule"
)

// TestPOST_ValidationRules posts bodies through the real HTTP handler and
// checks the status, the body's code, the fields it names and the message:
// LoxiLB's JSON decoding (malformed bodies, wrong JSON types, key matching)
// and how the rule's problems are answered. The rule's own validation table,
// one row per rule, is rule.TestValidate_Rules. Every row runs against a
// fresh server.
func TestPOST_ValidationRules(t *testing.T) {
	type row struct {
		name       string
		give       func(t testing.TB) entry
		raw        string // used instead of give when set
		wantStatus int
		wantCode   int    // body "code"
		wantField  string // must be listed in body "fields"
		wantMsg    string // substring of body "result"
		wantAlso   []string
	}
	const (
		ok   = http.StatusOK
		bad  = http.StatusBadRequest
		unpr = http.StatusUnprocessableEntity
	)
	rows := []row{
		// ---- accepted shapes ----
		{name: "pd example accepted", give: pd, wantStatus: ok},
		{name: "unknown keys ignored", give: func(t testing.TB) entry {
			return single(t).Set("serviceArguments.noSuchKey", 1).Set("serviceArguments.kv_exact_mode", 9).Set("endpoints.0.epRole", 7)
		}, wantStatus: ok},
		{name: "keys match case-insensitively", give: func(t testing.TB) entry {
			return single(t).Del("serviceArguments.port").Set("serviceArguments.PORT", 3000).Set("serviceArguments.KVEXACTMODE", 3)
		}, wantStatus: ok},

		// ---- malformed bodies: 400 ----
		{name: "malformed json names the offset", raw: `{"serviceArguments": {"port": }`, wantStatus: bad, wantCode: 400, wantMsg: "malformed JSON at byte offset 31 (line 1, column 31): invalid character '}'"},
		{name: "truncated json", raw: `{"serviceArguments": {"port": 1`, wantStatus: bad, wantCode: 400, wantMsg: "malformed JSON"},
		{name: "empty body", raw: " ", wantStatus: bad, wantCode: 400, wantMsg: "request body is empty"},
		{name: "top-level array", raw: `[1,2]`, wantStatus: bad, wantCode: 400, wantMsg: "body must be a JSON object"},
		{name: "multi-line body reports the line", raw: "{\n  \"serviceArguments\": {\n    \"port\": 2020,,\n  }\n}", wantStatus: bad, wantCode: 400, wantMsg: "(line 3, column 18)"},
		{name: "trailing data", raw: singleFixture + ` {}`, wantStatus: bad, wantCode: 400, wantMsg: "unexpected data after the top-level object"},

		// ---- wrong JSON types: 422 / 600, all reported ----
		{name: "string where integer", give: func(t testing.TB) entry { return single(t).Set("serviceArguments.port", "abc") },
			wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "serviceArguments.port", wantMsg: "serviceArguments.port in body must be of type integer, got string \"abc\""},
		{name: "every wrong type reported", give: func(t testing.TB) entry {
			return single(t).Set("serviceArguments.port", true).Set("endpoints.1.weight", "heavy")
		}, wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "endpoints.1.weight", wantMsg: "serviceArguments.port in body must be of type integer, got boolean true; endpoints.1.weight in body must be of type integer"},
		{name: "fraction where integer", give: func(t testing.TB) entry { return single(t).Set("serviceArguments.sel", 1.5) },
			wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "serviceArguments.sel", wantMsg: "must be an integer within int64"},
		{name: "object where array", give: func(t testing.TB) entry { return single(t).Set("endpoints", map[string]any{}) },
			wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "endpoints", wantMsg: "endpoints in body must be of type array, got object"},
		{name: "number where string", give: func(t testing.TB) entry { return single(t).Set("serviceArguments.externalIP", 127) },
			wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "serviceArguments.externalIP", wantMsg: "must be of type string"},
		{name: "null admission field refused", give: func(t testing.TB) entry { return single(t).Set("serviceArguments.fc_mode", nil) },
			wantStatus: unpr, wantCode: rule.CodeInvalidType, wantField: "serviceArguments.fc_mode", wantMsg: "serviceArguments.fc_mode in body must not be null"},

		// ---- all problems at once ----
		{name: "schema and semantic problems reported together", give: func(t testing.TB) entry {
			return pd(t).Set("serviceArguments.sel", 11).Set("endpoints.0.weight", 300).Set("serviceArguments.mode", 0)
		}, wantStatus: unpr, wantCode: rule.CodeEnum, wantField: "serviceArguments.mode",
			wantMsg: "serviceArguments.sel in body should be one of [0 1 2 3 4 5 6 7 8 9 10], got 11; endpoints.0.weight in body should be less than or equal to 255, got 300; serviceArguments.mode: pd-disagg requires mode=fullproxy"},
		{name: "several semantic problems reported together", give: func(t testing.TB) entry {
			return single(t).Set("serviceArguments.externalIP", "nope").Set("serviceArguments.sel", 7).Set("endpoints.0.endpointIP", "x")
		}, wantStatus: bad, wantCode: 400, wantField: "endpoints.0.endpointIP",
			wantMsg: "serviceArguments.externalIP: malformed-service error: \"nope\" is not an IP address; serviceArguments.sel: sel=7 is reserved"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			ts := started(t)
			body := r.raw
			if body == "" {
				body = r.give(t).JSON(t)
			}
			res := ts.post(body)
			if res.status != r.wantStatus {
				t.Fatalf("status: got %d; want %d; body %s", res.status, r.wantStatus, res.body)
			}
			if r.wantStatus == http.StatusOK {
				if res.body != `{"result":"Success"}`+"\n" {
					t.Fatalf("body: got %s; want Success", res.body)
				}
				return
			}
			b := res.errBody(t)
			if b.Code != r.wantCode {
				t.Errorf("code: got %d; want %d", b.Code, r.wantCode)
			}
			if r.wantField != "" && !slices.Contains(b.Fields, r.wantField) {
				t.Errorf("fields: got %v; want it to list %q", b.Fields, r.wantField)
			}
			for _, m := range append([]string{r.wantMsg}, r.wantAlso...) {
				if !strings.Contains(b.Result, m) {
					t.Errorf("result: got %q; want it to contain %q", b.Result, m)
				}
			}
			wantClass := map[int]string{bad: msgMalformed}[r.wantStatus]
			if wantClass != "" && b.Message != wantClass {
				t.Errorf("message: got %q; want %q", b.Message, wantClass)
			}
			if r.wantStatus == unpr && !strings.Contains(b.Message, " in body ") {
				t.Errorf("message: got %q; want the schema problems", b.Message)
			}
			if n := len(ts.all()); n != 0 {
				t.Errorf("rules after a refused POST: got %d; want 0", n)
			}
		})
	}
}

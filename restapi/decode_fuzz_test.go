package restapi

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/llbproject/llb/rule"
)

// FuzzDecodeEntry checks DecodeEntry against encoding/json on arbitrary
// bodies, and the validate → normalize pipeline on whatever decodes:
//   - nothing panics;
//   - the shape check agrees with encoding/json about type errors (apart from
//     llb's deliberate refusal of null fc_* fields);
//   - a valid entry always normalizes, and normalizing a rule's own entry
//     gives the same rule (normalization is idempotent).
func FuzzDecodeEntry(f *testing.F) {
	for _, s := range []string{pdExample, chwblExample, singleFixture, l4Fixture, `{}`, `[]`, `{"serviceArguments":null}`,
		`{"serviceArguments":{"port":"x","Port":1}}`, `{"endpoints":[{"weight":1.5}]}`, `{"serviceArguments":{"fc_mode":null}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := DecodeEntry(body)
		var std rule.LoadbalanceEntry
		stdErr := json.Unmarshal(body, &std)
		var typeErr *json.UnmarshalTypeError
		var ve *rule.ValidationError
		switch {
		case err == nil && stdErr != nil:
			t.Fatalf("DecodeEntry accepted what encoding/json refuses (%v): %q", stdErr, body)
		case errors.As(stdErr, &typeErr) && !errors.As(err, &ve) && !errors.Is(err, ErrMalformedRequest):
			t.Fatalf("encoding/json type error %v not reported by DecodeEntry (got %v): %q", stdErr, err, body)
		case errors.As(err, &ve) && stdErr == nil:
			for _, p := range ve.Problems {
				if !strings.HasSuffix(p.Msg, "must not be null") {
					t.Fatalf("DecodeEntry reported %q where encoding/json decodes fine: %q", p.Msg, body)
				}
			}
		}
		if err != nil {
			return
		}
		if rule.Validate(e) != nil {
			return
		}
		r, err := rule.NormalizeEntry(e)
		if err != nil {
			t.Fatalf("valid entry does not normalize: %v: %q", err, body)
		}
		r.Entry.ServiceArguments.ID = "x"
		again, err := rule.NormalizeEntry(&r.Entry)
		if err != nil || rule.Validate(&r.Entry) != nil {
			t.Fatalf("normalized entry does not validate and normalize again: %v: %q", err, body)
		}
		if !again.SameConfig(&r) || again.Key != r.Key {
			t.Fatalf("normalization is not idempotent: %q", body)
		}
	})
}

func TestDeepCopy_SharesNothing(t *testing.T) {
	e, err := DecodeEntry([]byte(pd(t).Set("serviceArguments.annotations", map[string]any{"a": "b"}).
		Set("serviceArguments.alpn_protocols", []any{"h2"}).Set("serviceArguments.fc_mode", "off").
		Set("serviceArguments.mtls_frontend", map[string]any{"client_cert_mode": "optional"}).JSON(t)))
	if err != nil {
		t.Fatal(err)
	}
	before := mustJSON(t, e)
	c := rule.CloneEntry(e)
	if mustJSON(t, &c) != before {
		t.Fatalf("copy differs:\n got %s\nwant %s", mustJSON(t, &c), before)
	}
	sa := c.ServiceArguments
	*sa.Port, sa.Annotations["a"], sa.AlpnProtocols[0], *sa.FCMode, *sa.MTLSFrontend.ClientCertMode = 1, "z", "x", "on", "required"
	*c.Endpoints[0].EndpointIP, *c.Endpoints[0].Weight = "10.9.9.9", 99
	if mustJSON(t, e) != before {
		t.Errorf("mutating the copy changed the original: %s", mustJSON(t, e))
	}
}

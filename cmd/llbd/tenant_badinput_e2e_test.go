package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Bad tenant input against the real llbd: malformed and oversized keys and
// tenant headers at the VIP, negative and oversized limits at the REST
// API. Each gets a clear JSON error with a stable code (or LoxiLB's
// status), never a crash, a hang or a silent acceptance; the daemon goes
// on serving a valid key afterwards.
func TestE2E_TenantBadInputGetsClearErrors(t *testing.T) {
	c, vip, _ := startKeyedDaemon(t, "127.0.37.2")
	raw, id := c.createKey(`{"tenant_id":"bad-input","name":"k","rate_limit_rps":1000,"burst_size":1000}`)

	// The data plane: llb's error shape {"error":{"code":…,"message":…}}.
	dataPlane := []struct {
		name   string
		hdr    []string
		status int
		code   string
	}{
		{"a key without the lxb_ prefix", []string{"X-Api-Key", "sk-not-ours"}, 401, "invalid_api_key"},
		{"a truncated key", []string{"X-Api-Key", raw[:len(raw)-1]}, 401, "invalid_api_key"},
		{"a key with a suffix", []string{"X-Api-Key", raw + "x"}, 401, "invalid_api_key"},
		{"a bearer credential that is not a key", []string{"Authorization", "Bearer eyJhbGciOi.x.y"}, 401, "invalid_api_key"},
		{"an empty bearer", []string{"Authorization", "Bearer "}, 401, "invalid_api_key"},
		{"a key of 8 KiB", []string{"X-Api-Key", "lxb_" + strings.Repeat("a", 8<<10)}, 401, "invalid_api_key"},
		{"an unknown priority", []string{"X-Api-Key", raw, "X-Llb-Priority", "urgent"}, 400, "invalid_field"},
		{"a fairness id of 129 bytes", []string{"X-Api-Key", raw, "X-Gateway-Inference-Fairness-Id", strings.Repeat("t", 129)}, 400, "invalid_field"},
		{"a fairness id with a space", []string{"X-Api-Key", raw, "X-Gateway-Inference-Fairness-Id", "two words"}, 400, "invalid_field"},
		{"a model header the key may use", []string{"X-Api-Key", raw, "X-Model", "sim-model"}, 200, ""},
	}
	for _, tc := range dataPlane {
		t.Run("vip/"+tc.name, func(t *testing.T) {
			code, body, _ := vipCall(t, vip, tc.hdr...)
			if code != tc.status {
				t.Fatalf("%d %s; want %d %s", code, body, tc.status, tc.code)
			}
			if tc.code == "" {
				return
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != tc.code || e.Error.Message == "" {
				t.Fatalf("body %q; want a JSON error with code %s and a message", body, tc.code)
			}
		})
	}

	// A head over llbd's 16 KiB buffer is answered 431 before the request
	// is read to its end (a client's write may then fail): sent raw.
	t.Run("vip/a head over 16 KiB", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(vip, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		body := `{"model":"sim-model","prompt":"hello","max_tokens":2}`
		req := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Api-Key: lxb_" + strings.Repeat("a", 20<<10) +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		_, _ = conn.Write([]byte(req))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 431 || !strings.Contains(string(b), "request_headers_too_large") {
			t.Fatalf("%d %s; want 431 request_headers_too_large", res.StatusCode, b)
		}
	})

	// The control plane: LoxiLB's status codes; a 400 names the problem.
	big := `"` + strings.Repeat("m", 300) + `"`
	models := "[" + strings.Repeat(`"m",`, 256) + `"m"]`
	control := []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"a negative key rate", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"a","rate_limit_rps":-1}`, 400, "rate_limit_rps"},
		{"a negative burst", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"a","rate_limit_rps":1,"burst_size":-5}`, 400, "burst_size"},
		{"negative tokens per minute", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"a","tokens_per_min":-100}`, 400, "tokens_per_min"},
		{"a rate above a million a second", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"a","rate_limit_rps":1000001}`, 400, "rate_limit_rps"},
		{"tokens per minute above 10^12", http.MethodPost, "/netlox/v1/config/ai/tenant/ratelimit", `{"tenant_id":"a","tokens_per_min":1000000000001}`, 400, "tokens_per_min"},
		{"a fractional rate", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"a","rate_limit_rps":1.5}`, 400, "rate_limit_rps"},
		{"a rate as a string", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"a","rate_limit_rps":"10"}`, 400, "rate_limit_rps"},
		{"a tenant of 129 bytes", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"` + strings.Repeat("t", 129) + `"}`, 400, "tenant_id"},
		{"a tenant with a newline", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"a\nb"}`, 400, "tenant_id"},
		{"257 allowed models", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"a","allowed_models":` + models + `}`, 400, "allowed_models"},
		{"a name of 300 bytes", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"a","name":` + big + `}`, 400, "name"},
		{"an unknown class", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"a","class":"gold"}`, 400, "class"},
		{"a negative tenant rate", http.MethodPost, "/netlox/v1/config/ai/tenant/ratelimit", `{"tenant_id":"a","rps":-1}`, 400, "rps"},
		{"negative tenant tokens", http.MethodPost, "/netlox/v1/config/ai/tenant/ratelimit", `{"tenant_id":"a","rps":1,"tokens_per_min":-1}`, 400, "tokens_per_min"},
		{"a limit without a tenant", http.MethodPost, "/netlox/v1/config/ai/tenant/ratelimit", `{"rps":1}`, 400, "tenant_id"},
		{"a limit that is not JSON", http.MethodPost, "/netlox/v1/config/ai/tenant/ratelimit", `rps=1`, 400, ""},
		{"a negative rate by PATCH", http.MethodPatch, "/netlox/v1/config/ai/apikey/" + id, `{"rate_limit_rps":-3}`, 400, "rate_limit_rps"},
		{"a PATCH that is not JSON", http.MethodPatch, "/netlox/v1/config/ai/apikey/" + id, `{"enabled":`, 400, ""},
		{"a PATCH of an unknown key", http.MethodPatch, "/netlox/v1/config/ai/apikey/no-such-key", `{"enabled":false}`, 404, ""},
		{"a key id of 4 KiB", http.MethodGet, "/netlox/v1/config/ai/apikey/" + strings.Repeat("k", 4<<10), "", 404, ""},
		{"a body of 2 MiB", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"a","name":"` + strings.Repeat("n", 2<<20) + `"}`, 413, ""},
	}
	for _, tc := range control {
		t.Run("rest/"+tc.name, func(t *testing.T) {
			code, body, _ := c.do(tc.method, tc.path, tc.body)
			if code != tc.status {
				t.Fatalf("%d %.300s; want %d", code, body, tc.status)
			}
			if !json.Valid([]byte(body)) || !strings.Contains(body, tc.want) {
				t.Fatalf("body %.300s; want a JSON error naming %q", body, tc.want)
			}
		})
	}

	// Nothing above changed the key or stopped the daemon.
	if code, body, _ := c.do(http.MethodGet, "/netlox/v1/config/ai/apikey/"+id, ""); code != 200 || !strings.Contains(body, `"rate_limit_rps":1000`) {
		t.Fatalf("the key after the bad input: %d %s", code, body)
	}
	if code, body, _ := vipCall(t, vip, "X-Api-Key", raw); code != 200 {
		t.Fatalf("a valid key after the bad input: %d %s", code, body)
	}
}

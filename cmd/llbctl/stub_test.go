package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/llbproject/llb/restapi"
)

// These tests stand a stub server in for llbd: they check byte for byte what
// llbctl sends, and how it shows answers llbd itself never gives but another
// server of LoxiLB's routes may (an inventory without llb's extras, a
// numeric service id, an error body that is not JSON). llbctl against the
// real REST server is in e2e_test.go and views_test.go.

// stub records the requests it gets and answers each route with a fixed
// status and body.
type stub struct {
	mu     sync.Mutex
	reqs   []recorded
	routes map[string]stubAnswer // "METHOD path"
}

type recorded struct {
	method, path string
	query        url.Values
	auth         string
	body         string
}

type stubAnswer struct {
	status int
	body   string
}

func startStub(t *testing.T, routes map[string]stubAnswer) (*stub, string) {
	t.Helper()
	s := &stub{routes: routes}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, recorded{r.Method, r.URL.Path, r.URL.Query(), r.Header.Get("Authorization"), string(b)})
		s.mu.Unlock()
		ans, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			ans = stubAnswer{http.StatusNotFound, `{"code":404,"message":"Resource not found","result":"no route"}`}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(ans.status)
		io.WriteString(w, ans.body)
	}))
	t.Cleanup(hs.Close)
	return s, hs.URL
}

func (s *stub) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...)
}

func TestKVInventory_SendsTheQueryAndShowsTheBlocks(t *testing.T) {
	view := restapi.InventoryView{ServiceID: "tcp:127.0.0.1:2020@127.0.0.1", EpIdx: 1, HashAlgo: "sha256_cbor", Total: 1234,
		Blocks: []restapi.InventoryBlock{{BlockIdx: 10, HashUint64: 0xfedcba9876543210}, {BlockIdx: 11, HashUint64: 42}}}
	body, err := json.Marshal(view)
	if err != nil {
		t.Fatal(err)
	}
	s, url := startStub(t, map[string]stubAnswer{"GET " + kvInventoryPath: {http.StatusOK, string(body)}})
	token := writeTemp(t, "token", "s3cret")

	out := mustRun(t, url, "--token-file", token, "get", "kv", "inventory",
		"--service", "tcp:127.0.0.1:2020@127.0.0.1", "--ep", "1", "--offset", "10", "--limit", "2")
	for _, want := range []string{
		"service_id=tcp:127.0.0.1:2020@127.0.0.1 ep_idx=1 hash_algo=sha256_cbor total=1234 shown=2",
		"| 10        | 18364758544493064720 | fedcba9876543210 |",
		"| 11        | 42                   | 000000000000002a |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output:\n%s\nwant %q", out, want)
		}
	}
	reqs := s.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests; want 1", len(reqs))
	}
	q := reqs[0].query
	if q.Get("service_id") != "tcp:127.0.0.1:2020@127.0.0.1" || q.Get("ep_idx") != "1" || q.Get("offset") != "10" || q.Get("limit") != "2" {
		t.Errorf("query %v; want service_id, ep_idx, offset and limit", q)
	}
	if reqs[0].auth != "Bearer s3cret" {
		t.Errorf("Authorization %q; want the bearer token", reqs[0].auth)
	}

	// -o json passes llbd's document through.
	js := mustRun(t, url, "-o", "json", "get", "kv", "inventory", "--service", "x", "--ep", "0")
	if compactJSON(t, js) != string(body) {
		t.Errorf("-o json: %s; want %s", compactJSON(t, js), body)
	}
}

func TestKVInventory_NumericServiceIDOfLoxiLB(t *testing.T) {
	_, url := startStub(t, map[string]stubAnswer{"GET " + kvInventoryPath: {http.StatusOK,
		`{"service_id":3,"ep_idx":0,"hash_algo":"sha256_cbor","blocks":[{"block_idx":0,"hash_uint64":7}],"total":1}`}})
	out := mustRun(t, url, "get", "kv", "inventory", "--service", "3", "--ep", "0")
	if !strings.Contains(out, "service_id=3 ep_idx=0") {
		t.Errorf("output:\n%s\nwant service_id=3", out)
	}
}

func TestKVInventory_MissReportedClearly(t *testing.T) {
	_, url := startStub(t, map[string]stubAnswer{"GET " + kvInventoryPath: {http.StatusNotFound, ""}})
	r := cli(t, url, "get", "kv", "inventory", "--service", "tcp:127.0.0.1:2020", "--ep", "3")
	if r.code != exitAPI || !strings.Contains(r.stderr, `llbd has no KV inventory for endpoint 3 of service "tcp:127.0.0.1:2020"`) {
		t.Errorf("exit %d, stderr %q; want 1 and the miss named", r.code, r.stderr)
	}
}

func TestSetController_PostsTheDocumentedShape(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"state_only", []string{"--state", "draining"}, `{"service":"tcp:127.0.0.1:2020@127.0.0.1","ep_idx":1,"state":"DRAINING"}`},
		{"weight_zero_is_sent", []string{"--weight", "0"}, `{"service":"tcp:127.0.0.1:2020@127.0.0.1","ep_idx":1,"weight":0}`},
		{"everything", []string{"--state", "ACTIVE", "--weight", "50", "--epoch", "7"},
			`{"service":"tcp:127.0.0.1:2020@127.0.0.1","ep_idx":1,"state":"ACTIVE","weight":50,"epoch":7}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, url := startStub(t, map[string]stubAnswer{"POST " + controllerPath: {http.StatusOK, `{"result":"Success"}`}})
			args := append([]string{"set", "controller", "--service", "tcp:127.0.0.1:2020@127.0.0.1", "--ep", "1"}, tt.give...)
			if out := mustRun(t, url, args...); out != "Success\n" {
				t.Errorf("stdout %q; want Success", out)
			}
			reqs := s.requests()
			if len(reqs) != 1 || reqs[0].method != http.MethodPost {
				t.Fatalf("requests %+v; want one POST", reqs)
			}
			if got := compactJSON(t, reqs[0].body); got != tt.want {
				t.Errorf("body %s; want %s", got, tt.want)
			}
		})
	}
}

func TestSetController_ServerRefusalIsEchoed(t *testing.T) {
	_, url := startStub(t, map[string]stubAnswer{"POST " + controllerPath: {http.StatusConflict,
		`{"code":409,"message":"Resource conflict","result":"stale epoch 6: current is 7"}`}})
	r := cli(t, url, "set", "controller", "--service", "s", "--ep", "0", "--weight", "10", "--epoch", "6")
	if r.code != exitAPI || !strings.Contains(r.stderr, "set controller: llbd answered 409 Resource conflict: stale epoch 6: current is 7") {
		t.Errorf("exit %d, stderr %q; want 1 and the server's message", r.code, r.stderr)
	}
}

func TestNonJSONErrorBodyIsShownRaw(t *testing.T) {
	_, url := startStub(t, map[string]stubAnswer{"GET " + lbPath + "/all": {http.StatusBadGateway, "upstream llbd is down\n"}})
	r := cli(t, url, "get", "lb")
	if r.code != exitAPI || !strings.Contains(r.stderr, "get lb: llbd answered 502 Bad Gateway: upstream llbd is down") {
		t.Errorf("exit %d, stderr %q; want 1 and the raw body", r.code, r.stderr)
	}
}

func TestUnreadableAnswerIsExit1(t *testing.T) {
	_, url := startStub(t, map[string]stubAnswer{"GET " + lbPath + "/all": {http.StatusOK, "<html>proxy login</html>"}})
	r := cli(t, url, "get", "lb")
	if r.code != exitAPI || !strings.Contains(r.stderr, "get lb: cannot read llbd's answer") {
		t.Errorf("exit %d, stderr %q; want 1 and a sentence about the answer", r.code, r.stderr)
	}
}

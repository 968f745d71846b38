package restapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/llbproject/llb/rule"
)

const pdKey = "tcp:127.0.0.1:2020@127.0.0.1"

func inventoryURL(service string, params ...string) string {
	q := url.Values{}
	if service != "" {
		q.Set("service_id", service)
	}
	for i := 0; i+1 < len(params); i += 2 {
		q.Add(params[i], params[i+1])
	}
	return kvInventoryPath + "?" + q.Encode()
}

func samplePage() InventoryPage {
	seq := uint64(41)
	return InventoryPage{
		HashAlgo:       "sha256_cbor",
		Keys:           []uint64{0xfedcba9876543210, 42},
		Total:          12,
		CapacityBlocks: 4096,
		Ranks: []InventoryRank{{
			Rank: 0,
			Mirror: MirrorStats{Blocks: 12, EngineBlocks: 12, MaxBlocks: 1000000, StoredBlocks: 20, RemovedBlocks: 8,
				Evictions: 1, Resyncs: 2, MemBytes: 512, Contract: ContractStatus{State: ContractOK, Verified: 3}},
			Feed: &FeedStats{Connected: true, Reconnects: 1, Batches: 5, Events: 9, LastSeq: &seq, EventsPerSec: 2.5, Gaps: 1, LostBatches: 2},
		}},
		Prediction: &KVPrediction{Match: 3, Under: 1, LastPredicted: new(uint32(64)), LastActual: new(uint32(96)), State: PredictionOK},
	}
}

func TestInventory_AnswersLoxiLBsShapeWithLLBExtrasApart(t *testing.T) {
	ts, rt := viewServer(t)
	rt.page = samplePage()
	r := ts.do(http.MethodGet, inventoryURL(pdKey, "ep_idx", "0", "offset", "10", "limit", "2"), "")
	if r.status != http.StatusOK {
		t.Fatalf("got %d %s; want 200", r.status, r.body)
	}
	want := `{"service_id":"tcp:127.0.0.1:2020@127.0.0.1","ep_idx":0,"hash_algo":"sha256_cbor",` +
		`"blocks":[{"block_idx":10,"hash_uint64":18364758544493064720},{"block_idx":11,"hash_uint64":42}],"total":12,` +
		`"llb":{"rule_id":"id-1","endpoint":"127.0.0.1:8100","role":"prefill","offset":10,"limit":2,"next_offset":null,` +
		`"capacity":{"blocks":4096,"known":true},"ranks":[{"rank":0,` +
		`"mirror":{"blocks":12,"engine_blocks":12,"max_blocks":1000000,"token_keyed":false,"stored_blocks":20,"removed_blocks":8,` +
		`"clears":0,"resyncs":2,"evictions":1,"mem_bytes":512,"offload_blocks":0,"ignored":[],"contract":{"state":"ok","verified":3,"mismatched":0,"unverifiable":0}},` +
		`"feed":{"connected":true,"reconnects":1,"recv_errors":0,"batches":5,"events":9,"last_seq":41,"events_per_sec":2.5,` +
		`"gaps":1,"lost_batches":2,"duplicates":0,"restarts":0,"resyncs":0,"replays":0,"replay_failures":0,"ignored":[]}}],` +
		`"prediction":{"match":3,"over":0,"under":1,"lastPredicted":64,"lastActual":96,"state":"ok"}}}` + "\n"
	if r.body != want {
		t.Errorf("body:\n got %s\nwant %s", r.body, want)
	}
	calls, _ := rt.calls()
	k := rule.RuleKey{VIP: netip.MustParseAddr("127.0.0.1"), Protocol: "tcp", Port: 2020, Host: "127.0.0.1"}
	if len(calls) != 1 || calls[0] != (invCall{k, 0, 10, 2}) {
		t.Errorf("runtime calls %+v; want one for %s ep 0 offset 10 limit 2", calls, k)
	}
}

func TestInventory_PagingDefaultsAndNextOffset(t *testing.T) {
	tests := []struct {
		name       string
		params     []string
		keys       int
		total      int
		wantCall   invCall
		wantNext   string
		wantBlocks string
	}{
		{"default_page", nil, 2, 5, invCall{ep: 0, offset: 0, limit: DefaultInventoryLimit}, `"next_offset":2`, `"block_idx":0`},
		{"middle_page", []string{"offset", "2", "limit", "2"}, 2, 5, invCall{ep: 0, offset: 2, limit: 2}, `"next_offset":4`, `"block_idx":2`},
		{"last_page", []string{"offset", "4", "limit", "2"}, 1, 5, invCall{ep: 0, offset: 4, limit: 2}, `"next_offset":null`, `"block_idx":4`},
		{"past_the_end", []string{"offset", "9"}, 0, 5, invCall{ep: 0, offset: 9, limit: DefaultInventoryLimit}, `"next_offset":null`, `"blocks":[]`},
		{"empty_mirror", nil, 0, 0, invCall{ep: 0, offset: 0, limit: DefaultInventoryLimit}, `"next_offset":null`, `"blocks":[],"total":0`},
		{"largest_page", []string{"limit", "10000"}, 1, 1, invCall{ep: 0, offset: 0, limit: MaxInventoryLimit}, `"next_offset":null`, `"block_idx":0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, rt := viewServer(t)
			rt.page = InventoryPage{HashAlgo: "sha256_cbor", Total: tt.total}
			for i := range tt.keys {
				rt.page.Keys = append(rt.page.Keys, uint64(100+i))
			}
			r := ts.do(http.MethodGet, inventoryURL("id-1", append([]string{"ep_idx", "0"}, tt.params...)...), "")
			if r.status != http.StatusOK {
				t.Fatalf("got %d %s; want 200", r.status, r.body)
			}
			for _, want := range []string{tt.wantNext, tt.wantBlocks} {
				if !strings.Contains(r.body, want) {
					t.Errorf("body %s; want it to contain %s", r.body, want)
				}
			}
			calls, _ := rt.calls()
			got := calls[0]
			got.key = rule.RuleKey{}
			if got != tt.wantCall {
				t.Errorf("runtime asked for %+v; want %+v", got, tt.wantCall)
			}
		})
	}
}

func TestInventory_RuntimeOverfillingAPageIsTrimmed(t *testing.T) {
	ts, rt := viewServer(t)
	rt.page = InventoryPage{Keys: []uint64{1, 2, 3}, Total: 3}
	r := ts.do(http.MethodGet, inventoryURL(pdKey, "ep_idx", "0", "limit", "2"), "")
	var v InventoryView
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Blocks) != 2 || v.LLB.NextOffset == nil || *v.LLB.NextOffset != 2 {
		t.Errorf("blocks %+v next %v; want 2 blocks and next_offset 2", v.Blocks, v.LLB.NextOffset)
	}
}

func TestInventory_NamesTheRuleByKeyOrID(t *testing.T) {
	tests := []struct {
		give       string
		wantStatus int
		wantResult string
	}{
		{give: pdKey, wantStatus: 200},
		{give: "id-1", wantStatus: 200},
		{give: "tcp:127.0.0.1:2020", wantStatus: 404,
			wantResult: `no-rule error: no rule has key or id "tcp:127.0.0.1:2020" (did you mean rule tcp:127.0.0.1:2020@127.0.0.1?`},
		{give: "7", wantStatus: 404, wantResult: `no-rule error: no rule has key or id "7"`},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			ts, rt := viewServer(t)
			rt.page = samplePage()
			r := ts.do(http.MethodGet, inventoryURL(tt.give, "ep_idx", "0"), "")
			if r.status != tt.wantStatus {
				t.Fatalf("got %d %s; want %d", r.status, r.body, tt.wantStatus)
			}
			if tt.wantStatus == 200 {
				if !strings.HasPrefix(r.body, `{"service_id":"`+pdKey+`"`) {
					t.Errorf("body %s; want service_id %s", r.body, pdKey)
				}
				return
			}
			b := r.errBody(t)
			if b.Code != 404 || b.Message != msgNotFound || !strings.HasPrefix(b.Result, tt.wantResult) {
				t.Errorf("error %+v; want 404 %q with result starting %q", b, msgNotFound, tt.wantResult)
			}
		})
	}
}

func TestInventory_RefusesBadRequestsNamingTheCause(t *testing.T) {
	tests := []struct {
		name       string
		path       string
		invErr     error
		wantStatus int
		wantFields []string
		wantResult string
	}{
		{"no_service", inventoryURL("", "ep_idx", "0"), nil, 400, []string{"service_id"}, "service_id: query parameter is required"},
		{"empty_service", inventoryURL("", "service_id", "", "ep_idx", "0"), nil, 400, []string{"service_id"}, "service_id: query parameter is required"},
		{"no_ep_idx", inventoryURL(pdKey), nil, 400, []string{"ep_idx"}, "ep_idx: query parameter is required"},
		{"ep_idx_not_a_number", inventoryURL(pdKey, "ep_idx", "first"), nil, 400, []string{"ep_idx"}, `ep_idx: "first" is not an integer`},
		{"ep_idx_negative", inventoryURL(pdKey, "ep_idx", "-1"), nil, 400, []string{"ep_idx"}, "ep_idx: -1 is outside 0–31"},
		{"ep_idx_twice", inventoryURL(pdKey, "ep_idx", "0", "ep_idx", "1"), nil, 400, []string{"ep_idx"}, "ep_idx: query parameter given 2 times"},
		{"offset_negative", inventoryURL(pdKey, "ep_idx", "0", "offset", "-5"), nil, 400, []string{"offset"}, "offset: -5 is outside"},
		{"limit_zero", inventoryURL(pdKey, "ep_idx", "0", "limit", "0"), nil, 400, []string{"limit"}, "limit: 0 is outside 1–10000"},
		{"limit_too_big", inventoryURL(pdKey, "ep_idx", "0", "limit", "10001"), nil, 400, []string{"limit"}, "limit: 10001 is outside 1–10000"},
		{"every_problem_at_once", kvInventoryPath + "?limit=x&offset=y", nil, 400, []string{"service_id", "ep_idx", "offset", "limit"}, "service_id: "},
		{"endpoint_out_of_range", inventoryURL(pdKey, "ep_idx", "5"), nil, 404, nil,
			"ep-host-notfound error: rule tcp:127.0.0.1:2020@127.0.0.1 has 2 endpoints (ep_idx 0–1), not ep_idx 5"},
		{"decode_endpoint", inventoryURL(pdKey, "ep_idx", "1"), nil, 404, nil,
			"kv-inventory not found: rule tcp:127.0.0.1:2020@127.0.0.1 endpoint 1: endpoint 1 is a decode endpoint (ep_role 2): with kvExactMode 1 only prefill endpoints (ep_role 1) publish KV events"},
		{"rule_without_kv_exact", inventoryURL("id-2", "ep_idx", "0"), nil, 404, nil,
			"kv-inventory not found: rule tcp:127.0.0.1:2021@127.0.0.1 endpoint 0: the rule has kvExactMode 0"},
		{"runtime_not_running", inventoryURL(pdKey, "ep_idx", "0"), fmt.Errorf("%w: mode 0 is an L4 mode", ErrNotRunning), 404, nil,
			"rule tcp:127.0.0.1:2020@127.0.0.1 endpoint 0: rule-not-running error"},
		{"runtime_no_inventory", inventoryURL(pdKey, "ep_idx", "0"), fmt.Errorf("%w: no feed", ErrNoInventory), 404, nil, "kv-inventory not found: no feed"},
		{"runtime_busy", inventoryURL(pdKey, "ep_idx", "0"), ErrDataPlaneBusy, 503, nil, "data plane busy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, rt := viewServer(t)
			rt.invErr = tt.invErr
			r := ts.do(http.MethodGet, tt.path, "")
			if r.status != tt.wantStatus {
				t.Fatalf("got %d %s; want %d", r.status, r.body, tt.wantStatus)
			}
			b := r.errBody(t)
			if b.Code != tt.wantStatus || !strings.Contains(b.Result, tt.wantResult) {
				t.Errorf("error %+v; want code %d and result containing %q", b, tt.wantStatus, tt.wantResult)
			}
			if tt.wantFields != nil && !slices.Equal(b.Fields, tt.wantFields) {
				t.Errorf("fields %v; want %v", b.Fields, tt.wantFields)
			}
			if tt.wantStatus == 503 && r.header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
			if calls, _ := rt.calls(); tt.invErr == nil && len(calls) != 0 {
				t.Errorf("the runtime was asked %+v; want a refusal before it", calls)
			}
		})
	}
}

func TestInventory_RouteExistsOnlyForAViewer(t *testing.T) {
	ts := started(t)
	ts.mustPost(pdExample)
	r := ts.do(http.MethodGet, inventoryURL(pdKey, "ep_idx", "0"), "")
	if b := r.errBody(t); r.status != 404 || !strings.HasPrefix(b.Result, "no route GET "+kvInventoryPath) {
		t.Errorf("NoDataPlane: got %d %+v; want 404 no route", r.status, b)
	}
}

func TestMirrorsKV(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		ep      int
		want    bool
		wantWhy string
	}{
		{"pd_prefill", pdExample, 0, true, ""},
		{"pd_decode", pdExample, 1, false, "decode endpoint"},
		{"single_pool_mode_3", single(t).Set("serviceArguments.kvExactMode", 3).JSON(t), 1, true, ""},
		{"kv_off", chwblExample, 0, false, "kvExactMode 0"},
		{"no_such_endpoint", pdExample, 2, false, "no endpoint 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := DecodeEntry([]byte(tt.give))
			if err != nil {
				t.Fatal(err)
			}
			r, err := rule.NormalizeEntry(e)
			if err != nil {
				t.Fatal(err)
			}
			got, why := r.Effective.MirrorsKV(tt.ep)
			if got != tt.want || !strings.Contains(why, tt.wantWhy) || (tt.want && why != "") {
				t.Errorf("got %t %q; want %t and a reason containing %q", got, why, tt.want, tt.wantWhy)
			}
		})
	}
}

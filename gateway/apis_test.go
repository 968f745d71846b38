package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
)

// canonJSON re-encodes a JSON document so two spellings compare equal.
func canonJSON(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %s: %v", b, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func TestParseRequest_ResponsesInputBecomesVLLMsChatMessages(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		want      string // messages as vLLM's construct_input_messages builds them
		wantGuard ladder.Reason
	}{
		{"string input", `{"model":"m","input":"hi"}`, `[{"role":"user","content":"hi"}]`, ladder.ReasonNone},
		{"instructions first", `{"model":"m","instructions":"be brief","input":"hi"}`,
			`[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`, ladder.ReasonNone},
		{"message items as they are", `{"input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"message","role":"developer","content":"b"}]}`,
			`[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"message","role":"developer","content":"b"}]`, ladder.ReasonNone},
		{"an output message keeps its first part's text", `{"input":[{"role":"user","content":"q"},{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"a1","annotations":[]},{"type":"output_text","text":"a2"}]}]}`,
			`[{"role":"user","content":"q"},{"role":"assistant","content":"a1"}]`, ladder.ReasonNone},
		{"function calls merge into one assistant message", `{"input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"x\":1}"},{"type":"function_call","call_id":"c2","name":"g","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"42"}]}`,
			`[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{\"x\":1}"},"type":"function"},{"id":"c2","function":{"name":"g","arguments":"{}"},"type":"function"}]},{"role":"tool","content":"42","tool_call_id":"c1"}]`, ladder.ReasonNone},
		{"an assistant item without status: its first part's text too", `{"input":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a1"},{"type":"output_text","text":"a2"}]},{"role":"user","content":[{"type":"input_text","text":"q"}]}]}`,
			`[{"role":"assistant","content":"a1"},{"role":"user","content":[{"type":"input_text","text":"q"}]}]`, ladder.ReasonNone},
		{"a function call joins the assistant message before it", `{"input":[{"role":"user","content":"q"},{"role":"assistant","content":"let me look"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]}`,
			`[{"role":"user","content":"q"},{"role":"assistant","content":"let me look","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"},"type":"function"}]}]`, ladder.ReasonNone},
		{"an output message gives a tool-call message its content", `{"input":[{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"message","id":"m1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"done"}]},{"role":"assistant","content":"more"}]}`,
			`[{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"},"type":"function"}],"content":"done"},{"role":"assistant","content":"more"}]`, ladder.ReasonNone},
		{"a continuation cannot be hashed", `{"input":"next","previous_response_id":"resp_1"}`, `[{"role":"user","content":"next"}]`, ladder.ReasonHashContract},
		{"tools change the template", `{"input":"x","tools":[{"type":"function","name":"f"}]}`, `[{"role":"user","content":"x"}]`, ladder.ReasonTokenize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRequest(KindResponses, []byte(tt.give))
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			if got, want := canonJSON(t, r.RawMessages), canonJSON(t, []byte(tt.want)); got != want {
				t.Errorf("messages %s; want %s", got, want)
			}
			if r.guard != tt.wantGuard {
				t.Errorf("guard %v; want %v", r.guard, tt.wantGuard)
			}
			for i, m := range r.Messages {
				if m.Media {
					t.Errorf("message %d counts as media (no Tier 1.5): %q", i, m.Text)
				}
			}
		})
	}
}

func TestParseRequest_ResponsesFields(t *testing.T) {
	r, err := ParseRequest(KindResponses, []byte(`{"model":"m","input":"hi","stream":true,"store":false,"previous_response_id":"resp_9","user":"u"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Stream || r.Store || r.PreviousResponseID != "resp_9" || r.SessionUser() != "u" || r.Model != "m" {
		t.Errorf("got %+v", r)
	}
	r, _ = ParseRequest(KindResponses, []byte(`{"input":"hi"}`))
	if !r.Store {
		t.Errorf("store absent: Store = false; want vLLM's default true")
	}
	for _, bad := range []string{`{"model":"m"}`, `{"input":5}`, `{"input":"x","instructions":[1]}`} {
		if _, err := ParseRequest(KindResponses, []byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestParseRequest_AnthropicMessagesBecomeVLLMsChatMessages(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		want      string
		wantTools string
		wantGuard ladder.Reason
	}{
		{"string system and content", `{"model":"m","max_tokens":5,"system":"sys","messages":[{"role":"user","content":"hi"}]}`,
			`[{"role":"system","content":"sys"},{"role":"user","content":"hi"}]`, "", ladder.ReasonNone},
		{"system blocks joined", `{"system":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"messages":[{"role":"user","content":"hi"}]}`,
			`[{"role":"system","content":"ab"},{"role":"user","content":"hi"}]`, "", ladder.ReasonNone},
		{"one text block is the content", `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
			`[{"role":"user","content":"hi"}]`, "", ladder.ReasonNone},
		{"two text blocks are parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`, "", ladder.ReasonNone},
		{"tool use and result", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"let me"},{"type":"tool_use","id":"t1","name":"f","input":{"x":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"42"},{"type":"text","text":"so?"}]}]}`,
			`[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}],"content":"let me"},{"role":"tool","tool_call_id":"t1","content":"42"},{"role":"user","content":"so?"}]`, "", ladder.ReasonNone},
		{"tool arguments as Python's json.dumps writes them", `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"q":"café","n":[1.50,2]}}]},{"role":"user","content":"ok"}]}`,
			`[{"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"q\": \"caf\\u00e9\", \"n\": [1.5, 2]}"}}]},{"role":"user","content":"ok"}]`, "", ladder.ReasonNone},
		{"tool input that is not an object cannot be hashed", `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":[1]}]},{"role":"user","content":"ok"}]}`,
			"", "", ladder.ReasonTokenize},
		{"an empty message is dropped", `{"messages":[{"role":"user","content":[{"type":"text","text":""}]},{"role":"user","content":"x"}]}`,
			`[{"role":"user","content":"x"}]`, "", ladder.ReasonNone},
		{"thinking becomes reasoning", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"a"}]}]}`,
			`[{"role":"user","content":"q"},{"role":"assistant","reasoning":"hm","content":"a"}]`, "", ladder.ReasonNone},
		{"tools converted", `{"messages":[{"role":"user","content":"q"}],"tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}]}`,
			`[{"role":"user","content":"q"}]`, `[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}]`, ladder.ReasonNone},
		{"an image cannot be hashed", `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"AA"}},{"type":"text","text":"what"}]}]}`,
			`[{"role":"user","content":"what"}]`, "", ladder.ReasonTokenize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRequest(KindMessages, []byte(tt.give))
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			if tt.want != "" { // "": guarded, the messages say nothing
				if got, want := canonJSON(t, r.RawMessages), canonJSON(t, []byte(tt.want)); got != want {
					t.Errorf("messages %s; want %s", got, want)
				}
			}
			if tt.wantTools != "" {
				if got, want := canonJSON(t, r.Tools), canonJSON(t, []byte(tt.wantTools)); got != want {
					t.Errorf("tools %s; want %s", got, want)
				}
			}
			if r.guard != tt.wantGuard {
				t.Errorf("guard %v; want %v", r.guard, tt.wantGuard)
			}
		})
	}
}

func TestParseRequest_AnthropicMetadataUserIsTheSessionUser(t *testing.T) {
	r, err := ParseRequest(KindMessages, []byte(`{"messages":[{"role":"user","content":"x"}],"metadata":{"user_id":"u-7"},"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.SessionUser() != "u-7" || !r.Stream {
		t.Errorf("SessionUser %q stream %v; want u-7 true", r.SessionUser(), r.Stream)
	}
}

func TestParseRequest_PoolingAPIsReadTheirText(t *testing.T) {
	tests := []struct {
		kind      APIKind
		give      string
		wantTexts []string
		wantMsgs  int
	}{
		{KindEmbeddings, `{"model":"e","input":"hello"}`, []string{"hello"}, 0},
		{KindEmbeddings, `{"model":"e","input":["a","b"],"encoding_format":"base64"}`, []string{"a", "b"}, 0},
		{KindEmbeddings, `{"model":"e","input":[{"weird":1}]}`, nil, 0},
		{KindEmbeddings, `{"model":"e","messages":[{"role":"user","content":"hi"}]}`, nil, 1},
		{KindPooling, `{"input":"p"}`, []string{"p"}, 0},
		{KindClassify, `{"input":["c"]}`, []string{"c"}, 0},
		{KindScore, `{"text_1":"q","text_2":["d1","d2"]}`, []string{"q"}, 0},
		{KindScore, `{"queries":"q","documents":["d"]}`, []string{"q"}, 0},
		{KindRerank, `{"query":"q","documents":["d"]}`, []string{"q"}, 0},
	}
	for _, tt := range tests {
		r, err := ParseRequest(tt.kind, []byte(tt.give))
		if err != nil {
			t.Fatalf("%v %s: %v", tt.kind, tt.give, err)
		}
		if len(r.Texts) != len(tt.wantTexts) || len(r.Messages) != tt.wantMsgs {
			t.Errorf("%v %s: texts %q messages %d; want %q %d", tt.kind, tt.give, r.Texts, len(r.Messages), tt.wantTexts, tt.wantMsgs)
		}
		for i := range tt.wantTexts {
			if r.Texts[i] != tt.wantTexts[i] {
				t.Errorf("%v %s: texts %q; want %q", tt.kind, tt.give, r.Texts, tt.wantTexts)
			}
		}
	}
}

func audioForm(t *testing.T, fields map[string]string, file bool) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if file {
		w, _ := mw.CreateFormFile("file", "a.wav")
		_, _ = w.Write(bytes.Repeat([]byte{1, 2, 3, 4}, 1000))
	}
	for k, v := range fields {
		_ = mw.WriteField(k, v)
	}
	_ = mw.Close()
	return buf.Bytes(), mw.FormDataContentType()
}

func TestParseMultipart_ReadsModelAndStreamAndSkipsTheFile(t *testing.T) {
	body, ct := audioForm(t, map[string]string{"model": "whisper", "stream": "true", "language": "en"}, true)
	var r Request
	if err := r.parseMultipart(KindTranscription, body, []byte(ct)); err != nil {
		t.Fatal(err)
	}
	if r.Model != "whisper" || !r.Stream || !bytes.Equal(r.Body, body) {
		t.Errorf("model %q stream %v; want whisper true and the body as sent", r.Model, r.Stream)
	}
	noFile, ct2 := audioForm(t, map[string]string{"model": "w"}, false)
	if err := r.parseMultipart(KindTranscription, noFile, []byte(ct2)); err == nil {
		t.Errorf("no file part: no error")
	}
	if err := r.parseMultipart(KindTranscription, body, []byte("application/json")); err == nil {
		t.Errorf("not multipart: no error")
	}
	bad, ct3 := audioForm(t, map[string]string{"stream": "perhaps"}, true)
	if err := r.parseMultipart(KindTranslation, bad, []byte(ct3)); err == nil {
		t.Errorf("stream=perhaps: no error")
	}
}

func TestResponseID_FindsTheResponsesIDInWholeAnswersAndFirstEvents(t *testing.T) {
	tests := []struct{ give, want string }{
		{`{"id":"resp_abc","object":"response"}`, "resp_abc"},
		{"event: response.created\ndata: {\"response\":{\"id\":\"resp_x1\",\"output\":[{\"id\":\"msg_1\"}]},\"sequence_number\":0}", "resp_x1"},
		{`{"output":[{"id":"msg_1"}],"id" : "resp_late"}`, "resp_late"},
		{`{"id":"resp_trunc`, ""},
		{`{"id":"msg_only"}`, ""},
	}
	for _, tt := range tests {
		if got := responseID([]byte(tt.give)); got != tt.want {
			t.Errorf("responseID(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}

func TestResponses_PinsTheStoredResponseToItsEndpointAndRoutesContinuationsByIt(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case strings.Contains(string(body), `"stream":true`):
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: response.created\ndata: {\"response\":{\"id\":\"resp_")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "streamed\",\"object\":\"response\"},\"sequence_number\":0,\"type\":\"response.created\"}\n\n")
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"resp_whole","object":"response","output":[]}`)
		}
	}))
	t.Cleanup(be.Close)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(netip.MustParseAddrPort(be.Listener.Addr().String())), Deps{Router: fr})
	c := testClient(t)
	for _, body := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":"hi","stream":true}`,
		`{"model":"m","input":"hi","store":false}`,
		`{"model":"m","input":"more","previous_response_id":"resp_whole"}`,
	} {
		if resp, b := post(t, c, url+PathResponses, body); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
	}
	fr.waitFinished(t, 4)
	fr.mu.Lock()
	pins, routes := append([]fakePin(nil), fr.pins...), append([]actors.RouteRequest(nil), fr.routes...)
	fr.mu.Unlock()
	want := []string{actors.ResponseKey("resp_whole"), actors.ResponseKey("resp_streamed"), actors.ResponseKey("resp_whole")}
	if len(pins) != len(want) {
		t.Fatalf("pins %v; want %v (store:false pins nothing)", pins, want)
	}
	for i := range want {
		if pins[i].key != want[i] {
			t.Errorf("pin %d = %q; want %q", i, pins[i].key, want[i])
		}
	}
	if routes[3].Pin != actors.ResponseKey("resp_whole") || routes[0].Pin != "" {
		t.Errorf("route pins %q %q; want the continuation to name resp_whole", routes[0].Pin, routes[3].Pin)
	}
	if routes[3].Req.KV.Guard != ladder.ReasonNone && routes[3].Model != "m" {
		t.Errorf("model %q", routes[3].Model)
	}
	// The stored response's own routes go by its pin too.
	resp, err := c.Get(url + PathResponses + "/resp_whole")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	fr.mu.Lock()
	last := fr.routes[len(fr.routes)-1]
	fr.mu.Unlock()
	if !last.Passthrough || last.Pin != actors.ResponseKey("resp_whole") {
		t.Errorf("GET /v1/responses/resp_whole routed with %+v; want a pinned pass-through", last)
	}
}

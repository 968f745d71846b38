package worker

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
)

// namedEvents splits an SSE body into (event, data) pairs; an event
// without an event: line is named "".
func namedEvents(t *testing.T, body []byte) (names, data []string) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			name = ""
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			names, data = append(names, name), append(data, strings.TrimPrefix(line, "data: "))
		default:
			t.Fatalf("SSE line %q", line)
		}
	}
	return names, data
}

func TestResponses_WholeStreamedAndAChainThatOnlyItsWorkerKnows(t *testing.T) {
	w := startWorker(t, nil)
	other := startWorker(t, func(c *Config) { c.IP = "127.0.0.2" })
	c := client(t)
	st, _, raw := post(t, c, w.URL()+"/v1/responses", `{"model":"sim-model","input":"hello there","max_output_tokens":4}`, nil)
	if st != 200 {
		t.Fatalf("POST /v1/responses: %d %s", st, raw)
	}
	r := decode[responseObj](t, raw)
	if !strings.HasPrefix(r.ID, "resp_") || r.Object != "response" || r.Status != "completed" || len(r.Output) != 1 ||
		r.Output[0].Content[0].Type != "output_text" || r.Usage.OutputTokens != 4 {
		t.Fatalf("response %s", raw)
	}
	// The next turn names it: here it is found, elsewhere it is not.
	next := `{"model":"sim-model","input":"and then?","previous_response_id":"` + r.ID + `","stream":true}`
	st, hdr, raw := post(t, c, w.URL()+"/v1/responses", next, nil)
	if st != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("continuation: %d %s", st, raw)
	}
	names, data := namedEvents(t, raw)
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for i, n := range want {
		if names[i] != n {
			t.Fatalf("event %d = %q; want %q (%v)", i, names[i], n, names)
		}
	}
	if names[len(names)-1] != "response.completed" || !strings.Contains(data[0], `"id":"resp_`) {
		t.Errorf("last event %q, first %s", names[len(names)-1], data[0])
	}
	st, _, raw = post(t, c, other.URL()+"/v1/responses", strings.Replace(next, `,"stream":true`, "", 1), nil)
	if e := decode[apiErr](t, raw); st != 404 || !strings.Contains(e.Error.Message, "not found") {
		t.Errorf("continuation on another worker: %d %s; want vLLM's 404", st, raw)
	}
	if st, raw := get(t, c, w.URL()+"/v1/responses/"+r.ID); st != 200 || !strings.Contains(string(raw), r.ID) {
		t.Errorf("GET stored: %d %s", st, raw)
	}
	if st, _ := get(t, c, other.URL()+"/v1/responses/"+r.ID); st != 404 {
		t.Errorf("GET elsewhere: %d; want 404", st)
	}
	if st, _, _ := post(t, c, w.URL()+"/v1/responses/"+r.ID+"/cancel", "", nil); st != 400 {
		t.Errorf("cancel a finished response: %d; want 400", st)
	}
	if w.responses.Len() != 2 || other.responses.Len() != 0 {
		t.Errorf("stored %d and %d; want 2 and 0", w.responses.Len(), other.responses.Len())
	}
}

func TestResponses_RenderTheSamePromptAsChat(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	chat := tokenize(t, c, w, map[string]any{"messages": []map[string]any{{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}}})
	st, _, raw := post(t, c, w.URL()+"/v1/responses", `{"instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":1}`, nil)
	if st != 200 {
		t.Fatalf("%d %s", st, raw)
	}
	if r := decode[responseObj](t, raw); r.Usage.InputTokens != len(chat.Tokens) {
		t.Errorf("input tokens %d; want the chat rendering's %d", r.Usage.InputTokens, len(chat.Tokens))
	}
}

func TestMessages_AnthropicShapesWholeAndStreamed(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	body := `{"model":"sim-model","max_tokens":3,"system":"sys","messages":[{"role":"user","content":"hi"}]}`
	st, _, raw := post(t, c, w.URL()+"/v1/messages", body, nil)
	m := decode[map[string]any](t, raw)
	if st != 200 || m["type"] != "message" || m["role"] != "assistant" || m["stop_reason"] != "max_tokens" {
		t.Fatalf("message: %d %s", st, raw)
	}
	st, _, raw = post(t, c, w.URL()+"/v1/messages", strings.Replace(body, `"max_tokens":3`, `"max_tokens":3,"stream":true`, 1), nil)
	names, _ := namedEvents(t, raw)
	want := "message_start content_block_start content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop "
	if st != 200 || strings.Join(names, " ") != want {
		t.Errorf("stream events %q; want %q", strings.Join(names, " "), want)
	}
	st, _, raw = post(t, c, w.URL()+"/v1/messages", `{"model":"nope","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, nil)
	if e := decode[map[string]any](t, raw); st != 404 || e["type"] != "error" {
		t.Errorf("unknown model: %d %s; want Anthropic's error shape", st, raw)
	}
}

func TestPooling_EmbeddingsPoolingClassifyScoreRerank(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	for _, tt := range []struct{ path, body, want string }{
		{"/v1/embeddings", `{"model":"sim-model","input":["a b","c"]}`, `"object":"embedding"`},
		{"/pooling", `{"input":"a"}`, `"object":"pooling"`},
		{"/classify", `{"input":["x"]}`, `"num_classes":2`},
		{"/score", `{"text_1":"q","text_2":["d1","d2"]}`, `"object":"score"`},
		{"/v1/score", `{"text_1":"q","text_2":"d"}`, `"object":"score"`},
		{"/rerank", `{"query":"q","documents":["d1","d2","d3"],"top_n":2}`, `"relevance_score"`},
		{"/v1/rerank", `{"query":"q","documents":["d1"]}`, `"results"`},
		{"/v2/rerank", `{"query":"q","documents":["d1"]}`, `"results"`},
	} {
		st, _, raw := post(t, c, w.URL()+tt.path, tt.body, nil)
		if st != 200 || !strings.Contains(string(raw), tt.want) {
			t.Errorf("POST %s: %d %s; want %s", tt.path, st, raw, tt.want)
		}
	}
	st, _, raw := post(t, c, w.URL()+"/v1/embeddings", `{"input":"a","encoding_format":"base64"}`, nil)
	var e struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	e = decode[struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}](t, raw)
	if b, err := base64.StdEncoding.DecodeString(e.Data[0].Embedding); st != 200 || err != nil || len(b) != 4*embedDim {
		t.Errorf("base64 embedding: %d %s", st, raw)
	}
}

func TestAudio_TranscriptionAndTranslation(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	form := func(stream bool) (*bytes.Buffer, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		f, _ := mw.CreateFormFile("file", "a.wav")
		_, _ = f.Write(bytes.Repeat([]byte("RIFFdata"), 400))
		_ = mw.WriteField("model", "sim-model")
		if stream {
			_ = mw.WriteField("stream", "true")
		}
		_ = mw.Close()
		return &buf, mw.FormDataContentType()
	}
	for _, path := range []string{"/v1/audio/transcriptions", "/v1/audio/translations"} {
		for _, stream := range []bool{false, true} {
			body, ct := form(stream)
			resp, err := c.Post(w.URL()+path, ct, body)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := `"text":`
			if stream {
				want = ".chunk"
			}
			if resp.StatusCode != http.StatusOK || !bytes.Contains(raw, []byte(want)) {
				t.Errorf("%s stream=%v: %d %s", path, stream, resp.StatusCode, raw)
			}
			if stream && !bytes.HasSuffix(raw, []byte("data: [DONE]\n\n")) {
				t.Errorf("%s stream does not end with [DONE]: %s", path, raw)
			}
		}
	}
}

func TestLoRA_LoadAndUnloadAtRuntimeShowInModels(t *testing.T) {
	w := startWorker(t, func(c *Config) { c.RuntimeLoRA = true; c.LoRAs = []string{"sql"}; c.Aliases = []string{"alias"} })
	off := startWorker(t, func(c *Config) { c.IP = "127.0.0.2" })
	c := client(t)
	if st, _, _ := post(t, c, off.URL()+"/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/p"}`, nil); st != 404 {
		t.Errorf("runtime loading off: %d; want 404", st)
	}
	if st, _, raw := post(t, c, w.URL()+"/v1/load_lora_adapter", `{"lora_name":"chat-lora","lora_path":"/adapters/chat"}`, nil); st != 200 || !strings.Contains(string(raw), "added successfully") {
		t.Fatalf("load: %d %s", st, raw)
	}
	if st, _, _ := post(t, c, w.URL()+"/v1/load_lora_adapter", `{"lora_name":"chat-lora","lora_path":"/adapters/chat"}`, nil); st != 400 {
		t.Errorf("load twice: %d; want 400", st)
	}
	_, raw := get(t, c, w.URL()+"/v1/models")
	for _, want := range []string{`"id":"sim-model"`, `"id":"alias"`, `"id":"sql"`, `"id":"chat-lora","object":"model"`, `"root":"/adapters/chat","parent":"sim-model"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/v1/models lacks %s: %s", want, raw)
		}
	}
	if st, _, raw := post(t, c, w.URL()+"/v1/completions", `{"model":"chat-lora","prompt":"x","max_tokens":1}`, nil); st != 200 {
		t.Errorf("generate with the loaded adapter: %d %s", st, raw)
	}
	if st, _, _ := post(t, c, w.URL()+"/v1/completions", `{"model":"alias","prompt":"x","max_tokens":1}`, nil); st != 200 {
		t.Errorf("generate under an alias: %d", st)
	}
	if st, _, _ := post(t, c, w.URL()+"/v1/unload_lora_adapter", `{"lora_name":"chat-lora"}`, nil); st != 200 {
		t.Errorf("unload: %d", st)
	}
	if st, _, _ := post(t, c, w.URL()+"/v1/completions", `{"model":"chat-lora","prompt":"x","max_tokens":1}`, nil); st != 404 {
		t.Errorf("generate with the unloaded adapter: %d; want 404", st)
	}
}

func TestDetokenize_CountsAndSpecials(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	st, _, raw := post(t, c, w.URL()+"/detokenize", `{"tokens":[151644,5,6]}`, nil)
	if st != 200 || !strings.Contains(string(raw), `"prompt":"\u003c|im_start|\u003e \u003c5\u003e \u003c6\u003e"`) {
		t.Errorf("detokenize: %d %s", st, raw)
	}
}

package gateway

import (
	"strings"

	"github.com/valyala/fasthttp"
)

// The front door's table: every route of vLLM's OpenAI-compatible server
// llb proxies, what it reads of each request and how it is routed.
//
//   - Inference (the routing hierarchy, admission, Tier 1 and 1.5 where a
//     prompt exists): completions, chat completions, the Responses API,
//     Anthropic's Messages API, embeddings, pooling, classification,
//     scoring and reranking, audio transcription and translation.
//   - Light model-aware requests (least-loaded endpoint serving the model,
//     no admission): /tokenize, /detokenize, Anthropic's count_tokens.
//   - Stored responses: GET /v1/responses/{id} and POST
//     /v1/responses/{id}/cancel go to the endpoint that stored the
//     response (RouteRequest.Pin).
//   - GET /v1/models answers the union of the endpoints' models; /health,
//     /ping and /version go to any available endpoint.
//
// vLLM's administrative routes (/v1/load_lora_adapter, /reset_prefix_cache,
// /sleep, /metrics, ...) act on one engine and are not proxied: a load
// balancer cannot pick "the" engine they mean. llb loads adapters itself
// where its LoRA policy says so (lora.go).

// Paths the gateway serves.
const (
	// PathCompletions is the OpenAI completions API.
	PathCompletions = "/v1/completions"
	// PathChatCompletions is the OpenAI chat completions API.
	PathChatCompletions = "/v1/chat/completions"
	// PathResponses is the OpenAI Responses API.
	PathResponses = "/v1/responses"
	// PathMessages is Anthropic's Messages API as vLLM serves it.
	PathMessages = "/v1/messages"
	// PathModels is answered with the union of the endpoints' models (GET).
	PathModels = "/v1/models"
	// PathHealth is passed through to an available endpoint (GET).
	PathHealth = "/health"
)

// APIKind is which API a request uses.
type APIKind uint8

// API kinds.
const (
	// KindCompletion is POST /v1/completions.
	KindCompletion APIKind = iota
	// KindChat is POST /v1/chat/completions.
	KindChat
	// KindResponses is POST /v1/responses (OpenAI's Responses API).
	KindResponses
	// KindMessages is POST /v1/messages (Anthropic's Messages API).
	KindMessages
	// KindEmbeddings is POST /v1/embeddings.
	KindEmbeddings
	// KindPooling is POST /pooling.
	KindPooling
	// KindClassify is POST /classify.
	KindClassify
	// KindScore is POST /score and /v1/score.
	KindScore
	// KindRerank is POST /rerank, /v1/rerank and /v2/rerank.
	KindRerank
	// KindTranscription is POST /v1/audio/transcriptions (multipart).
	KindTranscription
	// KindTranslation is POST /v1/audio/translations (multipart).
	KindTranslation
	// KindTokenize is POST /tokenize.
	KindTokenize
	// KindDetokenize is POST /detokenize.
	KindDetokenize
	// KindCountTokens is POST /v1/messages/count_tokens.
	KindCountTokens
	kindCount
)

var kindNames = [kindCount]string{"completion", "chat", "responses", "messages", "embeddings", "pooling",
	"classify", "score", "rerank", "transcription", "translation", "tokenize", "detokenize", "count_tokens"}

// String returns the kind's snake_case name ("completion", "chat", ...):
// the access log's api field.
func (k APIKind) String() string {
	if k < kindCount {
		return kindNames[k]
	}
	return "unknown"
}

// multipart reports whether the API's body is a multipart form (audio).
func (k APIKind) multipart() bool { return k == KindTranscription || k == KindTranslation }

// light reports whether the API is not inference: routed to the
// least-loaded endpoint serving the model, without admission or tiers.
func (k APIKind) light() bool {
	return k == KindTokenize || k == KindDetokenize || k == KindCountTokens
}

// splitsOnPD reports whether a P/D rule runs the API as two legs (vLLM's
// kv_transfer_params exist on completions and chat only); the other APIs go
// whole to the decision's decode endpoint, which computes the prefill itself.
func (k APIKind) splitsOnPD() bool { return k == KindCompletion || k == KindChat }

// api is one entry of the front door's table: a path (or a path prefix),
// the methods it takes and what serves a request to it.
type api struct {
	path string
	// prefix: the entry serves every path under path (which ends in "/").
	prefix  bool
	methods []string // the first is the one the 404 answer names
	// name is the request's api in the access log and metrics.
	name string
	// gen marks an inference API: its requests are counted per tenant
	// and class (TenantMetrics).
	gen   bool
	serve func(x *exchange)
}

func generate(k APIKind) api {
	return api{methods: methodPost, name: k.String(), gen: true, serve: func(x *exchange) { x.serveGenerate(k) }}
}

func light(k APIKind) api {
	return api{methods: methodPost, name: k.String(), serve: func(x *exchange) { x.serveLight(k) }}
}

var (
	methodPost = []string{fasthttp.MethodPost}
	getHead    = []string{fasthttp.MethodGet, fasthttp.MethodHead}
)

// at returns a with its path set.
func (a api) at(path string) api { a.path = path; return a }

// apis is the front door's table. A request to another path is answered
// 404 unknown_url; to a listed path with another method, 405 with Allow.
var apis = [...]api{
	generate(KindCompletion).at(PathCompletions),
	generate(KindChat).at(PathChatCompletions),
	generate(KindResponses).at(PathResponses),
	{path: PathResponses + "/", prefix: true, methods: []string{fasthttp.MethodGet, fasthttp.MethodPost}, name: "responses_stored",
		serve: (*exchange).serveStoredResponse},
	generate(KindMessages).at(PathMessages),
	light(KindCountTokens).at(PathMessages + "/count_tokens"),
	generate(KindEmbeddings).at("/v1/embeddings"),
	generate(KindPooling).at("/pooling"),
	generate(KindClassify).at("/classify"),
	generate(KindScore).at("/score"),
	generate(KindScore).at("/v1/score"),
	generate(KindRerank).at("/rerank"),
	generate(KindRerank).at("/v1/rerank"),
	generate(KindRerank).at("/v2/rerank"),
	generate(KindTranscription).at("/v1/audio/transcriptions"),
	generate(KindTranslation).at("/v1/audio/translations"),
	light(KindTokenize).at("/tokenize"),
	light(KindDetokenize).at("/detokenize"),
	{path: PathModels, methods: getHead, name: "models", serve: (*exchange).serveModels},
	{path: PathHealth, methods: getHead, name: "passthrough", serve: (*exchange).servePassthrough},
	{path: "/ping", methods: []string{fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodPost}, name: "passthrough", serve: (*exchange).servePassthrough},
	{path: "/version", methods: getHead, name: "passthrough", serve: (*exchange).servePassthrough},
}

// apiFor returns the table's entry for path, or nil.
func apiFor(path []byte) *api {
	for i := range apis {
		a := &apis[i]
		if a.path == string(path) || a.prefix && len(path) > len(a.path) && a.path == string(path[:len(a.path)]) {
			return a
		}
	}
	return nil
}

// takes reports whether the API accepts method.
func (a *api) takes(method []byte) bool {
	for _, m := range a.methods {
		if m == string(method) {
			return true
		}
	}
	return false
}

// served lists the table for the 404 answer: "POST /v1/completions, …
// and GET /version".
var served = func() string {
	var b strings.Builder
	for i := range apis {
		switch {
		case i == len(apis)-1:
			b.WriteString(" and ")
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(apis[i].methods[0] + " " + apis[i].path)
		if apis[i].prefix {
			b.WriteString("{id}")
		}
	}
	return b.String()
}()

// apiOfPath is the access log's api for a request refused before it was
// parsed.
func apiOfPath(path []byte) string {
	if a := apiFor(path); a != nil {
		return a.name
	}
	return "unknown"
}

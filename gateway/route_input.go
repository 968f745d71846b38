package gateway

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// Routing input: what the ladder keys on, derived from the parsed request.
//
//   - Session key (Tier 0): ladder.SessionKeyFor(user_id or user,
//     X-Conversation-Id). OpenAI's "user" is honoured only when user_id is
//     absent; X-Conversation-Id overrides both.
//   - Prompt bytes (Tier-1 trie): the completion prompt (the first prompt of
//     a multi-prompt request), or for chat the rendering of ALL messages,
//     each as role 0x1F text 0x1E. Token-id prompts render as 4-byte
//     little-endian ids, so equal token prefixes are equal byte prefixes.
//   - Prefix hash (CHWBL, sel:9): ladder.PrefixHash over model, LoRA,
//     cache_salt and the leading PrefixSpan(level) bytes of the prompt
//     rendering — for chat, of the messages up to and including the first
//     user message only, so a multi-turn chat keeps its key as it grows.
//   - Conversation hash: XXH64 of X-Conversation-Id.
//   - Client hash / key (sel:1, sel:3): the client's ip:port and IP, or the
//     session_header_name value.

// Chat rendering separators.
const (
	chatRoleSep = 0x1f
	chatMsgSep  = 0x1e
)

// PrefixSpan returns how many leading bytes of the prompt rendering the
// CHWBL prefix hash covers at chwbl_prefix_hash_level level: 1 → 256 (about
// 64 tokens: a system prompt's head), 2 → 1024, 3 → 4096. Other values are
// treated as 1.
func PrefixSpan(level int) int {
	switch level {
	case 2:
		return 1024
	case 3:
		return 4096
	}
	return 256
}

// Prefix-hash flag bits honoured (chwbl_prefix_hash_flags).
const (
	prefixFlagLoRA      = 1 << 0
	prefixFlagCacheSalt = 1 << 3
)

// sessionSourceKind is where the persist key comes from.
type sessionSourceKind uint8

const (
	sessionFromIP sessionSourceKind = iota
	sessionFromHeader
	sessionFromCookie
	sessionFromQuery
	sessionFromBasicAuth
)

// sessionSource is a parsed session_header_name.
type sessionSource struct {
	kind sessionSourceKind
	name string
}

var errSessionSource = errors.New(`want "<Header>", "cookie:<name>", "query:<param>" or "basic-auth"`)

func parseSessionHeader(s string) (sessionSource, error) {
	switch {
	case s == "":
		return sessionSource{}, nil
	case s == "basic-auth":
		return sessionSource{kind: sessionFromBasicAuth}, nil
	case strings.HasPrefix(s, "cookie:"):
		if n := s[len("cookie:"):]; n != "" {
			return sessionSource{kind: sessionFromCookie, name: n}, nil
		}
	case strings.HasPrefix(s, "query:"):
		if n := s[len("query:"):]; n != "" {
			return sessionSource{kind: sessionFromQuery, name: n}, nil
		}
	case strings.ContainsAny(s, ": \t"):
	default:
		return sessionSource{kind: sessionFromHeader, name: http.CanonicalHeaderKey(s)}, nil
	}
	return sessionSource{}, fmt.Errorf("%q: %w", s, errSessionSource)
}

// value extracts the persist key from the request; "" when it lacks it.
func (s sessionSource) value(in *fasthttp.Request) string {
	switch s.kind {
	case sessionFromHeader:
		return string(in.Header.Peek(s.name))
	case sessionFromCookie:
		return string(in.Header.Cookie(s.name))
	case sessionFromQuery:
		return string(in.URI().QueryArgs().Peek(s.name))
	case sessionFromBasicAuth:
		if u, ok := basicAuthUser(in.Header.Peek("Authorization")); ok {
			return u
		}
	}
	return ""
}

// basicAuthUser returns the user name of an "Authorization: Basic"
// header value (RFC 7617), as net/http's Request.BasicAuth does.
func basicAuthUser(auth []byte) (string, bool) {
	const prefix = "basic "
	if len(auth) < len(prefix) || !strings.EqualFold(string(auth[:len(prefix)]), prefix) {
		return "", false
	}
	dec, err := base64.StdEncoding.DecodeString(string(auth[len(prefix):]))
	if err != nil {
		return "", false
	}
	user, _, ok := strings.Cut(string(dec), ":")
	return user, ok
}

// rendering is a request's prompt rendering for routing.
type rendering struct {
	// text is the full rendering (Tier-1 trie input).
	text []byte
	// stable is the length of the turn-stable head (chat: through the first
	// user message; completion: everything).
	stable int
}

// renderPrompt renders the request for the trie and the prefix hash. The
// router may keep the bytes after Route returns, so they never alias the
// request body (which the server reuses): a chat rendering is freshly
// allocated, and a completion's text prompt is its decoded string's own
// bytes — immutable, and not copied again, as a prompt may be as large as
// the body (the ladder only reads Prompt; the trie copies what it keeps).
func renderPrompt(req *Request) rendering {
	switch {
	case req.chatForm():
		n := 0
		for i := range req.Messages {
			n += len(req.Messages[i].Role) + len(req.Messages[i].Text) + 2
		}
		b := make([]byte, 0, n)
		stable := -1
		for i := range req.Messages {
			m := &req.Messages[i]
			b = append(b, m.Role...)
			b = append(b, chatRoleSep)
			b = append(b, m.Text...)
			b = append(b, chatMsgSep)
			if stable < 0 && m.Role == "user" {
				stable = len(b)
			}
		}
		if stable < 0 {
			stable = len(b)
		}
		return rendering{text: b, stable: stable}
	default:
		var b []byte
		switch req.Form {
		case PromptText, PromptTexts:
			b = unsafe.Slice(unsafe.StringData(req.Texts[0]), len(req.Texts[0]))
		case PromptTokens, PromptTokenLists:
			toks := req.Tokens[0]
			b = make([]byte, 4*len(toks))
			for i, t := range toks {
				binary.LittleEndian.PutUint32(b[4*i:], t)
			}
		}
		return rendering{text: b, stable: len(b)}
	}
}

// routeInput builds RouteRequests for one rule.
type routeInput struct {
	span    int
	flags   int
	loraOf  func(string) string
	session sessionSource
	kv      *kvInput // nil when kvExactMode is off
	pd      bool
}

func newRouteInput(c *rule.Compiled, loraOf func(string) string, kv *kvInput) (*routeInput, error) {
	src, err := parseSessionHeader(c.SessionHeaderName)
	if err != nil {
		return nil, fmt.Errorf("session_header_name: %w: %w", err, ErrInvalidConfig)
	}
	return &routeInput{
		span:    PrefixSpan(c.PrefixHash.Level),
		flags:   c.PrefixHash.Flags,
		loraOf:  loraOf,
		session: src,
		kv:      kv,
		pd:      c.Spec.PDDisagg,
	}, nil
}

// lora returns the LoRA adapter name the model names, or "".
func (ri *routeInput) lora(model string) string {
	if ri.loraOf == nil || model == "" {
		return ""
	}
	return ri.loraOf(model)
}

// build fills rr for req (generation APIs) received from the client at
// remote (ip:port, ip). It runs in the request's own goroutine and may call
// the engine's /tokenize (bounded by its deadline).
func (ri *routeInput) build(ctx context.Context, in *fasthttp.Request, remote, ip string, req *Request, rr *actors.RouteRequest) {
	ri.buildBasic(in, remote, ip, rr)
	lr := &rr.Req
	lr.SessionKey, _ = ladder.SessionKeyFor(req.SessionUser(), req.ConversationID)
	if req.ConversationID != "" {
		lr.ConvHash, lr.HasConvHash = ladder.XXH64String(req.ConversationID, 0), true
	}
	rend := renderPrompt(req)
	lr.Prompt = rend.text
	lora := ri.lora(req.Model)
	key := ladder.PrefixKey{Model: req.Model, Prefix: rend.text[:min(rend.stable, ri.span)]}
	if ri.flags == 0 || ri.flags&prefixFlagLoRA != 0 {
		key.LoRA = lora
	}
	if ri.flags == 0 || ri.flags&prefixFlagCacheSalt != 0 {
		key.CacheSalt = req.CacheSalt
	}
	lr.PrefixHash, lr.HasPrefixHash = ladder.PrefixHash(&key), true
	if ri.kv != nil {
		rr.Chain, lr.KV = ri.kv.compute(ctx, req, lora, ri.pd)
		rr.Chat, rr.ExtraKeys = req.chatForm(), lora != "" || req.CacheSalt != ""
	}
	lr.KV.DecodeTokens = req.Cont.completionBound(req.Kind)
	rr.Streamed = req.Stream
	rr.Model = req.Model
	if req.Kind == KindResponses && req.PreviousResponseID != "" {
		rr.Pin = actors.ResponseKey(req.PreviousResponseID)
	}
}

// buildBasic fills the client keys, the only input of pass-through routes.
func (ri *routeInput) buildBasic(in *fasthttp.Request, remote, ip string, rr *actors.RouteRequest) {
	lr := &rr.Req
	lr.ClientHash = ladder.XXH64String(remote, 0)
	if ri.session.kind != sessionFromIP {
		lr.ClientKey = ri.session.value(in)
	}
	if lr.ClientKey == "" {
		lr.ClientKey = ip
	}
}

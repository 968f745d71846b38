package des

import (
	"encoding/json"
	"fmt"

	"github.com/llbproject/llb/ladder"
)

// The routing keys a request carries, derived from its body and headers
// exactly as gateway/route_input.go derives them for llbd (the simulator
// cannot import gateway: simulate sits below it). Keep the two in step:
//
//   - Session key: ladder.SessionKeyFor(user_id, else user;
//     X-Conversation-Id).
//   - Prompt bytes (Tier-1 trie): the completion prompt; for chat every
//     message as role 0x1F text 0x1E.
//   - Prefix hash (CHWBL): ladder.PrefixHash over the model and the leading
//     PrefixSpan(1) = 256 bytes of the turn-stable head (chat: through the
//     first user message), no LoRA, no cache_salt.
//   - Conversation hash: XXH64 of X-Conversation-Id.

// prefixSpan is gateway.PrefixSpan(1), the default chwbl_prefix_hash_level.
const prefixSpan = 256

// Chat rendering separators (gateway's chatRoleSep and chatMsgSep).
const (
	chatRoleSep = 0x1f
	chatMsgSep  = 0x1e
)

// requestBody is the part of an OpenAI body routing reads.
type requestBody struct {
	Model    string `json:"model"`
	Prompt   string `json:"prompt"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	UserID string `json:"user_id"`
	User   string `json:"user"`
}

// deriveKeys computes the routing keys of one generated request (the
// request-derived inputs of ladder.Request); Digests and Chain are left
// empty.
func deriveKeys(body []byte, header map[string]string) (RequestKeys, error) {
	var b requestBody
	if err := json.Unmarshal(body, &b); err != nil {
		return RequestKeys{}, fmt.Errorf("request body: %w: %w", ErrConfig, err)
	}
	var text []byte
	stable := 0
	if len(b.Messages) > 0 {
		stable = -1
		for _, m := range b.Messages {
			text = append(text, m.Role...)
			text = append(text, chatRoleSep)
			text = append(text, m.Content...)
			text = append(text, chatMsgSep)
			if stable < 0 && m.Role == "user" {
				stable = len(text)
			}
		}
		if stable < 0 {
			stable = len(text)
		}
	} else {
		text = []byte(b.Prompt)
		stable = len(text)
	}
	user := b.UserID
	if user == "" {
		user = b.User
	}
	conv := header["X-Conversation-Id"]
	k := RequestKeys{Prompt: text}
	k.SessionKey, _ = ladder.SessionKeyFor(user, conv)
	if conv != "" {
		k.ConvHash, k.HasConvHash = ladder.XXH64String(conv, 0), true
	}
	key := ladder.PrefixKey{Model: b.Model, Prefix: text[:min(stable, prefixSpan)]}
	k.PrefixHash = ladder.PrefixHash(&key)
	return k, nil
}

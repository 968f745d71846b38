package tokenizer

import (
	"encoding/json"
	"fmt"
)

// Config is what tokenizer_config.json (and a chat_template.jinja beside
// it) says about a model beyond its vocabulary.
type Config struct {
	// Class is tokenizer_class ("Qwen2Tokenizer", "LlamaTokenizerFast"...).
	Class string
	// BOS, EOS, UNK and PAD are the special tokens' texts ("" when unset);
	// chat templates see them as bos_token, eos_token, unk_token and
	// pad_token.
	BOS, EOS, UNK, PAD string
	// AdditionalSpecial is additional_special_tokens.
	AdditionalSpecial []string
	// AddBOS and AddEOS are add_bos_token / add_eos_token when set.
	AddBOS, AddEOS *bool
	// ChatTemplate is the default chat template ("" when none);
	// ChatTemplates holds named ones (e.g. "tool_use").
	ChatTemplate  string
	ChatTemplates map[string]string
	// SplitSpecialTokens leaves special tokens in the text as text.
	SplitSpecialTokens bool
}

// configJSON is tokenizer_config.json as transformers writes it.
type configJSON struct {
	TokenizerClass          string            `json:"tokenizer_class"`
	BOSToken                json.RawMessage   `json:"bos_token"`
	EOSToken                json.RawMessage   `json:"eos_token"`
	UNKToken                json.RawMessage   `json:"unk_token"`
	PadToken                json.RawMessage   `json:"pad_token"`
	AdditionalSpecialTokens []json.RawMessage `json:"additional_special_tokens"`
	AddBOSToken             *bool             `json:"add_bos_token"`
	AddEOSToken             *bool             `json:"add_eos_token"`
	ChatTemplate            json.RawMessage   `json:"chat_template"`
	SplitSpecialTokens      bool              `json:"split_special_tokens"`
}

// tokenText reads a special token given as a string, as an AddedToken
// object ({"content": ...}) or as null.
func tokenText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("special token %s: %w", truncate(string(raw), 80), ErrMalformed)
	}
	return *obj.Content, nil
}

// parseConfig reads tokenizer_config.json.
func parseConfig(raw []byte) (Config, error) {
	var cj configJSON
	if err := json.Unmarshal(raw, &cj); err != nil {
		return Config{}, fmt.Errorf("tokenizer_config.json: %w: %w", ErrMalformed, err)
	}
	c := Config{Class: cj.TokenizerClass, AddBOS: cj.AddBOSToken, AddEOS: cj.AddEOSToken, SplitSpecialTokens: cj.SplitSpecialTokens}
	var err error
	for _, f := range []struct {
		dst *string
		raw json.RawMessage
	}{{&c.BOS, cj.BOSToken}, {&c.EOS, cj.EOSToken}, {&c.UNK, cj.UNKToken}, {&c.PAD, cj.PadToken}} {
		if *f.dst, err = tokenText(f.raw); err != nil {
			return Config{}, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	for _, r := range cj.AdditionalSpecialTokens {
		s, err := tokenText(r)
		if err != nil {
			return Config{}, fmt.Errorf("tokenizer_config.json: %w", err)
		}
		c.AdditionalSpecial = append(c.AdditionalSpecial, s)
	}
	if err := c.setChatTemplate(cj.ChatTemplate); err != nil {
		return Config{}, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	return c, nil
}

// setChatTemplate reads chat_template: a string, or a list of
// {"name", "template"} where "default" is the default.
func (c *Config) setChatTemplate(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if json.Unmarshal(raw, &c.ChatTemplate) == nil {
		return nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return fmt.Errorf("chat_template: %w: %w", ErrMalformed, err)
	}
	c.ChatTemplates = make(map[string]string, len(named))
	for _, n := range named {
		c.ChatTemplates[n.Name] = n.Template
		if n.Name == "default" {
			c.ChatTemplate = n.Template
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

package tokenizer

import "github.com/llbproject/llb/inventory"

// encodeChat renders a chat request with the model's template and encodes
// it. ok is false when the template is not one proven identical to
// Python jinja2: the request goes to the engine.
func encodeChat(tok *Tokenizer, req inventory.TokenizeRequest, dst []uint32) ([]uint32, bool, error) {
	return dst, false, nil
}

// ChatPath says how tok's chat requests are tokenized: "local" (a verified
// template rendered in process) or "engine" (the engine's /tokenize).
func ChatPath(tok *Tokenizer) string {
	return "engine"
}

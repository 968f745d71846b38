// Package tokenizer tokenizes in process, exactly as a Hugging Face
// tokenizer directory (tokenizer.json + tokenizer_config.json) does in the
// Rust `tokenizers` library that vLLM runs, so Tier 1.5 can hash a prompt
// without asking the engine's /tokenize.
//
// It covers the BPE family of today's open models: byte-level BPE (Qwen2,
// 2.5 and 3, Llama 3.x, DeepSeek V3, GPT-2 style) and sentencepiece-style
// BPE with byte fallback (Llama 2, Mistral 7B). An encode runs the
// pipeline of tokenizers:
//
//  1. added tokens are split out first, leftmost-longest (special tokens
//     always, add_special_tokens only decides the post-processor);
//  2. the remaining text is normalized (NFC, Prepend, Replace, ...);
//  3. pre-tokenizers cut it into words: the split patterns of the known
//     models run on a hand-written scanner (scan.go, differential-tested
//     against regexp2), any other pattern on github.com/dlclark/regexp2;
//  4. each word goes through BPE: bytes (or characters with byte fallback)
//     merged by rank, leftmost first, with a bounded word cache;
//  5. the post-processor adds BOS/EOS when add_special_tokens is set.
//
// Chat requests are rendered by the model's Jinja chat template (chat.go)
// before they are encoded; see Local for which path a request takes.
//
// The package imports only inventory's tokenizer types from llb.
package tokenizer

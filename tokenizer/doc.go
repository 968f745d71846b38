// Package tokenizer turns a request's prompt into the token ids the engine
// will hash, so Tier 1.5 can compute the prompt's block keys. It is the one
// home of tokenization in llb:
//
//   - Tokenizer and Request (tokenizer.go): the interface the gateway calls,
//     and one prompt in either of vLLM's /tokenize forms (completion text
//     or chat messages). New builds a rule's tokenizer.
//   - Remote (remote.go): an engine's POST /tokenize with a deadline,
//     bounded concurrency and an LRU cache of answers (requestcache.go);
//     failover (failover.go) tries a rule's engines in turn.
//   - Encoder (encoder.go, load.go): a Hugging Face tokenizer directory
//     (tokenizer.json + tokenizer_config.json) encoding in process exactly
//     as the Rust `tokenizers` library that vLLM runs, and rendering chat
//     templates (chat.go, on the jinja subpackage) as vLLM does.
//   - Local (local.go): an Encoder used in front of the engines, falling
//     back to them for whatever it does not cover and checking a sample of
//     its answers against them; Registry shares loaded Encoders.
//
// Every Tokenize error is a *GuardError: Tier 1.5 falls through with
// reason tokenize and the request is still served.
//
// Unicode: the package follows Unicode 15.0 (Go's tables), the version of
// Python 3.12 that vLLM runs; see docs/vllm.md.
//
// The Encoder covers the BPE family of today's open models: byte-level BPE
// (Qwen2, 2.5 and 3, Llama 3.x, DeepSeek V3, gpt-oss, Mistral Nemo, GPT-2
// style) and sentencepiece-style BPE with byte fallback (Llama 2, Mistral
// 7B, Gemma 2 and 3). An encode runs the pipeline of tokenizers:
//
//  1. added tokens are split out first, leftmost-longest (special tokens
//     always, add_special_tokens only decides the post-processor);
//  2. the remaining text is normalized (NFC, Prepend, Replace, ...; the
//     Unicode forms as Python's unicodedata computes them, unorm.go);
//  3. pre-tokenizers cut it into words: the split patterns of the known
//     models run on a hand-written scanner (scan.go, differential-tested
//     against regexp2), any other pattern on github.com/dlclark/regexp2;
//  4. each word goes through BPE: bytes (or characters with byte fallback)
//     merged by rank, leftmost first, with a bounded word cache; a long
//     sentencepiece word is cut where no token can span the cut;
//  5. the post-processor adds BOS/EOS when add_special_tokens is set.
//
// The package imports nothing of llb but its jinja subpackage.
package tokenizer

// Package jinja renders Hugging Face chat templates the way transformers
// (and so vLLM) renders them with Python's jinja2: an
// ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
// loop controls, tojson as json.dumps(ensure_ascii=False), and the
// raise_exception and strftime_now globals.
//
// It implements the part of Jinja that chat templates use, with Python's
// semantics where they show in the output: None/True/False and list and
// dict reprs, insertion-ordered dicts, int/float arithmetic, negative
// indexes and slices, str methods (strip, split, startswith...), loop
// scoping (a set inside a loop body does not outlive its iteration),
// namespace(), macros, and jinja2's undefined rules. Anything it does not
// implement is an error, never a guess: the caller then asks the engine.
//
// Render parity with Python jinja2 is checked by make tokenizer-parity
// (tokenizer/chat_parity_test.go) on the real Qwen3, Llama 3, Llama 3.1 and
// DeepSeek V3 templates, tool calls included, and on feature probes.
package jinja

package gateway

import "github.com/llbproject/llb/rule"

// What a continuation may send depends on the engine behind the rule
// (kvEngineType): the continuation is the client's request with a longer
// prompt or a continued final message, reduced token bounds and
// stream_options, and an engine must accept every one of those fields and
// honour them as vLLM does. Where it cannot, the request is not
// migratable on that rule: it is cut when its worker dies, and counted
// (llb_migrations_total{outcome="unsupported"}, migration_cut "engine").
//
//	            chat continued by                      completion without max_tokens   unknown fields
//	vllm        continue_final_message,                max_tokens 16 (vLLM's default)  ignored
//	            add_generation_prompt false
//	sglang      continue_final_message (SGLang has     max_tokens 16 (SGLang's)        ignored
//	            no add_generation_prompt field)
//	trtllm      not at all: trtllm-serve's chat has    not migratable (the default is  refused (400,
//	            no continue_final_message, and a       not the OpenAI server's to      pydantic
//	            final assistant message is rendered    state)                          extra="forbid")
//	            closed
//	llamacpp    the final assistant message (its       no max_tokens sent (n_predict   ignored
//	            server prefills it; add_generation_    -1: no bound)
//	            prompt left as the client sent it)
//
// Every engine above takes stream_options.continuous_usage_stats except
// llama.cpp, whose tokens are then counted one per content event.

// engineRules is what one engine accepts in a continuation.
type engineRules struct {
	// chat: a chat completion can be continued (its partial assistant
	// message sent as the final message).
	chat bool
	// genPromptField: the engine's chat request declares
	// add_generation_prompt (sent false with continue_final_message).
	genPromptField bool
	// completionMaxTokens is a completion's max_tokens when the client
	// sent none: the bound the continuation reduces. 0: the engine has
	// none (nothing is sent); -1: unknown (such a completion is not
	// migratable).
	completionMaxTokens int64
}

// engineRulesFor returns the rules of engine (rule.Compiled.Engine; ""
// is vLLM).
func engineRulesFor(engine string) engineRules {
	switch engine {
	case rule.EngineSGLang:
		return engineRules{chat: true, completionMaxTokens: 16}
	case rule.EngineTRTLLM:
		return engineRules{completionMaxTokens: -1}
	case rule.EngineLlamaCPP:
		return engineRules{chat: true}
	}
	return engineRules{chat: true, genPromptField: true, completionMaxTokens: vllmDefaultMaxTokens}
}

// refusal is why a request the client shaped as m describes cannot be
// continued on this engine (refNone: it can).
func (e engineRules) refusal(m *migration) migrateRefusal {
	switch {
	case m.chat && !e.chat:
		return refEngine
	case !m.chat && m.maxTokens < 0 && e.completionMaxTokens < 0:
		return refEngine
	}
	return refNone
}

package workload

import (
	"math/rand/v2"
	"strconv"
)

// MultiTurn is a multi-round chat workload (vLLM production-stack's
// multi-round QA, llm-d's shared_prefix_multi_turn_chat): Conversations
// users are active at a time, each with a session key; a request is one
// user's next turn, carrying the whole conversation so far (a shared
// system prompt, the user's history, every earlier question and answer),
// so context grows turn by turn. A conversation that used its Turns is
// replaced by a new one. Zero fields take the defaults.
type MultiTurn struct {
	Options
	// Conversations is the number of active conversations. Default 10.
	Conversations int
	// Turns is the number of requests per conversation. Default 5.
	Turns int
	// SystemTokens is the system prompt shared by every conversation.
	// Default 1000.
	SystemTokens int
	// HistoryTokens is a per-user document sent in the first user message.
	// Default 2000.
	HistoryTokens int
	// QuestionTokens is each turn's new user message. Default 100.
	QuestionTokens int
	// AnswerTokens is max_tokens, and the length of the assistant answer
	// the next turn carries (the generator assumes this answer). Default 100.
	AnswerTokens int
	// HeaderSession sends the session key as X-Conversation-Id instead of
	// the user_id body field.
	HeaderSession bool
}

func (m MultiTurn) withDefaults() MultiTurn {
	def(&m.Conversations, 10)
	def(&m.Turns, 5)
	def(&m.SystemTokens, 1000)
	def(&m.HistoryTokens, 2000)
	def(&m.QuestionTokens, 100)
	def(&m.AnswerTokens, 100)
	return m
}

// Validate reports every problem at once.
func (m MultiTurn) Validate() error {
	m = m.withDefaults()
	var errs []error
	errs = appendPositive(errs, "conversations", m.Conversations)
	errs = appendPositive(errs, "turns", m.Turns)
	errs = appendPositive(errs, "system tokens", m.SystemTokens)
	errs = appendPositive(errs, "history tokens", m.HistoryTokens)
	errs = appendPositive(errs, "question tokens", m.QuestionTokens)
	errs = appendPositive(errs, "answer tokens", m.AnswerTokens)
	return joinConfig("multi-turn", errs)
}

// Source implements Spec.
func (m MultiTurn) Source(r *rand.Rand) (Source, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	m = m.withDefaults()
	src := &multiTurnSource{spec: m, seed: r.Uint64()}
	src.system = text(contentRand(src.seed, 0), m.SystemTokens)
	for range m.Conversations {
		src.active = append(src.active, src.newConversation())
	}
	return src, nil
}

type conversation struct {
	id   int
	turn int
	msgs []chatMessage
}

type multiTurnSource struct {
	spec   MultiTurn
	seed   uint64
	system string
	next   int
	active []*conversation
}

func (src *multiTurnSource) newConversation() *conversation {
	c := &conversation{id: src.next, msgs: []chatMessage{{Role: "system", Content: src.system}}}
	src.next++
	return c
}

// Next implements Source.
func (src *multiTurnSource) Next(r *rand.Rand) (Item, error) {
	m := src.spec
	slot := r.IntN(len(src.active))
	c := src.active[slot]
	q := text(contentRand(src.seed, 1, uint64(c.id), uint64(c.turn)), m.QuestionTokens)
	if c.turn == 0 {
		q = text(contentRand(src.seed, 2, uint64(c.id)), m.HistoryTokens) + "\n\n" + q
	}
	c.msgs = append(c.msgs, chatMessage{Role: "user", Content: q})
	session := "conv-" + strconv.Itoa(c.id)
	var extra map[string]any
	var header map[string]string
	if m.HeaderSession {
		header = map[string]string{"X-Conversation-Id": session}
	} else {
		extra = map[string]any{"user_id": session}
	}
	it, err := m.chatItem(c.msgs, m.AnswerTokens, extra)
	if err != nil {
		return Item{}, err
	}
	it.Header, it.Workload, it.Group, it.Session = header, "multi_turn", c.id, session
	answer := text(contentRand(src.seed, 3, uint64(c.id), uint64(c.turn)), m.AnswerTokens)
	c.msgs = append(c.msgs, chatMessage{Role: "assistant", Content: answer})
	c.turn++
	if c.turn == m.Turns {
		src.active[slot] = src.newConversation()
	}
	return it, nil
}

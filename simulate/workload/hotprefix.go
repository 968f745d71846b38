package workload

import (
	"math/rand/v2"
	"strconv"
)

// HotPrefix is the hot-spotting workload: one long preamble shared by every
// one of Clients clients, each request adding a fresh suffix. Pure cache
// affinity sends all of it to one worker; a load bound must spread it. Zero
// fields take the defaults.
type HotPrefix struct {
	Options
	// Clients is the number of clients sharing the prefix. Default 50.
	Clients int
	// PrefixTokens is the shared preamble's length. Default 2048.
	PrefixTokens int
	// SuffixTokens is each request's unique suffix. Default 64.
	SuffixTokens int
	// OutputTokens is max_tokens. Default 128.
	OutputTokens int
	// Sessions gives each client a user_id session key.
	Sessions bool
	// Chat sends chat requests (the prefix as system message).
	Chat bool
}

func (h HotPrefix) withDefaults() HotPrefix {
	def(&h.Clients, 50)
	def(&h.PrefixTokens, 2048)
	def(&h.SuffixTokens, 64)
	def(&h.OutputTokens, 128)
	return h
}

// Validate reports every problem at once.
func (h HotPrefix) Validate() error {
	h = h.withDefaults()
	var errs []error
	errs = appendPositive(errs, "clients", h.Clients)
	errs = appendPositive(errs, "prefix tokens", h.PrefixTokens)
	errs = appendPositive(errs, "suffix tokens", h.SuffixTokens)
	errs = appendPositive(errs, "output tokens", h.OutputTokens)
	return joinConfig("hot prefix", errs)
}

// Source implements Spec.
func (h HotPrefix) Source(r *rand.Rand) (Source, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	h = h.withDefaults()
	seed := r.Uint64()
	return &hotPrefixSource{spec: h, prefix: text(contentRand(seed, 0), h.PrefixTokens)}, nil
}

type hotPrefixSource struct {
	spec   HotPrefix
	prefix string
}

// Next implements Source.
func (src *hotPrefixSource) Next(r *rand.Rand) (Item, error) {
	h := src.spec
	client := r.IntN(h.Clients)
	suffix := text(r, h.SuffixTokens)
	var extra map[string]any
	session := ""
	if h.Sessions {
		session = "client-" + strconv.Itoa(client)
		extra = map[string]any{"user_id": session}
	}
	var it Item
	var err error
	if h.Chat {
		it, err = h.chatItem([]chatMessage{{Role: "system", Content: src.prefix}, {Role: "user", Content: suffix}}, h.OutputTokens, extra)
	} else {
		it, err = h.completionItem(src.prefix+"\n"+suffix, h.OutputTokens, extra)
	}
	if err != nil {
		return Item{}, err
	}
	it.Workload, it.Group, it.Session = "hot_prefix", client, session
	return it, nil
}

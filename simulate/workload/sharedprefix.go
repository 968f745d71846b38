package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// SharedPrefix is SGLang's generated-shared-prefix workload
// (bench_serving --dataset-name generated-shared-prefix): Groups system
// prompts, each with PromptsPerGroup questions; a request is one group's
// system prompt followed by one of its questions. Groups are drawn with Zipf
// popularity (ZipfAlpha; 0 is uniform), questions uniformly. Zero fields
// take SGLang's defaults.
type SharedPrefix struct {
	Options
	// Groups is the number of shared system prompts. Default 64.
	Groups int
	// PromptsPerGroup is the number of distinct questions per group.
	// Default 16.
	PromptsPerGroup int
	// SystemTokens is the system prompt length in tokens. Default 2048.
	SystemTokens int
	// QuestionTokens is the question length in tokens. Default 128.
	QuestionTokens int
	// OutputTokens is max_tokens. Default 256.
	OutputTokens int
	// ZipfAlpha (>= 0) skews group popularity; 0 draws groups uniformly.
	ZipfAlpha float64
	// Chat sends chat requests (system + user messages) instead of
	// completions (system prompt, a blank line, the question).
	Chat bool
}

// withDefaults fills zero fields.
func (s SharedPrefix) withDefaults() SharedPrefix {
	def(&s.Groups, 64)
	def(&s.PromptsPerGroup, 16)
	def(&s.SystemTokens, 2048)
	def(&s.QuestionTokens, 128)
	def(&s.OutputTokens, 256)
	return s
}

func def(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

// Validate reports every problem at once.
func (s SharedPrefix) Validate() error {
	s = s.withDefaults()
	var errs []error
	errs = appendPositive(errs, "groups", s.Groups)
	errs = appendPositive(errs, "prompts per group", s.PromptsPerGroup)
	errs = appendPositive(errs, "system tokens", s.SystemTokens)
	errs = appendPositive(errs, "question tokens", s.QuestionTokens)
	errs = appendPositive(errs, "output tokens", s.OutputTokens)
	if !(s.ZipfAlpha >= 0) || math.IsInf(s.ZipfAlpha, 0) {
		errs = append(errs, fmt.Errorf("zipf alpha %v (want >= 0)", s.ZipfAlpha))
	}
	return joinConfig("shared prefix", errs)
}

func appendPositive(errs []error, name string, v int) []error {
	if v < 1 {
		return append(errs, fmt.Errorf("%s %d (want >= 1)", name, v))
	}
	return errs
}

func joinConfig(what string, errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s workload: %w: %w", what, ErrConfig, errors.Join(errs...))
}

// Source implements Spec.
func (s SharedPrefix) Source(r *rand.Rand) (Source, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	s = s.withDefaults()
	return &sharedPrefixSource{spec: s, seed: r.Uint64(), zipf: newZipf(s.Groups, s.ZipfAlpha), systems: map[int]string{}}, nil
}

type sharedPrefixSource struct {
	spec    SharedPrefix
	seed    uint64
	zipf    zipf
	systems map[int]string // system prompt per group, built on first use
}

// Next implements Source.
func (src *sharedPrefixSource) Next(r *rand.Rand) (Item, error) {
	s := src.spec
	g := src.zipf.sample(r)
	p := r.IntN(s.PromptsPerGroup)
	sys, ok := src.systems[g]
	if !ok {
		sys = text(contentRand(src.seed, 1, uint64(g)), s.SystemTokens)
		src.systems[g] = sys
	}
	question := text(contentRand(src.seed, 2, uint64(g), uint64(p)), s.QuestionTokens)
	var it Item
	var err error
	if s.Chat {
		it, err = s.chatItem([]chatMessage{{Role: "system", Content: sys}, {Role: "user", Content: question}}, s.OutputTokens, nil)
	} else {
		it, err = s.completionItem(sys+"\n\n"+question, s.OutputTokens, nil)
	}
	if err != nil {
		return Item{}, err
	}
	it.Workload, it.Group = "shared_prefix", g
	return it, nil
}

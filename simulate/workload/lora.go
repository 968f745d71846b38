package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// LoRAAdapters is the many-adapters workload: requests for Adapters LoRA
// adapters of one base model, drawn with Zipf popularity (a few hot, a
// long cold tail), each adapter's requests sharing its task preamble and
// adding a fresh question. The engines batch at most --max-loras adapters
// at once, so where each adapter's requests go decides how long they
// wait. Zero fields take the defaults.
type LoRAAdapters struct {
	Options
	// Adapters is the number of adapters, named "lora-0" … Default 32.
	Adapters int
	// ZipfAlpha (>= 0) skews adapter popularity; 0 is uniform. Default 1.1.
	ZipfAlpha float64
	// PrefixTokens is each adapter's task preamble. Default 256.
	PrefixTokens int
	// SuffixTokens is each request's question. Default 64.
	SuffixTokens int
	// OutputTokens is max_tokens. Default 128.
	OutputTokens int
}

func (l LoRAAdapters) withDefaults() LoRAAdapters {
	def(&l.Adapters, 32)
	if l.ZipfAlpha == 0 {
		l.ZipfAlpha = 1.1
	}
	def(&l.PrefixTokens, 256)
	def(&l.SuffixTokens, 64)
	def(&l.OutputTokens, 128)
	return l
}

// Validate reports every problem at once.
func (l LoRAAdapters) Validate() error {
	l = l.withDefaults()
	var errs []error
	errs = appendPositive(errs, "adapters", l.Adapters)
	errs = appendPositive(errs, "prefix tokens", l.PrefixTokens)
	errs = appendPositive(errs, "suffix tokens", l.SuffixTokens)
	errs = appendPositive(errs, "output tokens", l.OutputTokens)
	if !(l.ZipfAlpha >= 0) || math.IsInf(l.ZipfAlpha, 0) {
		errs = append(errs, fmt.Errorf("zipf alpha %v (want >= 0)", l.ZipfAlpha))
	}
	return joinConfig("lora adapters", errs)
}

// AdapterName is adapter k's model name.
func AdapterName(k int) string { return "lora-" + strconv.Itoa(k) }

// Names returns every adapter's name.
func (l LoRAAdapters) Names() []string {
	l = l.withDefaults()
	out := make([]string, l.Adapters)
	for k := range out {
		out[k] = AdapterName(k)
	}
	return out
}

// Source implements Spec.
func (l LoRAAdapters) Source(r *rand.Rand) (Source, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	l = l.withDefaults()
	return &loraSource{spec: l, seed: r.Uint64(), zipf: newZipf(l.Adapters, l.ZipfAlpha), pre: map[int]string{}}, nil
}

type loraSource struct {
	spec LoRAAdapters
	seed uint64
	zipf zipf
	pre  map[int]string // adapter preambles, built on first use
}

// Next implements Source.
func (src *loraSource) Next(r *rand.Rand) (Item, error) {
	l := src.spec
	k := src.zipf.sample(r)
	pre, ok := src.pre[k]
	if !ok {
		pre = text(contentRand(src.seed, 6, uint64(k)), l.PrefixTokens)
		src.pre[k] = pre
	}
	o := l.Options
	o.Model = AdapterName(k)
	it, err := o.completionItem(pre+"\n\nTask: "+text(r, l.SuffixTokens), l.OutputTokens, nil)
	if err != nil {
		return Item{}, err
	}
	it.Workload, it.Group, it.LoRA = "lora", k, o.Model
	return it, nil
}

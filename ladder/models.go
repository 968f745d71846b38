package ladder

import "slices"

// Model-aware endpoint sets: which endpoints may serve a request, given the
// served-model name it asks for and what each endpoint's /v1/models lists
// (its --served-model-name names and aliases, and its loaded LoRA
// adapters). Every peer router filters by model before it scores; llb
// does it before any tier, as a mask over the rule's endpoints, the same
// mechanism as a retry's avoid set.

// ServedModels is which endpoints serve which model names, built from the
// endpoints' /v1/models lists. It is immutable once built (the runtime
// swaps in a new one when a list changes), so readers need no lock.
type ServedModels struct {
	// known is the endpoints whose list has been read at least once.
	known EndpointSet
	// by maps a served name to the endpoints listing it.
	by map[string]EndpointSet
	// adapters maps a LoRA adapter's name to its card's root (the path
	// vLLM loaded it from) and parent (its base model), as the first
	// endpoint listing it says.
	adapters map[string]Adapter
}

// Adapter is a LoRA adapter as /v1/models describes it: a card whose
// parent is another model.
type Adapter struct {
	// Root is the card's root: the path (or Hugging Face id) the adapter
	// was loaded from, what POST /v1/load_lora_adapter takes as lora_path.
	Root string
	// Parent is the base model the adapter applies to.
	Parent string
}

// ModelCard is one entry of an endpoint's /v1/models list as routing
// reads it.
type ModelCard struct {
	// ID is the served name (a --served-model-name, or an adapter's name).
	ID string
	// Root is the model's path or Hugging Face id (an adapter's lora_path).
	Root string
	// Parent is the base model of a LoRA adapter; "" for a base model.
	Parent string
}

// IsAdapter reports whether the card is a LoRA adapter: it has a parent
// other than itself.
func (c ModelCard) IsAdapter() bool { return c.Parent != "" && c.Parent != c.ID }

// NewServedModels builds the table from each endpoint's list: lists[i] is
// endpoint i's cards, nil when its list has not been read (the endpoint
// then counts as serving every name). At most MaxEndpoints lists are read.
func NewServedModels(lists [][]ModelCard) *ServedModels {
	s := &ServedModels{by: map[string]EndpointSet{}, adapters: map[string]Adapter{}}
	for i, l := range lists {
		if i >= MaxEndpoints {
			break
		}
		if l == nil {
			continue
		}
		s.known = s.known.With(i)
		for _, c := range l {
			if c.ID == "" {
				continue
			}
			s.by[c.ID] = s.by[c.ID].With(i)
			if _, seen := s.adapters[c.ID]; !seen && c.IsAdapter() {
				s.adapters[c.ID] = Adapter{Root: c.Root, Parent: c.Parent}
			}
		}
	}
	return s
}

// Eligible returns the endpoints among the first n that may serve a
// request for model: those listing it, and those whose list is not known
// yet (fail open: a list that could not be read says nothing). served is
// false when the set is empty. An empty model name, or a nil table,
// restricts nothing: vLLM serves a request without a model with its first
// served name.
func (s *ServedModels) Eligible(model string, n int) (set EndpointSet, served bool) {
	all := allEndpoints(n)
	if s == nil || model == "" {
		return all, n > 0
	}
	set = (s.by[model] | ^s.known) & all
	return set, set != 0
}

// Known reports whether endpoint ep's list has been read.
func (s *ServedModels) Known(ep int) bool { return s != nil && s.known.Has(ep) }

// Serves reports whether endpoint ep's list names model.
func (s *ServedModels) Serves(ep int, model string) bool {
	return s != nil && s.by[model].Has(ep)
}

// Adapter returns the LoRA adapter model names, if any endpoint lists it
// as one.
func (s *ServedModels) Adapter(model string) (Adapter, bool) {
	if s == nil {
		return Adapter{}, false
	}
	a, ok := s.adapters[model]
	return a, ok
}

// Names returns every served name, sorted.
func (s *ServedModels) Names() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.by))
	for k := range s.by {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// allEndpoints is the set of endpoints 0..n-1.
func allEndpoints(n int) EndpointSet {
	if n >= 64 {
		return ^EndpointSet(0)
	}
	if n <= 0 {
		return 0
	}
	return EndpointSet(1)<<uint(n) - 1
}

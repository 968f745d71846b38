package peers

import "time"

// AIBrix's LoRA adapter routing in its single-pod mode (vllm-project/aibrix
// docs/source/features/lora-dynamic-loading.rst, samples/adapter/adapter.yaml,
// pkg/controller/modeladapter). A ModelAdapter resource names an adapter;
// the controller loads it (/v1/load_lora_adapter) on the pods its
// podSelector matches and publishes them as the adapter's Service and
// EndpointSlice, and the gateway sends a request naming the adapter only to
// those pods.
//
//	replicas: 1   the adapter is loaded on one pod, chosen by the
//	              controller's scheduler: leastAdapters (the default policy,
//	              scheduling/leastadapters.go) takes the pod with the fewest
//	              adapters, the first such pod on ties; the adapter stays
//	              there while the pod lives
//	replicas: nil the adapter is loaded on every matching pod (the sample's
//	              recommendation); the gateway then routes it as any model,
//	              which is the aibrix policy itself
//
// This policy is the single-pod mode. Adapters are placed in the order of
// their first request (each ModelAdapter exists before its traffic; the
// order they were created in is the operator's). A request without an
// adapter, and a request among several pods, is placed by AIBrix's
// prefix-cache router (the aibrix policy), which also counts the adapter
// requests in flight.
type aibrixLoRA struct {
	base   *aibrix
	placed map[string]int // adapter → the pod it is loaded on
	count  []int          // adapters loaded per pod
}

func newAIBrixLoRA(n int, base *aibrix) *aibrixLoRA {
	return &aibrixLoRA{base: base, placed: map[string]int{}, count: make([]int, n)}
}

// Pick implements Policy.
func (a *aibrixLoRA) Pick(now time.Time, req *Request, eps []Endpoint) int {
	if req.Adapter == "" {
		return a.base.Pick(now, req, eps)
	}
	pod, ok := a.placed[req.Adapter]
	if !ok || pod >= len(eps) {
		pod = 0
		for p := 1; p < len(eps); p++ {
			if a.count[p] < a.count[pod] {
				pod = p
			}
		}
		a.placed[req.Adapter] = pod
		a.count[pod]++
	}
	a.base.load.add(req.ID, pod)
	return pod
}

// FirstToken implements Policy.
func (a *aibrixLoRA) FirstToken(now time.Time, id int) { a.base.FirstToken(now, id) }

// Done implements Policy.
func (a *aibrixLoRA) Done(now time.Time, id int) { a.base.Done(now, id) }

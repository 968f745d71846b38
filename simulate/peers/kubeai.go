package peers

import (
	"time"

	"github.com/llbproject/llb/ladder"
)

// KubeAI's PrefixHash load balancing (substratusai/kubeai
// internal/loadbalancer: group_chwbl.go, the Model's
// loadBalancing.prefixHash defaults): consistent hashing with bounded
// loads over a ring of 256 replicas per endpoint, keyed by the first 100
// characters of the prompt (of the first user message for chat).
//
//	loadOK(e) ⇔ total in flight = 0 ∨ load_e + 1 ≤ 1.25 · (total + 1) / n
//
// From the key's point the walk takes the first endpoint whose load is OK,
// else the key's home. Loads are the router's own in-flight requests.
const (
	kubeaiPrefixChars = 100
	kubeaiLoadFactor  = 1.25 // meanLoadPercentage 125
)

type kubeai struct {
	load  inflight
	ring  *ladder.Ring
	total int
}

func newKubeAI(n int, addrs []string) *kubeai {
	eps := make([]ladder.EndpointSpec, n)
	for i := range eps {
		if i < len(addrs) {
			eps[i].Addr = addrs[i]
		}
	}
	return &kubeai{load: newInflight(n), ring: ladder.NewRing(eps, false)}
}

// Pick implements Policy.
func (k *kubeai) Pick(_ time.Time, req *Request, eps []Endpoint) int {
	key := req.Text[:min(len(req.Text), kubeaiPrefixChars)]
	h := ladder.XXH64(key, 0)
	var ok ladder.EndpointSet
	for i := range eps {
		if k.total == 0 || float64(k.load.load[i]+1) <= kubeaiLoadFactor*float64(k.total+1)/float64(len(eps)) {
			ok = ok.With(i)
		}
	}
	w := k.ring.First(h, ok)
	if w < 0 {
		w = k.ring.Home(h)
	}
	k.load.add(req.ID, w)
	k.total++
	return w
}

// FirstToken implements Policy.
func (k *kubeai) FirstToken(time.Time, int) {}

// Done implements Policy.
func (k *kubeai) Done(_ time.Time, id int) {
	if _, ok := k.load.done(id); ok {
		k.total--
	}
}

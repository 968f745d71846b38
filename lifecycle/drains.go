package lifecycle

import (
	"sync"
	"sync/atomic"

	"github.com/llbproject/llb/replica"
)

// drainRelay is actors.DrainCluster over the cluster member: the replica
// that owns an endpoint's drain identity (replica.DrainIdentity) drains
// TensorRT-LLM's destructive POST /kv_cache_events and relays every body to
// its peers, whose drain feeds follow. Before the member joined, every
// replica drains (the overlap shows as event_id gaps, never as a hole).
type drainRelay struct {
	member atomic.Pointer[replica.Member]

	mu      sync.Mutex
	follows map[string]map[chan []byte]struct{} // by service|addr
}

// followBuffer is how many relayed bodies a follower may lag behind; more
// are dropped (the follower sees the event_id gap).
const followBuffer = 256

func newDrainRelay() *drainRelay {
	return &drainRelay{follows: map[string]map[chan []byte]struct{}{}}
}

func drainKey(service, addr string) string { return service + "|" + addr }

// Leads implements actors.DrainCluster.
func (r *drainRelay) Leads(service, addr string) bool {
	m := r.member.Load()
	return m == nil || m.DrainsHere(service, addr)
}

// Relay implements actors.DrainCluster.
func (r *drainRelay) Relay(service, addr string, body []byte) {
	if m := r.member.Load(); m != nil {
		m.RelayKVDrain(replica.KVDrain{Service: service, Addr: addr, Body: body})
	}
}

// Follow implements actors.DrainCluster.
func (r *drainRelay) Follow(service, addr string) (<-chan []byte, func()) {
	ch := make(chan []byte, followBuffer)
	k := drainKey(service, addr)
	r.mu.Lock()
	if r.follows[k] == nil {
		r.follows[k] = map[chan []byte]struct{}{}
	}
	r.follows[k][ch] = struct{}{}
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		delete(r.follows[k], ch)
		if len(r.follows[k]) == 0 {
			delete(r.follows, k)
		}
		r.mu.Unlock()
	}
}

// received hands a peer's drained body to this replica's followers of the
// endpoint (replica.Config.OnKVDrain: it must not block).
func (r *drainRelay) received(_ string, d replica.KVDrain) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.follows[drainKey(d.Service, d.Addr)] {
		select {
		case ch <- d.Body:
		default: // the follower lags: it sees a gap
		}
	}
}

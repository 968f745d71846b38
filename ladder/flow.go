package ladder

// The admission queue's policy: when an endpoint frees a slot, which parked
// request takes it.
//
//	1. Class: the highest class with a parked request that may run on the
//	   endpoint leaves first, however long the lower ones have waited.
//	2. Fairness within a class (VTC, Sheng et al., "Fairness in Serving
//	   Large Language Models", OSDI 2024): each tenant of the class has a
//	   virtual token counter c_t, the service it has received counted in
//	   tokens (prompt tokens when admitted, completion tokens when it
//	   ends). The tenant with the smallest counter goes next.
//	3. Within a tenant, first parked first out.
//
// Ties: the smaller counter, then the earlier-parked head request. No map
// order and no clock decide anything.
//
// Counter lift (VTC's rule against banking credit): when tenant t gets its
// first parked request in a class, c_t = max(c_t, min c_u over the class's
// other backlogged tenants), or, when none is backlogged, max(c_t, the
// counter of the tenant that left the backlog last). A tenant that was
// away cannot return with a low counter and starve the others.
//
// Fairness bound. Let U be the most one request can add to a counter
// (prompt plus completion tokens) and K the most requests a tenant has in
// flight. While tenants f and g of one class both stay backlogged, their
// counters differ by at most 2·U after the first admissions, since the
// smaller one is always served next and one admission moves a counter by
// at most U (VTC Theorem 4.4). Completions are charged when they end, so
// the service a tenant actually received can run ahead of its counter by
// its in-flight completions: |W_f − W_g| ≤ 2·U + K·M over any interval,
// M the largest completion. The DES measures it (docs/tenants.md).

// MaxFlowTenants bounds the tenants the queue keeps counters for in one
// class. When a new tenant would exceed it, the counters of the tenants
// with nothing parked and nothing in flight are forgotten (such a tenant
// is lifted on return anyway, so only its banked excess is lost).
const MaxFlowTenants = 4096

// FlowEntry is one parked request as the policy sees it.
type FlowEntry struct {
	// ID identifies the request (the runtime's ticket id).
	ID uint64
	// Class and Tenant place it ("" is the anonymous tenant).
	Class  Class
	Tenant string
	// Allowed are the endpoints it may be resumed on.
	Allowed EndpointSet
	// Seq is the order it was parked in (set by Park).
	Seq uint64
}

// flowTenant is one tenant's state in one class.
type flowTenant struct {
	name string
	// counter is the VTC counter (tokens).
	counter uint64
	// items are the parked requests, oldest first.
	items []FlowEntry
	// inflight counts admitted requests not yet done.
	inflight int
	// backlogged marks membership of the class's backlog list.
	backlogged bool
}

// flowBand is one class.
type flowBand struct {
	tenants map[string]*flowTenant
	// backlog lists the tenants with parked requests, in the order they
	// became backlogged (iteration order only; choice is by counter).
	backlog []*flowTenant
	// lastLeft is the counter of the tenant that left the backlog last.
	lastLeft uint64
	// active counts the tenants with a request parked or in flight.
	active int
}

// live reports whether t has a request parked or in flight.
func (t *flowTenant) live() bool { return t.backlogged || t.inflight > 0 }

// track updates b.active after t changed from wasLive.
func (b *flowBand) track(t *flowTenant, wasLive bool) {
	switch now := t.live(); {
	case now && !wasLive:
		b.active++
	case !now && wasLive:
		b.active--
	}
}

// FlowQueue is the policy's state: parked requests by class and tenant,
// and the tenants' counters. It holds no request payloads, only ids.
//
// Ownership: not safe for concurrent use; the service's router actor owns
// it, as it owns the Router.
type FlowQueue struct {
	bands [NumClasses]flowBand
	where map[uint64]*flowTenant
	seq   uint64
	// counts are the parked requests by class (Class.Index).
	counts [NumClasses]uint32
}

// NewFlowQueue returns an empty queue.
func NewFlowQueue() *FlowQueue {
	q := &FlowQueue{where: make(map[uint64]*flowTenant)}
	for i := range q.bands {
		q.bands[i].tenants = make(map[string]*flowTenant)
	}
	return q
}

// Len is the number of parked requests.
func (q *FlowQueue) Len() int { return len(q.where) }

// ClassLen is the number of parked requests of class c.
func (q *FlowQueue) ClassLen(c Class) int { return int(q.counts[c.Index()]) }

// Counts are the parked requests by class (Class.Index), as
// Snapshot.ParkedByClass wants them.
func (q *FlowQueue) Counts() [NumClasses]uint32 { return q.counts }

func (q *FlowQueue) tenant(c Class, name string) *flowTenant {
	b := &q.bands[c.Index()]
	t := b.tenants[name]
	if t != nil {
		return t
	}
	if len(b.tenants) >= MaxFlowTenants {
		for n, x := range b.tenants {
			if !x.backlogged && x.inflight == 0 {
				delete(b.tenants, n)
			}
		}
	}
	t = &flowTenant{name: name}
	b.tenants[name] = t
	return t
}

// Park adds e (its Seq is assigned here) and returns it. Parking an id
// that is already parked replaces nothing and returns ok=false.
func (q *FlowQueue) Park(e FlowEntry) (FlowEntry, bool) {
	if _, dup := q.where[e.ID]; dup {
		return e, false
	}
	b := &q.bands[e.Class.Index()]
	t := q.tenant(e.Class, e.Tenant)
	defer b.track(t, t.live())
	if !t.backlogged {
		floor, any := uint64(0), false
		for _, o := range b.backlog {
			if !any || o.counter < floor {
				floor, any = o.counter, true
			}
		}
		if !any {
			floor = b.lastLeft
		}
		t.counter = max(t.counter, floor)
		t.backlogged = true
		b.backlog = append(b.backlog, t)
	}
	q.seq++
	e.Seq = q.seq
	t.items = append(t.items, e)
	q.where[e.ID] = t
	q.counts[e.Class.Index()]++
	return e, true
}

// Remove takes request id out of the queue (it timed out, was cancelled or
// goes back through the ladder); ok is false when it is not parked.
func (q *FlowQueue) Remove(id uint64) (FlowEntry, bool) {
	t := q.where[id]
	if t == nil {
		return FlowEntry{}, false
	}
	for i := range t.items {
		if t.items[i].ID == id {
			e := t.items[i]
			q.take(t, e.Class, i)
			return e, true
		}
	}
	return FlowEntry{}, false
}

// take removes t's item i.
func (q *FlowQueue) take(t *flowTenant, c Class, i int) {
	delete(q.where, t.items[i].ID)
	q.counts[c.Index()]--
	copy(t.items[i:], t.items[i+1:])
	t.items[len(t.items)-1] = FlowEntry{}
	t.items = t.items[:len(t.items)-1]
	if len(t.items) > 0 {
		return
	}
	b := &q.bands[c.Index()]
	t.backlogged = false
	b.track(t, true)
	b.lastLeft = t.counter
	for j, o := range b.backlog {
		if o == t {
			copy(b.backlog[j:], b.backlog[j+1:])
			b.backlog[len(b.backlog)-1] = nil
			b.backlog = b.backlog[:len(b.backlog)-1]
			break
		}
	}
	if t.inflight == 0 && len(b.tenants) > MaxFlowTenants/2 {
		delete(b.tenants, t.name)
	}
}

// Next removes and returns the parked request that takes a slot freed on
// endpoint ep: the policy at the top of this file. ok is false when no
// parked request may run on ep.
func (q *FlowQueue) Next(ep int) (FlowEntry, bool) {
	t, i := q.pick(ep)
	if t == nil {
		return FlowEntry{}, false
	}
	e := t.items[i]
	q.take(t, e.Class, i)
	return e, true
}

// Peek is Next without removing: the request that would take a slot on ep.
func (q *FlowQueue) Peek(ep int) (FlowEntry, bool) {
	if t, i := q.pick(ep); t != nil {
		return t.items[i], true
	}
	return FlowEntry{}, false
}

// pick finds Next's choice: the tenant and its item index, or nil.
func (q *FlowQueue) pick(ep int) (*flowTenant, int) {
	for ci := range q.bands {
		var best *flowTenant
		bestItem := -1
		for _, t := range q.bands[ci].backlog {
			i := firstAllowed(t.items, ep)
			if i < 0 {
				continue
			}
			if best == nil || t.counter < best.counter ||
				(t.counter == best.counter && t.items[i].Seq < best.items[bestItem].Seq) {
				best, bestItem = t, i
			}
		}
		if best != nil {
			return best, bestItem
		}
	}
	return nil, -1
}

func firstAllowed(items []FlowEntry, ep int) int {
	for i := range items {
		if items[i].Allowed.Has(ep) {
			return i
		}
	}
	return -1
}

// Victim picks the parked request a request of class c and tenant, whose
// admission will cost cost tokens, displaces when every queue is full: the
// youngest request of the lowest class below c that has one, of that
// class's tenant with the largest counter (ties: the later-parked
// request); with none below c, the youngest request of class c of the
// tenant with the largest counter, when the queue would serve the new
// request first (Outranks). It removes and returns it; ok is false when
// there is none.
func (q *FlowQueue) Victim(c Class, tenant string, cost uint64) (FlowEntry, bool) {
	for ci := NumClasses - 1; ci > c.Index(); ci-- {
		if worst := q.worst(ci); worst != nil {
			return q.takeYoungest(worst), true
		}
	}
	if worst := q.outranked(c, tenant, cost); worst != nil {
		return q.takeYoungest(worst), true
	}
	return FlowEntry{}, false
}

// Outranks reports whether a request of class c and tenant, whose
// admission will cost cost tokens, would displace a parked request of its
// own class (Victim): whether the queue would serve it before the
// youngest parked request of the class's tenant with the most service.
// Counting every parked request at cost, that request leaves once its
// tenant's counter has grown by cost for each request parked ahead of it;
// the new one once tenant's — as it would be were it to park now, after
// VTC's lift — has grown by cost for each of tenant's parked requests. So
// a tenant a request behind in service still outranks a flood with
// dozens parked, and of two tenants level in service the one with more
// parked gives way.
func (q *FlowQueue) Outranks(c Class, tenant string, cost uint64) bool {
	return q.counts[c.Index()] > 0 && q.outranked(c, tenant, cost) != nil
}

func (q *FlowQueue) outranked(c Class, tenant string, cost uint64) *flowTenant {
	b := &q.bands[c.Index()]
	worst := q.worst(c.Index())
	if worst == nil || worst.name == tenant {
		return nil
	}
	own, parked := uint64(0), 0
	t := b.tenants[tenant]
	if t != nil {
		own, parked = t.counter, len(t.items)
	}
	if t == nil || !t.backlogged {
		floor := worst.counter
		for _, o := range b.backlog {
			floor = min(floor, o.counter)
		}
		own = max(own, floor)
	}
	cost = max(cost, 1)
	victimAt := satAdd64(worst.counter, satMul64(uint64(len(worst.items)-1), cost))
	newAt := satAdd64(own, satMul64(uint64(parked), cost))
	if victimAt > newAt {
		return worst
	}
	return nil
}

// worst is class index ci's backlogged tenant with the largest counter
// (ties: the one whose youngest request parked later), or nil.
func (q *FlowQueue) worst(ci int) *flowTenant {
	var worst *flowTenant
	for _, t := range q.bands[ci].backlog {
		if worst == nil || t.counter > worst.counter ||
			(t.counter == worst.counter && t.items[len(t.items)-1].Seq > worst.items[len(worst.items)-1].Seq) {
			worst = t
		}
	}
	return worst
}

func (q *FlowQueue) takeYoungest(t *flowTenant) FlowEntry {
	i := len(t.items) - 1
	e := t.items[i]
	q.take(t, e.Class, i)
	return e
}

// Admitted charges a request of tenant in class c that got a slot (from
// the queue or at once) with its prompt tokens and counts it in flight.
func (q *FlowQueue) Admitted(c Class, tenant string, promptTokens uint64) {
	t := q.tenant(c, tenant)
	t.counter = satAdd64(t.counter, promptTokens)
	was := t.live()
	t.inflight++
	q.bands[c.Index()].track(t, was)
}

// Charge adds tokens to tenant's counter in class c, when the queue
// keeps one (the engine counted more prompt tokens than the estimate the
// request was admitted with).
func (q *FlowQueue) Charge(c Class, tenant string, tokens uint64) {
	if t := q.bands[c.Index()].tenants[tenant]; t != nil {
		t.counter = satAdd64(t.counter, tokens)
	}
}

// Done charges an admitted request that ended with its completion tokens
// and counts it out of flight.
func (q *FlowQueue) Done(c Class, tenant string, completionTokens uint64) {
	b := &q.bands[c.Index()]
	t := b.tenants[tenant]
	if t == nil {
		return
	}
	t.counter = satAdd64(t.counter, completionTokens)
	if t.inflight > 0 {
		was := t.live()
		t.inflight--
		b.track(t, was)
	}
	if t.inflight == 0 && !t.backlogged && len(b.tenants) > MaxFlowTenants/2 {
		delete(b.tenants, tenant)
	}
}

// Counter is tenant's virtual token counter in class c (0 when unknown).
func (q *FlowQueue) Counter(c Class, tenant string) uint64 {
	if t := q.bands[c.Index()].tenants[tenant]; t != nil {
		return t.counter
	}
	return 0
}

// Tenants is how many tenants class c keeps counters for.
func (q *FlowQueue) Tenants(c Class) int { return len(q.bands[c.Index()].tenants) }

func satAdd64(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}

func satMul64(a, b uint64) uint64 {
	if a != 0 && b > ^uint64(0)/a {
		return ^uint64(0)
	}
	return a * b
}

// TenantParked is how many requests tenant has parked in class c.
func (q *FlowQueue) TenantParked(c Class, tenant string) int {
	if t := q.bands[c.Index()].tenants[tenant]; t != nil {
		return len(t.items)
	}
	return 0
}

// UnderShare reports whether tenant holds fewer than its fair share of a
// class's slots: slots (the in-flight capacity the class may use) over the
// tenants of the class with a request parked or in flight (tenant
// counted). A tenant alone in its class has no share to be under. Such a
// tenant's requests may use the headroom above the cap (Router.CapFor),
// so a tenant that floods its class does not make the others wait for
// its requests to finish.
func (q *FlowQueue) UnderShare(c Class, tenant string, slots uint32) bool {
	b := &q.bands[c.Index()]
	t := b.tenants[tenant]
	active := b.active
	if t == nil || !t.live() {
		active++
	}
	if active < 2 {
		return false
	}
	in := 0
	if t != nil {
		in = t.inflight
	}
	return uint64(in)*uint64(active) < uint64(slots)
}

// Active is how many tenants of class c have a request parked or in
// flight.
func (q *FlowQueue) Active(c Class) int { return q.bands[c.Index()].active }

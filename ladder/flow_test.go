package ladder

import (
	"math/rand"
	"testing"
)

// TestFlow_BacklogedCountersStayWithinOneRequest drives two always
// backlogged tenants with random request sizes up to U: the counter of
// the one served next is the smaller, so after each admission the
// counters differ by at most U (VTC's bound on counters; the service
// bound adds the in-flight completions, measured by the DES).
func TestFlow_BacklogedCountersStayWithinOneRequest(t *testing.T) {
	const u = 4000
	rng := rand.New(rand.NewSource(7))
	q := NewFlowQueue()
	id := uint64(0)
	size := map[uint64]uint64{}
	park := func(tenant string) {
		id++
		size[id] = 1 + uint64(rng.Intn(u))
		if tenant == "heavy" {
			size[id] = u // the flooding tenant sends the largest requests
		}
		q.Park(FlowEntry{ID: id, Tenant: tenant, Allowed: ^EndpointSet(0)})
	}
	for i := 0; i < 4; i++ {
		park("heavy")
		park("light")
	}
	served := map[string]int{}
	for step := 0; step < 10000; step++ {
		e, ok := q.Next(0)
		if !ok {
			t.Fatal("queue ran dry")
		}
		q.Admitted(e.Class, e.Tenant, size[e.ID])
		q.Done(e.Class, e.Tenant, 0)
		served[e.Tenant]++
		park(e.Tenant)
		h, l := q.Counter(ClassStandard, "heavy"), q.Counter(ClassStandard, "light")
		if d := max(h, l) - min(h, l); d > u {
			t.Fatalf("step %d: counters heavy=%d light=%d differ by %d; want ≤ %d", step, h, l, d, u)
		}
	}
	if served["light"] <= served["heavy"] {
		t.Errorf("served light=%d heavy=%d; want the light tenant's short requests served more often", served["light"], served["heavy"])
	}
}

// TestFlow_ForgetsIdleTenantsPastTheBound checks that counters of
// tenants with nothing parked and nothing in flight do not accumulate
// past MaxFlowTenants.
func TestFlow_ForgetsIdleTenantsPastTheBound(t *testing.T) {
	q := NewFlowQueue()
	for i := 0; i < 3*MaxFlowTenants; i++ {
		name := string(rune('a'+i%26)) + string(rune(i))
		q.Admitted(ClassStandard, name, 10)
		q.Done(ClassStandard, name, 10)
	}
	if n := q.Tenants(ClassStandard); n > MaxFlowTenants {
		t.Fatalf("tenants=%d; want ≤ %d", n, MaxFlowTenants)
	}
}

func TestClass_ParseAndNames(t *testing.T) {
	for _, tc := range []struct {
		give string
		want Class
		ok   bool
	}{
		{"critical", ClassCritical, true},
		{" Sheddable ", ClassSheddable, true},
		{"standard", ClassStandard, true},
		{"5", ClassCritical, true},
		{"-3", ClassSheddable, true},
		{"0", ClassStandard, true},
		{"gold", ClassStandard, false},
		{"", ClassStandard, false},
	} {
		got, ok := ParseClass(tc.give)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseClass(%q) = %v, %v; want %v, %v", tc.give, got, ok, tc.want, tc.ok)
		}
	}
	for i := 0; i < NumClasses; i++ {
		if c := ClassAt(i); c.Index() != i {
			t.Errorf("ClassAt(%d).Index() = %d", i, c.Index())
		}
	}
	if p := ClassCritical.EnginePriority(); p != -1 {
		t.Errorf("critical engine priority = %d; want -1 (vLLM serves lower first)", p)
	}
	if !ClassSheddable.Sheddable() || ClassStandard.Sheddable() {
		t.Error("only the sheddable class is sheddable")
	}
}

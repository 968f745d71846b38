package tenant

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func mustCreate(t *testing.T, tb *Table, req NewKey) (*Table, *Key, string) {
	t.Helper()
	raw, id, err := NewRawKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	n, k, err := tb.Create(req, raw, id, t0)
	if err != nil {
		t.Fatalf("create %+v: %v", req, err)
	}
	return n, k, raw
}

func TestTable_CreateStoresOnlyTheHashAndFindsTheRawKey(t *testing.T) {
	tb, k, raw := mustCreate(t, EmptyTable(), NewKey{TenantID: "team-a", Name: "prod", AllowedModels: []string{"llama"}, RateLimitRPS: 5})
	if !strings.HasPrefix(raw, "lxb_") || len(raw) != 4+64 || len(k.ID) != 32 || !strings.HasPrefix(raw[4:], k.ID) {
		t.Fatalf("raw %q id %q; want lxb_ and 64 hex digits, the id the first 32", raw, k.ID)
	}
	if k.Hash != HashRaw(raw) || strings.Contains(k.Hash, raw[4:]) || !k.Enabled {
		t.Fatalf("stored %+v", k)
	}
	if got := tb.ByRaw(raw); got != k {
		t.Fatalf("ByRaw = %v; want the key", got)
	}
	if tb.ByRaw("lxb_00000000000000000000000000000000") != nil || tb.ByRaw(k.Hash) != nil {
		t.Fatal("an unknown key or the hash itself authenticated")
	}
	if EmptyTable().Len() != 0 || tb.Len() != 1 {
		t.Fatal("Create changed its receiver or lost the key")
	}
}

func TestTable_RejectsBadFieldsAllAtOnce(t *testing.T) {
	_, _, err := EmptyTable().Create(NewKey{TenantID: "", RateLimitRPS: -1, Class: "gold"}, "lxb_x", "id", t0)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err %v; want ErrInvalid", err)
	}
	for _, want := range []string{"tenant_id is required", "rate_limit_rps -1", `class "gold"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q lacks %q", err, want)
		}
	}
	if _, _, err := EmptyTable().SetLimit(Limit{TenantID: "two words"}, t0); !errors.Is(err, ErrInvalid) {
		t.Errorf("limit with a bad tenant: %v", err)
	}
}

func TestTable_PatchDeleteAndLimits(t *testing.T) {
	tb, k, raw := mustCreate(t, EmptyTable(), NewKey{TenantID: "a", AllowedModels: []string{"llama-3"}, Class: "2"})
	if k.Class != "critical" {
		t.Fatalf("class %q; want the integer priority stored as its class name", k.Class)
	}
	models := []string{"mistral-7b"}
	off := false
	tb2, k2, err := tb.Patch(k.ID, Patch{AllowedModels: &models, Enabled: &off})
	if err != nil {
		t.Fatal(err)
	}
	if k2.Allows("llama-3") || !k2.Allows("mistral-7b") || k2.Live(t0) || tb2.ByRaw(raw) != k2 {
		t.Fatalf("patched %+v", k2)
	}
	if k.AllowedModels[0] != "llama-3" || !k.Enabled {
		t.Fatal("Patch changed the old record in place")
	}
	if _, _, err := tb.Patch("nope", Patch{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("patch unknown: %v", err)
	}
	tb3, err := tb2.Delete(k.ID)
	if err != nil || tb3.Key(k.ID) != nil || tb3.ByRaw(raw) != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := tb3.Delete(k.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	tb4, l, err := tb3.SetLimit(Limit{TenantID: "a", RPS: 50, TokensPerMin: 2000}, t0)
	if err != nil || tb4.Limit("a") != l || l.UpdatedAt != t0 {
		t.Fatalf("limit: %v %+v", err, l)
	}
	_, _, _ = mustCreate(t, tb4, NewKey{TenantID: "b"})
	if got := len(tb4.Keys("a")); got != 0 {
		t.Fatalf("keys of a: %d", got)
	}
}

func TestTable_NewTableRejectsWhatAWriteWould(t *testing.T) {
	good := Key{ID: "k1", Hash: "h1", TenantID: "a", Enabled: true}
	tb, rej := NewTable([]Key{good, {ID: "k2", Hash: "h1", TenantID: "a"}, {ID: "k3", Hash: "h3", TenantID: ""}},
		[]Limit{{TenantID: "a", RPS: 1}, {TenantID: "a", RPS: 2}})
	if tb.Len() != 1 || len(rej.Errs) != 3 || len(rej.Keys) != 2 || len(rej.Limits) != 1 || tb.Limit("a").RPS != 1 {
		t.Fatalf("len %d rejected %v", tb.Len(), rej)
	}
}

// gateWith is a gate over a table holding one key with req's limits.
func gateWith(t *testing.T, req NewKey, lim *Limit) (*Gate, *Key, string) {
	t.Helper()
	tb, k, raw := mustCreate(t, EmptyTable(), req)
	if lim != nil {
		var err error
		if tb, _, err = tb.SetLimit(*lim, t0); err != nil {
			t.Fatal(err)
		}
	}
	g := NewGate()
	g.SetTable(tb)
	return g, k, raw
}

func TestGate_KeyRateAndBurst(t *testing.T) {
	// LoxiLB's DP-T5: rps=1, burst=1, six requests at once: one passes.
	g, k, raw := gateWith(t, NewKey{TenantID: "a", RateLimitRPS: 1, BurstSize: 1}, nil)
	if g.Lookup(raw, t0) != k || !g.Enforced() {
		t.Fatal("lookup")
	}
	ok := 0
	for i := 0; i < 6; i++ {
		r := g.Admit(k, t0)
		if r.Code == "" {
			ok++
		} else if r.Code != CodeKeyRate || r.RetryAfter <= 0 || r.RetryAfter > time.Second {
			t.Fatalf("refusal %+v", r)
		}
	}
	if ok != 1 {
		t.Fatalf("%d admitted at once; want 1", ok)
	}
	if r := g.Admit(k, t0.Add(time.Second)); r.Code != "" {
		t.Fatalf("a second later: %+v", r)
	}
	// Burst 10 at 5 rps: 10 at once, then 5 a second.
	g, k, _ = gateWith(t, NewKey{TenantID: "a", RateLimitRPS: 5, BurstSize: 10}, nil)
	n := 0
	for ms := 0; ms <= 2000; ms += 10 {
		if g.Admit(k, t0.Add(time.Duration(ms)*time.Millisecond)).Code == "" {
			n++
		}
	}
	if n != 20 {
		t.Fatalf("admitted %d in 2 s at 5 rps, burst 10; want 20", n)
	}
}

func TestGate_TenantRateAcrossKeysAndRefund(t *testing.T) {
	tb, k1, _ := mustCreate(t, EmptyTable(), NewKey{TenantID: "a", RateLimitRPS: 100})
	tb, k2, _ := mustCreate(t, tb, NewKey{TenantID: "a"})
	tb, _, _ = tb.SetLimit(Limit{TenantID: "a", RPS: 2}, t0)
	g := NewGate()
	g.SetTable(tb)
	got := []string{g.Admit(k1, t0).Code, g.Admit(k2, t0).Code, g.Admit(k1, t0).Code}
	if got[0] != "" || got[1] != "" || got[2] != CodeTenantRate {
		t.Fatalf("codes %q; want two admitted, then tenant_quota_exceeded", got)
	}
	// The refused request took nothing from the key's bucket.
	if own := g.bucket("rk/" + k1.ID).own; own != 1 {
		t.Fatalf("key bucket consumed %d; want 1", own)
	}
	// rps 0 lifts the limit (LoxiLB's reset in DP-T6).
	tb, _, _ = tb.SetLimit(Limit{TenantID: "a", RPS: 0}, t0)
	g.SetTable(tb)
	if r := g.Admit(k1, t0); r.Code != "" {
		t.Fatalf("after rps 0: %+v", r)
	}
}

func TestGate_TokensPerMinuteChargedAfterTheFact(t *testing.T) {
	g, k, _ := gateWith(t, NewKey{TenantID: "a", TokensPerMin: 600}, &Limit{TenantID: "a", TokensPerMin: 100000})
	if r := g.Admit(k, t0); r.Code != "" {
		t.Fatal(r)
	}
	g.Charge(k, 900, t0) // one long answer puts the key 300 tokens in debt
	r := g.Admit(k, t0)
	if r.Code != CodeTokens || r.RetryAfter < 29*time.Second || r.RetryAfter > 31*time.Second {
		t.Fatalf("refusal %+v; want token_quota_exceeded, retry in 30 s (300 tokens at 10/s)", r)
	}
	if r := g.Admit(k, t0.Add(31*time.Second)); r.Code != "" {
		t.Fatalf("after the debt is repaid: %+v", r)
	}
}

func TestGate_DisabledExpiredAndDeletedKeysDoNotAuthenticate(t *testing.T) {
	exp := t0.Add(time.Hour)
	off := false
	tb, k, raw := mustCreate(t, EmptyTable(), NewKey{TenantID: "a", ExpiresAt: &exp, RateLimitRPS: 5})
	tb, _, raw2 := mustCreate(t, tb, NewKey{TenantID: "a", Enabled: &off})
	g := NewGate()
	g.SetTable(tb)
	if g.Lookup(raw, t0) != k || g.Lookup(raw, exp) != nil || g.Lookup(raw2, t0) != nil {
		t.Fatal("expiry or enabled not honoured")
	}
	g.Admit(k, t0)
	tb, _ = tb.Delete(k.ID)
	g.SetTable(tb)
	if g.Lookup(raw, t0) != nil {
		t.Fatal("deleted key authenticates")
	}
	if _, ok := g.buckets.Load("rk/" + k.ID); ok {
		t.Fatal("deleted key's bucket kept")
	}
}

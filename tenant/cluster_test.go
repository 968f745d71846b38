package tenant

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// clusterRun simulates n replicas sharing one key's limits in virtual
// time: each receives demand requests per second (Poisson), gossips its
// usage every interval, and a report reaches the peers delay later. It
// returns how many requests all replicas admitted in [from, T) and the
// tokens charged for them.
func clusterRun(t *testing.T, n int, req NewKey, demand float64, interval, delay, from, T time.Duration, tokensPerReq uint64) (admitted int, tokens uint64) {
	t.Helper()
	tb, k, _ := mustCreate(t, EmptyTable(), req)
	gates := make([]*Gate, n)
	for i := range gates {
		gates[i] = NewGate()
		gates[i].SetTable(tb)
		gates[i].SetReplicas(n)
	}
	type report struct {
		at   time.Duration
		from int
		us   []Usage
	}
	var inbox []report
	rng := rand.New(rand.NewSource(int64(n)))
	next := make([]time.Duration, n)
	for i := range next {
		next[i] = time.Duration(rng.ExpFloat64() / demand * float64(time.Second))
	}
	nextGossip := interval
	for now := time.Duration(0); now < T; {
		// The earliest event: an arrival, a gossip round, a delivery.
		at, who := nextGossip, -1
		for i, a := range next {
			if a < at {
				at, who = a, i
			}
		}
		for _, r := range inbox {
			if r.at < at {
				at, who = r.at, -2
			}
		}
		now = at
		if now >= T {
			break
		}
		wall := t0.Add(now)
		switch who {
		case -1:
			for i, g := range gates {
				inbox = append(inbox, report{at: now + delay, from: i, us: g.Usage()})
			}
			nextGossip += interval
		case -2:
			keep := inbox[:0]
			for _, r := range inbox {
				if r.at == now {
					for j, g := range gates {
						if j != r.from {
							g.ApplyPeers(fmt.Sprint(r.from), r.us, wall)
						}
					}
				} else {
					keep = append(keep, r)
				}
			}
			inbox = keep
		default:
			g := gates[who]
			if g.Admit(k, wall).Code == "" {
				g.Charge(k, tokensPerReq, wall)
				if now >= from {
					admitted++
					tokens += tokensPerReq
				}
			}
			next[who] += time.Duration(rng.ExpFloat64() / demand * float64(time.Second))
		}
	}
	return admitted, tokens
}

// TestGate_ThreeReplicasHoldTheRateWithinTheBound floods three replicas
// with 3× a key's rate. From the start, the requests they admit together
// stay within the Gate's bound rate·T + size + (n−1)·rate·d + n, and at
// least rate·T + size/n (the burst is split); after the first 10 s the
// admitted rate is within 10 % (in fact ~1 %) of the limit.
func TestGate_ThreeReplicasHoldTheRateWithinTheBound(t *testing.T) {
	const rate, burst, n = 100, 100, 3
	for _, delay := range []time.Duration{0, 100 * time.Millisecond, 250 * time.Millisecond} {
		T := 30 * time.Second
		req := NewKey{TenantID: "a", RateLimitRPS: rate, BurstSize: burst}
		got, _ := clusterRun(t, n, req, rate, 100*time.Millisecond, delay, 0, T, 0)
		d := (delay + 100*time.Millisecond).Seconds() // report age: gossip interval + delivery
		upper := rate*T.Seconds() + burst + (n-1)*rate*d + n
		lower := rate*T.Seconds() + burst/n - 1
		if float64(got) > upper || float64(got) < lower {
			t.Errorf("delay %v: admitted %d in [0, %v); want %.0f to %.0f", delay, got, T, lower, upper)
		}
		steady, _ := clusterRun(t, n, req, rate, 100*time.Millisecond, delay, 10*time.Second, T, 0)
		want := rate * (T - 10*time.Second).Seconds()
		errPct := 100 * (float64(steady) - want) / want
		t.Logf("delay %v: admitted %d from the start (bound %.0f to %.0f); %d in [10 s, 30 s), %+.1f %% off %0.f", delay, got, lower, upper, steady, errPct, want)
		if errPct > 10 || errPct < -10 {
			t.Errorf("delay %v: steady rate %.1f %% off the limit", delay, errPct)
		}
	}
}

// TestGate_ThreeReplicasHoldTokensPerMinute does the same for a token
// limit charged after each request: minute after minute, past the first.
func TestGate_ThreeReplicasHoldTokensPerMinute(t *testing.T) {
	const tpm = 60000 // 1000 tokens a second
	T := 4 * time.Minute
	_, tokens := clusterRun(t, 3, NewKey{TenantID: "a", TokensPerMin: tpm}, 20, 100*time.Millisecond, 100*time.Millisecond, time.Minute, T, 100)
	want := float64(tpm) * 3
	errPct := 100 * (float64(tokens) - want) / want
	t.Logf("tokens %d in minutes 1-4, want %.0f (%+.1f %%)", tokens, want, errPct)
	if errPct > 10 || errPct < -10 {
		t.Errorf("tokens %d are %.1f %% off %v", tokens, errPct, want)
	}
}

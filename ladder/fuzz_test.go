package ladder

import (
	"testing"
	"time"
)

// byteSource turns fuzz input into bounded choices; it yields zeros once
// the input is exhausted, so every input decodes to something.
type byteSource struct {
	b []byte
}

func (s *byteSource) next() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

func (s *byteSource) intn(n int) int { return int(s.next()) % n }

// FuzzDecide decodes arbitrary bytes into a rule, live views and requests and
// checks that Decide never panics, never picks an excluded endpoint, never
// puts a non-prefill endpoint on the prefill leg of a P/D tier, and never
// returns a decode endpoint that is not one.
func FuzzDecide(f *testing.F) {
	f.Add([]byte{1, 5, 1, 2, 0, 1, 3, 0, 9, 9, 9, 9})
	f.Add([]byte{0, 8, 8, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, twice over"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &byteSource{b: data}
		pd := s.next()%2 == 1
		n := 1 + s.intn(MaxEndpoints)
		eps := make([]EndpointSpec, n)
		var svc ServiceSpec
		svc.PDDisagg = pd
		for i := range eps {
			eps[i].Weight = s.next()
			eps[i].Addr = string(rune('a' + i))
			if pd {
				eps[i].Role = Role(s.intn(3))
			} else {
				eps[i].Backup = s.intn(5) == 0
			}
		}
		if pd {
			if n < 2 {
				eps = append(eps, EndpointSpec{})
				n = 2
			}
			eps[0].Role, eps[1].Role = RolePrefill, RoleDecode
			svc.CacheAware = s.next()%2 == 0
			svc.KVExactMode = KVExactMode(s.intn(2))
			svc.Selector = []SelectorKind{SelRR, SelGPUAware}[s.intn(2)]
			svc.Admission.MaxInflightPerEP = s.intn(4)
			svc.Admission.QueueDepthPerEP = s.intn(3)
		} else {
			svc.KVExactMode = []KVExactMode{KVOff, KVSinglePool}[s.intn(2)]
			svc.Selector = []SelectorKind{0, 1, 2, 3, 4, 8, 9, 10}[s.intn(8)]
		}
		svc.BalanceAbsThreshold = s.intn(8)
		svc.KVBlockSize = 1 + s.intn(32)
		env := DefaultEnv()
		env.LBMode = LBMode(s.intn(int(LBAuto) + 1))
		env.SpillRelief = Tristate(s.intn(3))
		env.ColdStartSeedN = uint32(s.intn(4))
		r, err := NewRouter(svc, eps, env, RouterConfig{Trie: TrieConfig{MaxEntries: 8, MaxBytes: 256}})
		if err != nil {
			t.Fatalf("decoded rule invalid: %v", err)
		}
		views := make([]EndpointView, n)
		now := time.Unix(0, 0)
		for round := 0; round < 3; round++ {
			for i := range views {
				v := &views[i]
				flags := s.next()
				v.Down, v.BreakerOpen, v.Draining = flags&1 != 0, flags&2 != 0, flags&4 != 0
				v.Ctrl = CtrlState(flags >> 3 & 3)
				v.CtrlWeight = s.next()
				v.ActiveConns = uint32(s.next())
				v.QueuedRequests = uint32(s.next() % 8)
				v.KVCapacityBlocks = uint32(s.next()) << uint(s.intn(24))
				v.InventoryBlocks = uint32(s.next())
				v.Overlap = uint32(s.next())
				v.Parked = uint32(s.intn(4))
			}
			prompt := make([]byte, s.intn(64))
			for i := range prompt {
				prompt[i] = 'a' + byte(s.intn(3))
			}
			req := Request{
				Prompt:        prompt,
				HasPrefixHash: s.next()%2 == 0,
				PrefixHash:    uint64(s.next()) << 56,
				ClientHash:    uint64(s.next()),
				ClientKey:     string(rune('A' + s.intn(3))),
				KV:            KVInput{PromptBlocks: uint32(s.next()), PromptTokens: uint32(s.next()), Guard: Reason(s.next() % 40)},
			}
			if s.next()%2 == 0 {
				req.SessionKey = "k"
				req.Session = SessionLookup{Found: true, Pin: Pin{Prefill: s.intn(n+2) - 1, Decode: s.intn(n+2) - 1}}
			}
			if s.next()%2 == 0 {
				r.Learn(prompt, s.intn(n))
			}
			d, err := r.Decide(now, &req, &Snapshot{Endpoints: views, TotalInflight: uint64(s.next())})
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			checkFuzzDecision(t, r, views, &d)
			if d.Admission == Park {
				rd, err := r.Resume(now, &req, &Snapshot{Endpoints: views}, d.ParkOn)
				if err != nil {
					t.Fatalf("Resume: %v", err)
				}
				checkFuzzDecision(t, r, views, &rd)
			}
			_ = d.String()
		}
	})
}

func checkFuzzDecision(t *testing.T, r *Router, views []EndpointView, d *Decision) {
	t.Helper()
	excl, _ := foldMasks(views)
	if d.Prefill >= 0 && excl.Has(d.Prefill) || d.Decode >= 0 && excl.Has(d.Decode) {
		t.Fatalf("picked an excluded endpoint: %s", d)
	}
	if d.Decode >= 0 && r.eps[d.Decode].Role != RoleDecode {
		t.Fatalf("decode %d is not a decode endpoint: %s", d.Decode, d)
	}
	if r.svc.PDDisagg && d.Prefill >= 0 {
		want := RolePrefill
		if d.Tier == TierRescue {
			want = RoleNone
		}
		if r.eps[d.Prefill].Role != want {
			t.Fatalf("prefill %d has role %s at tier %s", d.Prefill, r.eps[d.Prefill].Role, d.Tier)
		}
	}
}

// FuzzTrie applies a decoded sequence of inserts, matches and endpoint
// removals to a small, tightly capped trie and checks its invariants and
// caps after every step.
func FuzzTrie(f *testing.F) {
	f.Add([]byte{0, 5, 1, 1, 2, 3, 1, 4, 2, 1})
	f.Add([]byte("insert match remove insert insert match"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &byteSource{b: data}
		tr := NewTrie(TrieConfig{MaxEntries: 6, MaxBytes: 64})
		for len(s.b) > 0 {
			op := s.intn(3)
			p := make([]byte, s.intn(24))
			for i := range p {
				p[i] = 'a' + byte(s.intn(3))
			}
			switch op {
			case 0:
				tr.Insert(p, s.intn(4))
			case 1:
				if _, m, ok := tr.Match(p); ok && (m == 0 || m > len(p)) {
					t.Fatalf("Match(%q) matched %d", p, m)
				}
			case 2:
				tr.RemoveEndpoint(s.intn(4))
			}
			if tr.Len() > 6 || tr.Bytes() > 64 {
				t.Fatalf("caps exceeded: %d entries, %d bytes", tr.Len(), tr.Bytes())
			}
			checkTrieInvariants(t, tr)
		}
	})
}

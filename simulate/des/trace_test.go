package des

import (
	"errors"
	"reflect"
	"testing"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/workload"
)

func TestNewTrace_LLBKeysMatchTheEngineDigests(t *testing.T) {
	for _, algo := range []engine.HashAlgo{engine.HashSHA256CBOR, engine.HashXXHashCBOR} {
		t.Run(string(algo), func(t *testing.T) {
			tr, err := NewTrace(TraceConfig{Name: "x", Spec: workload.SharedPrefix{Groups: 2, PromptsPerGroup: 2, SystemTokens: 40, QuestionTokens: 9, OutputTokens: 3},
				Requests: 20, Seed: 1, Hash: engine.HashConfig{Algo: algo, Seed: "0"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tr.Requests {
				if len(r.Chain) != len(r.Tokens)/16 || len(r.Digests) != len(r.Chain) {
					t.Fatalf("request %d: %d tokens, %d keys, %d digests", r.Seq, len(r.Tokens), len(r.Chain), len(r.Digests))
				}
				for i := range r.Chain {
					if r.Chain[i] != r.Digests[i].Key() {
						t.Fatalf("request %d block %d: llb key %d, engine key %d", r.Seq, i, r.Chain[i], r.Digests[i].Key())
					}
				}
			}
		})
	}
}

func TestNewTrace_ArrivalsAndContentAreSeparateStreams(t *testing.T) {
	spec := workload.SharedPrefix{Groups: 3, PromptsPerGroup: 2, SystemTokens: 32, QuestionTokens: 8, OutputTokens: 2}
	poisson, err := NewTrace(TraceConfig{Name: "p", Spec: spec, Requests: 50, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	constant, err := NewTrace(TraceConfig{Name: "c", Spec: spec, Requests: 50, Seed: 5, Arrivals: ArriveConstant})
	if err != nil {
		t.Fatal(err)
	}
	for i := range poisson.Requests {
		p, c := poisson.Requests[i], constant.Requests[i]
		if !reflect.DeepEqual(p.Tokens, c.Tokens) || p.Group != c.Group {
			t.Fatalf("request %d: the arrival process changed the content", i)
		}
		if c.UnitAt != float64(i) {
			t.Fatalf("constant request %d at %v; want %d", i, c.UnitAt, i)
		}
		if i > 0 && p.UnitAt < poisson.Requests[i-1].UnitAt {
			t.Fatalf("poisson arrivals go backwards at %d", i)
		}
	}
	if poisson.UnitDuration() <= 0 || constant.UnitDuration() != 49 {
		t.Fatalf("unit durations %v and %v", poisson.UnitDuration(), constant.UnitDuration())
	}
}

func TestNewTrace_CountsTheWorkingSetAndTheOracle(t *testing.T) {
	// One group, one question: every request is the same 3-block prompt
	// (BOS + 32 + 2 + 15 tokens = 50 → 3 full blocks).
	tr, err := NewTrace(TraceConfig{Name: "one", Spec: workload.SharedPrefix{Groups: 1, PromptsPerGroup: 1, SystemTokens: 32, QuestionTokens: 15, OutputTokens: 2},
		Requests: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if tr.DistinctBlocks != 3 {
		t.Fatalf("working set %d blocks; want 3", tr.DistinctBlocks)
	}
	// The first request reuses nothing; the others all 3 blocks (48 of 50
	// tokens, the last token is always recomputed).
	if got, want := tr.OracleHitRate(0), 3*48.0/(4*50); got != want {
		t.Fatalf("oracle over all %v; want %v", got, want)
	}
	if got := tr.OracleHitRate(1); got != 48.0/50 {
		t.Fatalf("oracle after warm-up %v; want %v", got, 48.0/50)
	}
}

func TestNewTrace_RejectsBadConfigs(t *testing.T) {
	spec := workload.HotPrefix{}
	for _, tc := range []struct {
		name string
		give TraceConfig
	}{
		{"no spec", TraceConfig{Requests: 1}},
		{"no requests", TraceConfig{Spec: spec}},
		{"unknown arrivals", TraceConfig{Spec: spec, Requests: 1, Arrivals: 9}},
		{"fnv hash", TraceConfig{Spec: spec, Requests: 1, Hash: engine.HashConfig{Algo: engine.HashFNV}}},
		{"bad workload", TraceConfig{Spec: workload.HotPrefix{Clients: -1}, Requests: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewTrace(tc.give); err == nil {
				t.Fatal("accepted")
			} else if tc.name != "bad workload" && !errors.Is(err, ErrConfig) {
				t.Fatalf("got %v; want ErrConfig", err)
			}
		})
	}
}

func TestDeriveKeys_AsTheGatewayDerivesThem(t *testing.T) {
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'a' + byte(i%26)
	}
	hash := func(model string, prefix []byte) uint64 {
		return ladder.PrefixHash(&ladder.PrefixKey{Model: model, Prefix: prefix})
	}
	chatText := []byte("system\x1fbe brief\x1euser\x1fhi\x1eassistant\x1fhello\x1euser\x1fmore\x1e")
	for _, tc := range []struct {
		name        string
		body        string
		header      map[string]string
		wantPrompt  []byte
		wantHash    uint64
		wantSession string
		wantConv    bool
	}{
		{
			name:       "completion prompt, hash over its first 256 bytes",
			body:       `{"model":"m","prompt":"` + string(long) + `"}`,
			wantPrompt: long, wantHash: hash("m", long[:256]),
		},
		{
			name:        "user_id is the session key",
			body:        `{"model":"m","prompt":"abc","user_id":"u1","user":"x"}`,
			wantPrompt:  []byte("abc"),
			wantHash:    hash("m", []byte("abc")),
			wantSession: "u1",
		},
		{
			name:        "OpenAI user without user_id",
			body:        `{"model":"m","prompt":"abc","user":"x"}`,
			wantPrompt:  []byte("abc"),
			wantHash:    hash("m", []byte("abc")),
			wantSession: "x",
		},
		{
			name:        "X-Conversation-Id overrides and is hashed",
			body:        `{"model":"m","prompt":"abc","user_id":"u1"}`,
			header:      map[string]string{"X-Conversation-Id": "c9"},
			wantPrompt:  []byte("abc"),
			wantHash:    hash("m", []byte("abc")),
			wantSession: "c9", wantConv: true,
		},
		{
			name: "chat renders every message; the hash stops after the first user message",
			body: `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},` +
				`{"role":"assistant","content":"hello"},{"role":"user","content":"more"}]}`,
			wantPrompt: chatText,
			wantHash:   hash("m", []byte("system\x1fbe brief\x1euser\x1fhi\x1e")),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := deriveKeys([]byte(tc.body), tc.header)
			if err != nil {
				t.Fatal(err)
			}
			if string(k.prompt) != string(tc.wantPrompt) || k.prefixHash != tc.wantHash || k.sessionKey != tc.wantSession || k.hasConvHash != tc.wantConv {
				t.Fatalf("got prompt %q hash %x session %q conv %v; want %q %x %q %v",
					k.prompt, k.prefixHash, k.sessionKey, k.hasConvHash, tc.wantPrompt, tc.wantHash, tc.wantSession, tc.wantConv)
			}
			if tc.wantConv && k.convHash != ladder.XXH64String(tc.header["X-Conversation-Id"], 0) {
				t.Fatal("conversation hash is not XXH64 of the header")
			}
		})
	}
	if _, err := deriveKeys([]byte("{"), nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("a broken body gave %v; want ErrConfig", err)
	}
}

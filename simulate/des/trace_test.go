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
			if len(tr.Keys) != len(tr.Requests) {
				t.Fatalf("%d keys for %d requests", len(tr.Keys), len(tr.Requests))
			}
			for j, r := range tr.Requests {
				k := tr.Keys[j]
				if len(k.Chain) != len(r.Tokens)/16 || len(k.Digests) != len(k.Chain) {
					t.Fatalf("request %d: %d tokens, %d keys, %d digests", r.Seq, len(r.Tokens), len(k.Chain), len(k.Digests))
				}
				for i := range k.Chain {
					if k.Chain[i] != k.Digests[i].Key() {
						t.Fatalf("request %d block %d: llb key %d, engine key %d", r.Seq, i, k.Chain[i], k.Digests[i].Key())
					}
				}
			}
		})
	}
}

func TestNewTrace_IsTheWorkloadTraceOfItsSeedWithDefaults(t *testing.T) {
	spec := workload.SharedPrefix{Groups: 6, PromptsPerGroup: 4, SystemTokens: 200, QuestionTokens: 24, OutputTokens: 8, ZipfAlpha: 1.1}
	tr, err := NewTrace(TraceConfig{Name: "sp", Spec: spec, Requests: 60, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	want, err := workload.NewTrace(workload.TraceConfig{Spec: spec, Requests: 60, Seed: 3, BlockSize: 16, KeepTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tr.Trace, *want) {
		t.Fatal("the simulator's trace is not workload.NewTrace's for its seed (block size 16, Poisson arrivals)")
	}
	if tr.Config.BlockSize != 16 || tr.Config.Hash.Algo != engine.HashSHA256CBOR || tr.Config.Hash.Seed != "0" {
		t.Fatalf("defaults %+v", tr.Config)
	}
	// The working set counts exactly the distinct keys of llb's chains.
	seen := map[uint64]bool{}
	for _, k := range tr.Keys {
		for _, key := range k.Chain {
			seen[key] = true
		}
	}
	if tr.DistinctBlocks != len(seen) {
		t.Fatalf("working set %d blocks; llb's chains hold %d distinct keys", tr.DistinctBlocks, len(seen))
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
			if _, err := NewTrace(tc.give); !errors.Is(err, ErrConfig) {
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
			if string(k.Prompt) != string(tc.wantPrompt) || k.PrefixHash != tc.wantHash || k.SessionKey != tc.wantSession || k.HasConvHash != tc.wantConv {
				t.Fatalf("got prompt %q hash %x session %q conv %v; want %q %x %q %v",
					k.Prompt, k.PrefixHash, k.SessionKey, k.HasConvHash, tc.wantPrompt, tc.wantHash, tc.wantSession, tc.wantConv)
			}
			if tc.wantConv && k.ConvHash != ladder.XXH64String(tc.header["X-Conversation-Id"], 0) {
				t.Fatal("conversation hash is not XXH64 of the header")
			}
		})
	}
	if _, err := deriveKeys([]byte("{"), nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("a broken body gave %v; want ErrConfig", err)
	}
}

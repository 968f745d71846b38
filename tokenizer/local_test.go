package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// fakeRemote stands in for the engine's /tokenize.
type fakeRemote struct {
	mu    sync.Mutex
	calls []Request
	ids   func(Request) []uint32
	err   error
}

func (f *fakeRemote) Tokenize(_ context.Context, req Request, dst []uint32) ([]uint32, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	f.mu.Unlock()
	if f.err != nil {
		return dst, f.err
	}
	return append(dst, f.ids(req)...), nil
}

func (f *fakeRemote) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// testClock is a settable clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var miniDir = filepath.Join("testdata", "golden", "qwen3-mini")

func newTestLocal(t *testing.T, dir string, remote *fakeRemote) (*Local, *testClock, *metrics.Set) {
	t.Helper()
	set := metrics.NewSet()
	clock := &testClock{now: time.Unix(1000, 0)}
	reg := NewRegistry()
	if _, err := reg.Wait(miniDir); err != nil {
		t.Fatal(err)
	}
	l, err := NewLocal(LocalConfig{
		Dir: dir, Remote: remote, Registry: reg, Now: clock.Now,
		Counters: Counters{
			Local: set.NewCounter("local"), Remote: set.NewCounter("remote"),
			Checks: set.NewCounter("checks"), Mismatches: set.NewCounter("mismatches"), CheckErrors: set.NewCounter("check_errors"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, clock, set
}

func counter(set *metrics.Set, name string) uint64 { return set.GetOrCreateCounter(name).Get() }

func miniIDs(t *testing.T, text string, add bool) []uint32 {
	t.Helper()
	tok, err := NewRegistry().Wait(miniDir)
	if err != nil {
		t.Fatal(err)
	}
	return tok.Encode(text, add, nil)
}

func TestLocal_EncodesPromptsLocallyAndChecksTheFirst(t *testing.T) {
	text := "Hello world, it's 2026!"
	want := miniIDs(t, text, true)
	remote := &fakeRemote{ids: func(Request) []uint32 { return want }}
	l, clock, set := newTestLocal(t, miniDir, remote)
	for i := range 3 {
		got, err := l.Tokenize(context.Background(), Request{Model: "m", Prompt: text}, nil)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("request %d: got %v, %v; want %v", i, got, err, want)
		}
		l.Wait()
	}
	if got := remote.count(); got != 1 {
		t.Errorf("engine calls = %d; want 1 (the first request's check)", got)
	}
	clock.advance(DefaultCheckInterval)
	if _, err := l.Tokenize(context.Background(), Request{Model: "m", Prompt: text}, nil); err != nil {
		t.Fatal(err)
	}
	l.Wait()
	if got := remote.count(); got != 2 {
		t.Errorf("engine calls after the interval = %d; want 2", got)
	}
	if got := counter(set, "local"); got != 4 {
		t.Errorf("local = %d; want 4", got)
	}
	if got, want := counter(set, "checks"), uint64(2); got != want || counter(set, "mismatches") != 0 {
		t.Errorf("checks = %d, mismatches = %d; want %d, 0", got, counter(set, "mismatches"), want)
	}
}

func TestLocal_MismatchFallsBackToTheEngine(t *testing.T) {
	remote := &fakeRemote{ids: func(Request) []uint32 { return []uint32{1, 2, 3} }}
	l, _, set := newTestLocal(t, miniDir, remote)
	req := Request{Model: "m", Prompt: "some prompt"}
	if got, _ := l.Tokenize(context.Background(), req, nil); slices.Equal(got, []uint32{1, 2, 3}) {
		t.Fatalf("first request already served by the engine")
	}
	l.Wait()
	if !l.Disagreed("m") || counter(set, "mismatches") != 1 {
		t.Fatalf("Disagreed = %v, mismatches = %d; want true, 1", l.Disagreed("m"), counter(set, "mismatches"))
	}
	got, err := l.Tokenize(context.Background(), req, nil)
	if err != nil || !slices.Equal(got, []uint32{1, 2, 3}) {
		t.Errorf("after the mismatch: got %v, %v; want the engine's [1 2 3]", got, err)
	}
	if got := counter(set, "remote"); got != 1 {
		t.Errorf("remote = %d; want 1", got)
	}
}

func TestLocal_CheckErrorKeepsLocal(t *testing.T) {
	remote := &fakeRemote{err: errors.New("engine down")}
	l, _, set := newTestLocal(t, miniDir, remote)
	if _, err := l.Tokenize(context.Background(), Request{Model: "m", Prompt: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	l.Wait()
	if l.Disagreed("m") || counter(set, "check_errors") != 1 {
		t.Errorf("Disagreed = %v, check_errors = %d; want false, 1", l.Disagreed("m"), counter(set, "check_errors"))
	}
}

func TestLocal_RoutesByModelDirectory(t *testing.T) {
	tests := []struct {
		model  string
		remote bool
	}{
		{"qwen3-mini", false},
		{"no-such-model", true},
		{"../golden/qwen3-mini", true},
		{"/abs", true},
		{"", true},
	}
	for _, tt := range tests {
		remote := &fakeRemote{ids: func(Request) []uint32 { return []uint32{7} }}
		l, _, _ := newTestLocal(t, filepath.Join("testdata", "golden"), remote)
		if _, ok := l.dirFor(tt.model); ok && tt.model != "qwen3-mini" {
			if _, err := l.cfg.Registry.Wait(filepath.Join(l.cfg.Dir, tt.model)); err == nil {
				t.Fatalf("%q: unexpected tokenizer", tt.model)
			}
		}
		got, err := l.Tokenize(context.Background(), Request{Model: tt.model, Prompt: "hello"}, nil)
		l.Wait()
		if err != nil {
			t.Fatalf("%q: %v", tt.model, err)
		}
		if isRemote := slices.Equal(got, []uint32{7}); isRemote != tt.remote {
			t.Errorf("%q: served by the engine = %v; want %v", tt.model, isRemote, tt.remote)
		}
	}
}

func TestLocal_ChatPaths(t *testing.T) {
	msgs := json.RawMessage(`[{"role":"user","content":"hi"}]`)
	tests := []struct {
		name   string
		dir    string
		req    Request
		engine bool
	}{
		{"verified template renders locally", miniDir, Request{Model: "m", Messages: msgs}, false},
		{"per-request template goes to the engine", miniDir, Request{Model: "m", Messages: msgs, ChatTemplate: "{{ messages }}"}, true},
		{"model without a template goes to the engine", filepath.Join("testdata", "golden", "mistral-mini"), Request{Model: "m", Messages: msgs}, true},
		{"render error goes to the engine", miniDir, Request{Model: "m", Messages: json.RawMessage(`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]`)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			remote := &fakeRemote{ids: func(Request) []uint32 { return []uint32{9, 9} }}
			l, _, set := newTestLocal(t, tt.dir, remote)
			if _, err := l.cfg.Registry.Wait(tt.dir); err != nil {
				t.Fatal(err)
			}
			got, err := l.Tokenize(context.Background(), tt.req, nil)
			l.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if isEngine := slices.Equal(got, []uint32{9, 9}) && counter(set, "remote") == 1; isEngine != tt.engine {
				t.Errorf("engine = %v (ids %v); want %v", isEngine, got, tt.engine)
			}
		})
	}
}

func TestLocal_ChatIdsAreTheRenderEncoded(t *testing.T) {
	tok, err := NewRegistry().Wait(miniDir)
	if err != nil {
		t.Fatal(err)
	}
	want := tok.Encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", false, nil)
	got, ok, err := encodeChat(tok, Request{Messages: json.RawMessage(`[{"role":"user","content":"hi"}]`)}, nil)
	if err != nil || !ok || !slices.Equal(got, want) {
		t.Errorf("got %v, %v, %v; want %v", got, ok, err, want)
	}
}

func TestLocal_MalformedRequestIsATokenizeGuard(t *testing.T) {
	l, _, _ := newTestLocal(t, miniDir, &fakeRemote{ids: func(Request) []uint32 { return nil }})
	_, err := l.Tokenize(context.Background(), Request{Model: "m"}, nil)
	var g *GuardError
	if !errors.As(err, &g) || g.Reason != GuardTokenize {
		t.Errorf("err = %v; want a tokenize GuardError", err)
	}
}

func TestLocal_BoundsTheModelsItTracks(t *testing.T) {
	remote := &fakeRemote{ids: func(Request) []uint32 { return []uint32{7} }}
	l, _, _ := newTestLocal(t, filepath.Join("testdata", "golden"), remote)
	for i := range maxModels + 10 {
		if _, err := l.Tokenize(context.Background(), Request{Model: fmt.Sprintf("no-such-%d", i), Prompt: "x"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.nModels.Load(); got != maxModels {
		t.Errorf("models tracked = %d; want %d", got, maxModels)
	}
	got, err := l.Tokenize(context.Background(), Request{Model: "qwen3-mini", Prompt: "hello"}, nil)
	if err != nil || !slices.Equal(got, []uint32{7}) {
		t.Errorf("a model past the bound: got %v, %v; want the engine's [7]", got, err)
	}
}

func TestLocal_MissingModelDirectoryIsLookedForAgainAfterRetry(t *testing.T) {
	root := t.TempDir()
	remote := &fakeRemote{ids: func(Request) []uint32 { return []uint32{7} }}
	l, clock, _ := newTestLocal(t, root, remote)
	req := Request{Model: "late", Prompt: "hello"}
	if got, _ := l.Tokenize(context.Background(), req, nil); !slices.Equal(got, []uint32{7}) {
		t.Fatalf("missing directory: got %v; want the engine's", got)
	}
	// The operator copies the files in; they are seen after RetryAfter.
	if err := os.CopyFS(filepath.Join(root, "late"), os.DirFS(miniDir)); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Tokenize(context.Background(), req, nil); !slices.Equal(got, []uint32{7}) {
		t.Fatalf("before the retry: got %v; want the engine's", got)
	}
	clock.advance(DefaultRetryAfter)
	if _, err := l.cfg.Registry.Wait(filepath.Join(root, "late")); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Tokenize(context.Background(), req, nil); slices.Equal(got, []uint32{7}) {
		t.Errorf("after the retry: still the engine's ids")
	}
	l.Wait()
}

package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestNew_FailsOverToTheEngineThatAnswersAndStaysThere(t *testing.T) {
	down := newFakeEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]json.RawMessage) {
		http.Error(w, `{"error":{"message":"overloaded","type":"ServiceUnavailable","code":503}}`, http.StatusServiceUnavailable)
	})
	up := newFakeEngine(t, answerLen)
	tok, err := New(Options{Engines: []string{down.srv.URL, up.srv.URL}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tok.(*failover); !ok {
		t.Fatalf("New without Dir = %T; want the engines' failover", tok)
	}
	for i, prompt := range []string{"a", "bc", "def"} {
		got, err := tok.Tokenize(context.Background(), Request{Prompt: prompt}, nil)
		want := len(prompt) + 2 // answerLen: one id per byte of the JSON string
		if err != nil || len(got) != want {
			t.Fatalf("request %d: got %v, %v; want %d ids from the second engine", i, got, err, want)
		}
	}
	if d, u := down.calls.Load(), up.calls.Load(); d != 1 || u != 3 {
		t.Errorf("calls: down %d, up %d; want 1 and 3 (the engine that answered is tried first)", d, u)
	}
}

func TestNew_AllEnginesFailingIsATokenizeGuard(t *testing.T) {
	fail := func(w http.ResponseWriter, _ *http.Request, _ map[string]json.RawMessage) {
		http.Error(w, `{"error":{"message":"no","type":"BadRequestError","code":400}}`, http.StatusBadRequest)
	}
	a, b := newFakeEngine(t, fail), newFakeEngine(t, fail)
	tok, err := New(Options{Engines: []string{a.srv.URL, b.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	dst := []uint32{7}
	got, err := tok.Tokenize(context.Background(), Request{Prompt: "x"}, dst)
	var ge *GuardError
	if !errors.As(err, &ge) || ge.Reason != GuardTokenize || !errors.Is(err, ErrUpstream) {
		t.Fatalf("got %v; want a tokenize guard wrapping ErrUpstream", err)
	}
	if len(got) != 1 || got[0] != 7 {
		t.Errorf("dst = %v; want it untouched", got)
	}
	if a.calls.Load() != 1 || b.calls.Load() != 1 {
		t.Errorf("calls %d, %d; want each engine tried once", a.calls.Load(), b.calls.Load())
	}
}

func TestNew_CancelledRequestTriesNoFurtherEngine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	first := newFakeEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]json.RawMessage) {
		cancel()
		http.Error(w, `{"error":{"message":"no","code":500}}`, http.StatusInternalServerError)
	})
	second := newFakeEngine(t, answerLen)
	tok, err := New(Options{Engines: []string{first.srv.URL, second.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Tokenize(ctx, Request{Prompt: "x"}, nil); err == nil {
		t.Fatal("a cancelled request was answered")
	}
	if n := second.calls.Load(); n != 0 {
		t.Errorf("second engine called %d times after the caller gave up", n)
	}
}

func TestNew_RejectsARuleWithoutEnginesAndWrapsLocalWithDir(t *testing.T) {
	if _, err := New(Options{}); !errors.Is(err, ErrConfig) {
		t.Errorf("no engines: got %v; want ErrConfig", err)
	}
	if _, err := New(Options{Engines: []string{"10.0.0.1:8000"}}); !errors.Is(err, ErrConfig) {
		t.Errorf("engine without a scheme: got %v; want ErrConfig", err)
	}
	tok, err := New(Options{Engines: []string{"http://127.0.0.1:1"}, Dir: miniDir})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tok.(*Local); !ok {
		t.Errorf("New with Dir = %T; want *Local", tok)
	}
}

package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/memtrim"
)

// What a hostile or broken /kv_cache_events answer costs llb: these are
// the defects llbsim attack --engine trtllm --family kv found.

// newBareDrainFeed is a feed whose consume is called directly, its
// updates counted.
func newBareDrainFeed(t *testing.T, batches *atomic.Int64) *DrainFeed {
	t.Helper()
	f, err := NewDrainFeed(DrainConfig{ID: EndpointID{Service: "svc"}, URL: "http://127.0.0.1:1/kv_cache_events", BlockSize: 32,
		Logger: zerolog.Nop(), Sink: func(u Update) {
			if u.Kind == UpdateBatch {
				batches.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// repeatJSON is prefix, n copies of unit joined by commas, suffix.
func repeatJSON(prefix, unit string, n int, suffix string) []byte {
	var b bytes.Buffer
	b.Grow(len(prefix) + n*(len(unit)+1) + len(suffix))
	b.WriteString(prefix)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(unit)
	}
	b.WriteString(suffix)
	return b.Bytes()
}

// TestDrainFeed_BoundsWhatOneDrainCosts: a drain dense in structure (every
// two or three bytes an event, a block or a token, each costing 16–120
// bytes decoded) is dropped before it is decoded, counted as one receive
// error; its allocations stay near the body's size.
func TestDrainFeed_BoundsWhatOneDrainCosts(t *testing.T) {
	tests := []struct {
		name string
		body []byte
	}{
		{"events past the bound", repeatJSON("[", "{}", DefaultDrainMaxEvents+1, "]")},
		{"nulls past the bound", repeatJSON("[", "null", DefaultDrainMaxEvents+1, "]")},
		{"blocks past the bound", repeatJSON(`[{"event_id":1,"data":{"type":"stored","parent_hash":null,"blocks":[`, "{}", DefaultDrainMaxElements+1, `]},"window_size":4096}]`)},
		{"tokens past the bound", repeatJSON(`[{"event_id":1,"data":{"type":"stored","parent_hash":null,"blocks":[{"block_hash":1,"tokens":[`, "{}", DefaultDrainMaxElements+1, `]}]},"window_size":4096}]`)},
		{"hashes past the bound", repeatJSON(`[{"event_id":1,"data":{"type":"removed","block_hashes":[`, "1", DefaultDrainMaxElements+1, `]},"window_size":4096}]`)},
		{"nested past the bound", []byte(`[{"event_id":1,"data":{"type":"created"},"x":` + strings.Repeat("[", maxDrainDepth) + strings.Repeat("]", maxDrainDepth) + `}]`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var batches atomic.Int64
			f := newBareDrainFeed(t, &batches)
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			n, err := f.consume(tt.body, true)
			runtime.ReadMemStats(&m1)
			st := f.Stats()
			if err != nil || n != 0 || st.RecvErrors != 1 || st.Events != 0 || st.InvalidEvents != 0 || batches.Load() != 0 {
				t.Errorf("consume = %d, %v; stats %+v, %d batches; want the drain dropped whole as one receive error", n, err, st, batches.Load())
			}
			if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > uint64(len(tt.body))+1<<20 {
				t.Errorf("a %d-byte drain allocated %d bytes; want at most its size and 1 MiB", len(tt.body), alloc)
			}
		})
	}
}

// TestDrainFeed_ABadEventCostsItselfAlone: an event of a wrong shape
// beside valid ones is one invalid event; its event_id still counts (no
// false gap) and the rest of the drain is applied.
func TestDrainFeed_ABadEventCostsItselfAlone(t *testing.T) {
	good := func(id, start int) string {
		return `{"event_id":` + strconv.Itoa(id) + `,"data":{"type":"stored","parent_hash":null,"blocks":[{"type":"stored_block","block_hash":` +
			strconv.Itoa(100+id) + `,"tokens":[` + tokenList(start, 32) + `],"cache_level":0,"priority":35}]},"window_size":4096}`
	}
	tests := []struct {
		name, bad string
	}{
		{"blocks as an object", `{"event_id":2,"data":{"type":"stored","parent_hash":null,"blocks":{}},"window_size":4096}`},
		{"a string token_id", `{"event_id":2,"data":{"type":"stored","parent_hash":null,"blocks":[{"block_hash":5,"tokens":[{"token_id":"7"}]}]},"window_size":4096}`},
		{"a string window_size", `{"event_id":2,"data":{"type":"created"},"window_size":"4096"}`},
		{"an unreadable parent_hash", `{"event_id":2,"data":{"type":"stored","parent_hash":"","blocks":[{"block_hash":5,"tokens":[` + tokenList(9000, 32) + `]}]},"window_size":4096}`},
		{"a parent_hash of 1e400", `{"event_id":2,"data":{"type":"stored","parent_hash":1e400,"blocks":[{"block_hash":5,"tokens":[` + tokenList(9000, 32) + `]}]},"window_size":4096}`},
		{"an unreadable removal", `{"event_id":2,"data":{"type":"removed","block_hashes":[101,{}]},"window_size":4096}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newDrainServer(t, []byte("["+good(1, 7000)+","+tt.bad+","+good(3, 8000)+"]"))
			rig := startDrainRig(t, srv, 32)
			rig.drained()
			st := rig.feed.Stats()
			if st.RecvErrors != 0 || st.InvalidEvents != 1 || st.Events != 3 || st.Gaps != 0 || st.LastSeq != 3 {
				t.Errorf("stats %+v; want 3 events, 1 invalid, no receive error, no gap", st)
			}
			if rig.score(seqTokens(7000, 32)) != 1 || rig.score(seqTokens(8000, 32)) != 1 {
				t.Errorf("the valid events beside the bad one were not mirrored")
			}
			if got := rig.score(seqTokens(9000, 32)); got != 0 {
				t.Errorf("the bad event's run scores %d; want 0", got)
			}
		})
	}
}

// TestDrainFeed_DoesNotFollowRedirects: the drain reads the endpoint it
// names; a redirect is a failed drain, and its target never sees llb.
func TestDrainFeed_DoesNotFollowRedirects(t *testing.T) {
	var elsewhere atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			elsewhere.Add(1)
			_, _ = w.Write([]byte(`[{"event_id":1,"data":{"type":"created"},"window_size":4096}]`))
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	var batches atomic.Int64
	f, err := NewDrainFeed(DrainConfig{ID: EndpointID{Service: "svc"}, URL: srv.URL + "/kv_cache_events", BlockSize: 32,
		Logger: zerolog.Nop(), Sink: func(u Update) {
			if u.Kind == UpdateBatch {
				batches.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if n, err := f.drainOnce(t.Context()); err == nil || n != 0 {
			t.Errorf("drainOnce = %d, %v; want a failed drain", n, err)
		}
	}
	if elsewhere.Load() != 0 || batches.Load() != 0 {
		t.Errorf("the redirect's target was asked %d times, %d batches applied; want none", elsewhere.Load(), batches.Load())
	}
}

// TestDrainFeed_DropsADeclaredOversizedBodyUnread: a Content-Length past
// MaxBody is dropped at once, without waiting for (or reading) the body.
func TestDrainFeed_DropsADeclaredOversizedBodyUnread(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(1<<20))
		_, _ = w.Write([]byte("[ "))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the rest never comes
	}))
	t.Cleanup(srv.Close)
	f, err := NewDrainFeed(DrainConfig{ID: EndpointID{Service: "svc"}, URL: srv.URL + "/kv_cache_events", BlockSize: 32,
		MaxBody: 1 << 10, Timeout: time.Minute, Logger: zerolog.Nop(), Sink: func(Update) {}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.drainOnce(t.Context())
		done <- err
	}()
	select {
	case err := <-done:
		if st := f.Stats(); err != nil || st.RecvErrors != 1 {
			t.Errorf("drainOnce: %v, stats %+v; want the drain dropped as one receive error", err, st)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("drainOnce waited for a body it must not read")
	}
}

func TestSplitDrain(t *testing.T) {
	tests := []struct {
		body    string
		want    []string
		wantErr string
	}{
		{body: `[]`, want: nil},
		{body: ` [ ] `, want: nil},
		{body: `[{"a":1}]`, want: []string{`{"a":1}`}},
		{body: `[ {"a":"],[,"} , "x\"]" ,[1,[2]] ]`, want: []string{`{"a":"],[,"} `, `"x\"]" `, `[1,[2]] `}},
		{body: `{"a":[]}`, wantErr: "not a value"},
		{body: `"[]"`, wantErr: "not a value"},
		{body: `[1,2,3,4]`, wantErr: "more than 3 events"},
		{body: `[[1,2],[3,4]]`, wantErr: "more than 3 array elements"},
		{body: `[{"a":[1,2,3,4]}]`, wantErr: "more than 3 array elements"},
		{body: `[{"a":{"b":1,"c":2,"d":3,"e":4}}]`, want: []string{`{"a":{"b":1,"c":2,"d":3,"e":4}}`}},
		{body: "[" + strings.Repeat(`{"a":`, maxDrainDepth) + "1" + strings.Repeat("}", maxDrainDepth) + "]", wantErr: "nested deeper"},
	}
	for _, tt := range tests {
		var got []string
		_, err := splitDrain([]byte(tt.body), 3, 3, func(ev []byte) { got = append(got, string(ev)) })
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrMalformed) {
				t.Errorf("splitDrain(%s) = %v; want an ErrMalformed with %q", tt.body, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("splitDrain(%s): %v", tt.body, err)
		case fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want):
			t.Errorf("splitDrain(%s) = %q; want %q", tt.body, got, tt.want)
		}
	}
}

// TestTrimAfterDrain: a large drain gives its memory back at once, at
// most once per drainTrimEvery process-wide (a large drain within the
// period is trimmed at its end); small drains never pay for a collection.
func TestTrimAfterDrain(t *testing.T) {
	defer func(tr *memtrim.Trim) { drainTrim = tr }(drainTrim)
	drainTrim = memtrim.New(0, drainTrimEvery, func() bool { return true }, nil)
	freed := 0
	clock := time.Unix(1000, 0)
	var queued []func()
	drainTrim.Free = func() { freed++ }
	drainTrim.Now = func() time.Time { return clock }
	drainTrim.After = func(_ time.Duration, fn func()) { queued = append(queued, fn) }
	run := func(d time.Duration) {
		clock = clock.Add(d)
		q := queued
		queued = nil
		for _, fn := range q {
			fn()
		}
	}
	steps := []struct {
		n         int
		after     time.Duration // the clock runs this long before the drain's check
		wantArm   bool
		wantFreed int
	}{
		{n: drainTrimAfter - 1, wantArm: false, wantFreed: 0},
		{n: drainTrimAfter, wantArm: true, wantFreed: 1},
		{n: 64 << 20, after: drainTrimEvery / 2, wantArm: true, wantFreed: 1}, // waits out the period
		{n: 1 << 10, after: drainTrimEvery / 2, wantArm: false, wantFreed: 2}, // the waiting trim runs
		{n: 1 << 10, after: 10 * drainTrimEvery, wantArm: false, wantFreed: 2},
	}
	for i, s := range steps {
		if got := trimAfterDrain(s.n); got != s.wantArm {
			t.Errorf("step %d: a drain of %d bytes armed the trim %v; want %v", i, s.n, got, s.wantArm)
		}
		run(s.after)
		if freed != s.wantFreed {
			t.Errorf("step %d: freed %d times; want %d", i, freed, s.wantFreed)
		}
	}
}

// TestDrainFeed_ARestartedEngineMayChangeItsWindow: the attention window
// llb mirrors is the first one seen since the engine (re)started; an
// engine restarted with another max_attention_window is mirrored again
// instead of having every event skipped as another window's.
func TestDrainFeed_ARestartedEngineMayChangeItsWindow(t *testing.T) {
	stored := func(id, window, start int) string {
		return `{"event_id":` + strconv.Itoa(id) + `,"data":{"type":"stored","parent_hash":null,"blocks":[{"type":"stored_block","block_hash":` +
			strconv.Itoa(500+start) + `,"tokens":[` + tokenList(start, 32) + `],"cache_level":0,"priority":35}]},"window_size":` + strconv.Itoa(window) + `}`
	}
	srv := newDrainServer(t, []byte("["+stored(5, 4096, 1000)+","+stored(6, 4096, 2000)+"]"))
	rig := startDrainRig(t, srv, 32)
	rig.drained()
	srv.push([]byte(`[{"event_id":0,"data":{"type":"created","num_blocks_per_cache_level":[10,0]},"window_size":8192},` + stored(1, 8192, 3000) + "]"))
	rig.drained()
	if st := rig.feed.Stats(); st.Restarts != 1 || st.Ignored[IgnoreWindow].Events != 0 {
		t.Errorf("stats %+v; want 1 restart, nothing skipped as another window", st)
	}
	if got := rig.score(seqTokens(3000, 32)); got != 1 {
		t.Errorf("a block stored after the restart scores %d; want 1", got)
	}
	if got := rig.score(seqTokens(1000, 32)); got != 0 {
		t.Errorf("a block stored before the restart scores %d; want 0", got)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// logWatch collects a daemon's JSON log lines and lets a test wait for one,
// with a deadline, instead of sleeping.
type logWatch struct {
	mu      sync.Mutex
	partial []byte
	lines   []map[string]any
	raw     []string
	changed chan struct{}
}

func newLogWatch() *logWatch { return &logWatch{changed: make(chan struct{})} }

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		w.raw = append(w.raw, line)
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			w.lines = append(w.lines, m)
		}
	}
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

// waitMsg waits for a line whose message contains msg and returns it.
func (w *logWatch) waitMsg(t *testing.T, msg string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(timeout)
	for seen := 0; ; {
		w.mu.Lock()
		for ; seen < len(w.lines); seen++ {
			if m, _ := w.lines[seen]["message"].(string); strings.Contains(m, msg) {
				line := w.lines[seen]
				w.mu.Unlock()
				return line
			}
		}
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no log line %q within %s; log:\n%s", msg, timeout, w.text())
		}
	}
}

func (w *logWatch) has(msg string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		if m, _ := l["message"].(string); strings.Contains(m, msg) {
			return true
		}
	}
	return false
}

func (w *logWatch) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.raw, "\n")
}

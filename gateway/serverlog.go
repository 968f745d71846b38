package gateway

import (
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
)

// serverLogEvery bounds how often net/http's own error lines are logged: an
// accept loop out of file descriptors retries every few milliseconds.
const serverLogEvery = 10 * time.Second

// serverErrorLog is the io.Writer behind a listener's http.Server.ErrorLog
// (the h2c server) and its accept loop's errors: net/http's own errors
// ("http2: …") and "accept error: … too many open files" become zerolog
// Warn lines with a message and a level (they were written raw, without
// one), at most one per serverLogEvery with the
// count of those held back since the last one.
type serverErrorLog struct {
	log zerolog.Logger

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Write logs p as one warning, rate-limited.
func (w *serverErrorLog) Write(p []byte) (int, error) {
	now := time.Now()
	w.mu.Lock()
	if !w.last.IsZero() && now.Sub(w.last) < serverLogEvery {
		w.suppressed++
		w.mu.Unlock()
		return len(p), nil
	}
	n := w.suppressed
	w.last, w.suppressed = now, 0
	w.mu.Unlock()
	w.log.Warn().Int(logfield.Count, n).Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/llbproject/llb/simulate/harness"
)

// benchProgress reports a bench's phases as lines and each run's requests
// as a progress bar when stderr is a terminal (or --progress on).
type benchProgress struct {
	w     io.Writer
	bars  bool
	start time.Time

	mu  sync.Mutex
	bar *progressbar.ProgressBar
}

func newBenchProgress(w io.Writer, mode string) *benchProgress {
	bars := mode == "on"
	if mode == "auto" {
		if fh, ok := w.(*os.File); ok {
			if st, err := fh.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				bars = true
			}
		}
	}
	return &benchProgress{w: w, bars: bars, start: time.Now()}
}

func (p *benchProgress) line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Clear()
	}
	fmt.Fprintf(p.w, "llbsim bench: %6.0fs %s\n", time.Since(p.start).Seconds(), s)
}

// events wires the progress into a bench.
func (p *benchProgress) events() harness.Events {
	ev := harness.Events{
		Phase: p.line,
		RunStart: func(label string, total int) {
			p.line(label)
			if !p.bars {
				return
			}
			p.mu.Lock()
			p.bar = progressbar.NewOptions(total,
				progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription("requests"),
				progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true),
				progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
			p.mu.Unlock()
		},
		RunEnd: func(label string, r *harness.Result) {
			p.mu.Lock()
			if p.bar != nil {
				_ = p.bar.Finish()
				p.bar = nil
			}
			p.mu.Unlock()
			sessions := ""
			if r.Sessions > 0 {
				sessions = fmt.Sprintf(", sessions on one prefill %d/%d", r.SessionsKept, r.Sessions)
			}
			p.line(fmt.Sprintf("  %s: ttft p90 %.3fs, hit %.3f (oracle %.3f), %d/%d completed%s, dispatch lag p99 %.1fms, overhead %.1fms, cpu harness %.0fs llbd %.0fs over %.0fs wall",
				label, r.TTFT.P90, r.HitRate, r.OracleHitRate, r.Completed, r.Requests, sessions,
				r.Health.DispatchLagP99, r.Health.Overhead, r.Health.HarnessCPU, r.Health.DaemonCPU, r.Health.Wall))
		},
	}
	if p.bars {
		ev.Request = func(int) {
			p.mu.Lock()
			b := p.bar
			p.mu.Unlock()
			if b != nil {
				_ = b.Add(1)
			}
		}
	}
	return ev
}

// close clears a bar left by an interrupted run.
func (p *benchProgress) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Exit()
		p.bar = nil
	}
}

package proxybench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// WriteStreamsReport writes the streams benchmark's result as Markdown:
// every path per count (medians of the rounds), llbd against HAProxy with
// the targets of issue 31, llbd's memory after idling, and every run.
func WriteStreamsReport(w io.Writer, r *StreamsResult) {
	c := r.Config
	fmt.Fprintf(w, "## Streams: %v concurrent SSE streams of %d events at %.0f/s, one connection each; %d interleaved rounds (medians)\n\n",
		c.Counts, c.Events, c.Rate, c.Rounds)
	fmt.Fprintf(w, "vLLM-shaped chat.completion.chunk events, each stamped with its send time; each run ramps its streams up over %v, "+
		"measures %v of steady state, then lets them finish. Open-file limit %d, HAProxy maxconn and llbd --max-conns %d. "+
		"Load average (1 min) at the end of the runs: %.1f–%.1f.\n\n", c.Ramp.Round(10*time.Millisecond), c.Window, r.FileLimit, c.MaxConns, r.Load1Min, r.Load1Max)
	fmt.Fprintln(w, "| streams | path | events/s | delay p50 / p99 / p99.9 | added over direct p50 / p99 / p99.9 | first event p50 / p99 | CPU µs/event proxy / backend / client | RSS KiB per stream | non-200 | broken | dial errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range r.Summary {
		rss := "–"
		if s.Path != "direct" {
			rss = fmt.Sprintf("%.1f", s.RSSPerStream/1024)
		}
		added := "–"
		if s.Path != "direct" {
			added = fmt.Sprintf("%s / %s / %s", ms(s.Added.P50), ms(s.Added.P99), ms(s.Added.P999))
		}
		proxy := "–"
		if s.Path != "direct" {
			proxy = fmt.Sprintf("%.1f", us1(s.ProxyCPU))
		}
		fmt.Fprintf(w, "| %d | %s | %.0f | %s / %s / %s | %s | %s / %s | %s / %.1f / %.1f | %s | %s | %d | %d |\n",
			s.Streams, s.Path, s.EventsPerSec, ms(s.Delay.P50), ms(s.Delay.P99), ms(s.Delay.P999), added,
			ms(s.First.P50), ms(s.First.P99), proxy, us1(s.BackendCPU), us1(s.ClientCPU), rss, codes(s.Codes), s.Broken, s.ConnErrors)
	}
	fmt.Fprintln(w)
	for _, p := range []string{"llbd", "llbd-before"} {
		if slices.Contains(c.Paths, p) && slices.Contains(c.Paths, "haproxy") {
			writeAgainstHAProxy(w, r, p)
		}
	}
	if len(r.Idle) > 0 {
		fmt.Fprintln(w, "### Memory after the load")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| path | RSS before the first run | peak RSS | RSS after idling | heap in use after idling | goroutines after idling |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for _, m := range r.Idle {
			fmt.Fprintf(w, "| %s | %s | %s | %s (%v) | %s | %d |\n", m.Path, mib(m.Start), mib(m.Peak), mib(m.AfterIdle), m.IdleFor, mib(m.HeapInuse), m.Goroutines)
		}
		fmt.Fprintln(w)
	}
	var failures []string
	for _, s := range r.Summary {
		for _, k := range slices.Sorted(maps.Keys(s.Samples)) {
			failures = append(failures, fmt.Sprintf("- %d streams, %s, %s: %s", s.Streams, s.Path, k, s.Samples[k]))
		}
	}
	if len(failures) > 0 {
		fmt.Fprintln(w, "### The first answer of each failure")
		fmt.Fprintln(w)
		for _, f := range failures {
			fmt.Fprintln(w, f)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "### Every run")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| streams | round | path | events/s | delay p50 / p99 / p99.9 | first p50 | CPU µs/event proxy | RSS KiB/stream | streams ok | non-200 | broken | dial errors | load |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, x := range r.Runs {
		fmt.Fprintf(w, "| %d | %d | %s | %.0f | %s / %s / %s | %s | %.1f | %.1f | %d | %s | %d | %d | %.1f |\n",
			x.Streams, x.Round, x.Path, x.EventsPerSec, ms(x.Delay.P50), ms(x.Delay.P99), ms(x.Delay.P999), ms(x.First.P50),
			us1(x.ProxyCPU), x.RSSPerStream()/1024, x.StreamsOK, codes(x.Codes), x.Broken, x.ConnErrors, x.Load1)
	}
}

// writeAgainstHAProxy writes path's ratios to HAProxy and issue 31's
// targets: CPU per event ≤ 1.3×, RSS per stream ≤ 2×, added delay p50 ≤ 2×
// and p99 ≤ 1.5×, no failure where HAProxy has none.
func writeAgainstHAProxy(w io.Writer, r *StreamsResult, path string) {
	fmt.Fprintf(w, "### %s against HAProxy (targets: CPU/event ≤ 1.3×, RSS/stream ≤ 2×, added delay p50 ≤ 2× and p99 ≤ 1.5×, no failure where HAProxy has none)\n\n", path)
	fmt.Fprintln(w, "| streams | events/s | CPU µs/event | RSS KiB per stream | added delay p50 / p99 (ms) | failed requests | targets missed |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, n := range r.Config.Counts {
		l, okL := findSummary(r.Summary, path, n)
		h, okH := findSummary(r.Summary, "haproxy", n)
		if !okL || !okH {
			continue
		}
		var missed []string
		cpu := ratio(float64(l.ProxyCPU), float64(h.ProxyCPU))
		if cpu > 1.3 {
			missed = append(missed, "cpu")
		}
		rss := ratio(l.RSSPerStream, h.RSSPerStream)
		if rss > 2 {
			missed = append(missed, "rss")
		}
		// Added delays are compared where HAProxy's is measurable (a
		// negative or zero one means within the noise of direct).
		if l.Added.P50 > max(2*h.Added.P50, 100*time.Microsecond) {
			missed = append(missed, "p50")
		}
		if l.Added.P99 > max(h.Added.P99*3/2, 100*time.Microsecond) {
			missed = append(missed, "p99")
		}
		if h.NonOK() == 0 && l.NonOK() > 0 {
			missed = append(missed, "errors")
		}
		miss := "none"
		if len(missed) > 0 {
			miss = strings.Join(missed, ", ")
		}
		fmt.Fprintf(w, "| %d | %.0f vs %.0f | %.1f / %.1f (%.2f×) | %.1f vs %.1f (%.2f×) | %s / %s vs %s / %s | %d vs %d | %s |\n",
			n, l.EventsPerSec, h.EventsPerSec, us1(l.ProxyCPU), us1(h.ProxyCPU), cpu, l.RSSPerStream/1024, h.RSSPerStream/1024, rss,
			ms(l.Added.P50), ms(l.Added.P99), ms(h.Added.P50), ms(h.Added.P99), l.NonOK(), h.NonOK(), miss)
	}
	fmt.Fprintln(w)
}

func findSummary(s []StreamSummary, path string, n int) (StreamSummary, bool) {
	i := slices.IndexFunc(s, func(x StreamSummary) bool { return x.Path == path && x.Streams == n })
	if i < 0 {
		return StreamSummary{}, false
	}
	return s[i], true
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// ms renders a duration in milliseconds.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func us1(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func mib(b int64) string {
	if b < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// codes renders failures by status and code: "0" or
// "502 backend_unreachable ×3, 503 no_healthy_backend ×12".
func codes(m map[string]int64) string {
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

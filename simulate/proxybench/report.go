package proxybench

import (
	"fmt"
	"io"
	"time"
)

// WriteReport writes the result as Markdown tables: throughput with the
// ratios to HAProxy, the added latency at a fixed rate, and the added delay
// per streamed chunk.
func WriteReport(w io.Writer, r *Result) {
	c := r.Config
	for _, conns := range c.Connections {
		writeThroughput(w, r, conns)
	}
	rt := r.Rate
	fmt.Fprintf(w, "## Added latency at %d req/s (open loop, 2 interleaved rounds of %v per path)\n\n", rt.Rate, c.RateDuration)
	fmt.Fprintln(w, "Latency from each request's scheduled time, and from its actual send (which leaves the generator's own lag out).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| path | p50 | p99 | p50 from the send | p99 from the send | requests |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	fmt.Fprintf(w, "| direct | %s | %s | %s | %s | %d |\n", us(rt.Direct.P50), us(rt.Direct.P99), us(rt.SentDirect.P50), us(rt.SentDirect.P99), rt.Direct.N)
	fmt.Fprintf(w, "| llbd | %s | %s | %s | %s | %d |\n", us(rt.LLBD.P50), us(rt.LLBD.P99), us(rt.SentLLBD.P50), us(rt.SentLLBD.P99), rt.LLBD.N)
	fmt.Fprintf(w, "| **llbd − direct** | **%s** | **%s** | **%s** | **%s** | errors %d |\n\n",
		us(rt.Added.P50), us(rt.Added.P99), us(rt.SentAdded.P50), us(rt.SentAdded.P99), rt.Errors)

	s := r.SSE
	fmt.Fprintf(w, "## Streaming: %d streams × %d SSE events, %v apart, per path\n\n", s.Streams, s.Tokens, s.Gap)
	fmt.Fprintln(w, "Delay of each event from the backend's write to the client's read.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| path | p50 | p99 | events |")
	fmt.Fprintln(w, "|---|---|---|---|")
	fmt.Fprintf(w, "| direct | %s | %s | %d |\n", us(s.Direct.P50), us(s.Direct.P99), s.Direct.N)
	fmt.Fprintf(w, "| llbd | %s | %s | %d |\n", us(s.LLBD.P50), us(s.LLBD.P99), s.LLBD.N)
	fmt.Fprintf(w, "| **added per chunk** | **%s** | **%s** | incomplete streams %d |\n", us(s.Added.P50), us(s.Added.P99), s.Incomplete)
}

// writeThroughput writes the throughput table at wrk's conns connections.
func writeThroughput(w io.Writer, r *Result, conns int) {
	c := r.Config
	fmt.Fprintf(w, "## Throughput: wrk -t%d -c%d, %v per run, %d interleaved rounds (medians)\n\n", c.Threads, conns, c.Duration, c.Rounds)
	fmt.Fprintf(w, "POST /v1/completions (%d-byte body) → nginx answering a fixed %d-byte completion, all on loopback.\n\n", len(requestBody), len(completion))
	fmt.Fprintln(w, "| path | req/s | p50 | p99 | × HAProxy req/s | p99 ÷ HAProxy p99 | CPU/req | errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	ha, _ := r.Path("haproxy", conns)
	var paths []PathResult
	for _, p := range r.Paths {
		if p.Connections == conns {
			paths = append(paths, p)
		}
	}
	for _, p := range paths {
		ratio, p99 := "", ""
		if ha.ReqPerSec > 0 {
			ratio = fmt.Sprintf("%.2f", p.ReqPerSec/ha.ReqPerSec)
		}
		if ha.P99 > 0 {
			p99 = fmt.Sprintf("%.2f", float64(p.P99)/float64(ha.P99))
		}
		cpu := "–"
		if p.CPUPerReq > 0 {
			cpu = fmt.Sprintf("%.1f µs", float64(p.CPUPerReq)/float64(time.Microsecond))
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %s | %s | %d |\n", label(p.Name), p.ReqPerSec, us(p.P50), us(p.P99), ratio, p99, cpu, p.Errors)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Rounds (req/s):")
	fmt.Fprintln(w)
	for _, p := range paths {
		fmt.Fprintf(w, "- %s:", label(p.Name))
		for _, run := range p.Rounds {
			fmt.Fprintf(w, " %.0f (p99 %s)", run.ReqPerSec, us(run.P99))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func label(name string) string {
	switch name {
	case "direct":
		return "direct to nginx"
	case "haproxy":
		return "HAProxy (roundrobin, http-reuse always)"
	case "llbd":
		return "llbd (single-pool RR rule)"
	case "llbd-before":
		return "llbd before (--before, the same rule)"
	case "dataplane":
		return "llbd's data plane alone (instant router, in-process)"
	case "fasthttp":
		return "bare fasthttp proxy (server + HostClient, in-process)"
	case "llbd+log":
		return "llbd with its access log (--access-log)"
	}
	return name
}

// us renders a duration in µs below 10 ms, in ms above.
func us(d time.Duration) string {
	if d < 10*time.Millisecond && d > -10*time.Millisecond {
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

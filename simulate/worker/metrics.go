package worker

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/simulate/engine"
)

// ttftBuckets are vLLM's TTFT histogram buckets (seconds), fresh per call.
func ttftBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
}

// e2eBuckets are vLLM's e2e latency histogram buckets (seconds), fresh per
// call.
func e2eBuckets() []float64 {
	return []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
}

// workerMetrics is one worker's metric set: vLLM's names (labels model_name
// and engine) plus llbsim_* counters the tests and the harness read.
type workerMetrics struct {
	set *metrics.Set

	ttft, e2e *metrics.PrometheusHistogram

	rejected         *metrics.Counter
	strictRefused    *metrics.Counter // refused by TensorRT-LLM's request models: an undeclared field, stream_options without stream
	kvParamsReceived *metrics.Counter
	pulls            *metrics.Counter
	pullFailures     *metrics.Counter
	nixlReadsServed  *metrics.Counter
	faults           [faultDrop + 1]*metrics.Counter
}

// labelValue escapes a Prometheus label value.
func labelValue(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// newMetrics builds the set; engine gauges read the driver's snapshot.
// The engine's own series carry its dialect's names: vLLM's, SGLang's
// (python/sglang/srt/metrics/collector.py, its KV pool in tokens), or none
// for TensorRT-LLM, whose GET /metrics is JSON iteration stats
// (handleMetrics) and whose Prometheus set is /prometheus/metrics.
func newMetrics(w *Worker) *workerMetrics {
	s := metrics.NewSet()
	base := "model_name=" + labelValue(w.cfg.Model) + `,engine="0"`
	name := func(n string, extra ...string) string {
		return n + "{" + strings.Join(append([]string{base}, extra...), ",") + "}"
	}
	stat := func(n string, f func(engine.Stats) float64, extra ...string) {
		s.NewGauge(name(n, extra...), func() float64 { return f(w.drv.snapshot()) })
	}
	ec := w.cfg.Engine
	ttftName, e2eName := "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"
	switch w.cfg.Dialect {
	case DialectSGLang:
		ttftName, e2eName = "sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds"
		stat("sglang:num_running_reqs", func(st engine.Stats) float64 { return float64(st.Running) })
		stat("sglang:num_queue_reqs", func(st engine.Stats) float64 { return float64(st.Waiting) })
		stat("sglang:token_usage", func(st engine.Stats) float64 { return st.KVUsage() })
		s.NewGauge(name("sglang:max_total_num_tokens"), func() float64 { return float64(ec.NumBlocks * ec.BlockSize) })
		stat("sglang:cache_hit_rate", func(st engine.Stats) float64 {
			if st.PrefixQueries == 0 {
				return 0
			}
			return float64(st.PrefixHits) / float64(st.PrefixQueries)
		})
	case DialectTRTLLM:
		ttftName, e2eName = "llbsim_time_to_first_token_seconds", "llbsim_e2e_request_latency_seconds"
	default:
		stat("vllm:num_requests_running", func(st engine.Stats) float64 { return float64(st.Running) })
		stat("vllm:num_requests_waiting", func(st engine.Stats) float64 { return float64(st.Waiting) })
		stat("vllm:kv_cache_usage_perc", func(st engine.Stats) float64 { return st.KVUsage() })
		stat("vllm:prefix_cache_queries_total", func(st engine.Stats) float64 { return float64(st.PrefixQueries) })
		stat("vllm:prefix_cache_hits_total", func(st engine.Stats) float64 { return float64(st.PrefixHits) })
		stat("vllm:request_success_total", func(st engine.Stats) float64 { return float64(st.Finished) }, `finished_reason="length"`)
		s.NewGauge(name("vllm:num_preemptions_total"), func() float64 { return 0 })
		info := []string{
			"block_size=" + labelValue(strconv.Itoa(ec.BlockSize)),
			"num_gpu_blocks=" + labelValue(strconv.Itoa(ec.NumBlocks)),
			`enable_prefix_caching="True"`,
			"prefix_caching_hash_algo=" + labelValue(string(ec.Hash.Algo)),
			`cache_dtype="auto"`,
			`gpu_memory_utilization="0.9"`,
			`num_cpu_blocks="None"`,
			"max_num_seqs=" + labelValue(strconv.Itoa(ec.MaxNumSeqs)),
			"max_model_len=" + labelValue(strconv.Itoa(ec.MaxModelLen)),
		}
		s.NewGauge(name("vllm:cache_config_info", info...), func() float64 { return 1 })
	}

	stat("llbsim_requests_aborted_total", func(st engine.Stats) float64 { return float64(st.Aborted) })
	stat("llbsim_remote_decode_legs_total", func(st engine.Stats) float64 { return float64(st.RemoteDecodeLegs) })
	stat("llbsim_remote_prefill_legs_total", func(st engine.Stats) float64 { return float64(st.RemotePrefillLegs) })
	stat("llbsim_kv_params_ignored_total", func(st engine.Stats) float64 { return float64(st.RemoteParamsIgnored) })
	stat("llbsim_kv_leases", func(st engine.Stats) float64 { return float64(st.Leases) })
	stat("llbsim_kv_leases_released_total", func(st engine.Stats) float64 { return float64(st.LeasesReleased) })
	stat("llbsim_kv_leases_expired_total", func(st engine.Stats) float64 { return float64(st.LeasesExpired) })
	stat("llbsim_kv_blocks_stored_total", func(st engine.Stats) float64 { return float64(st.BlocksStored) })
	stat("llbsim_kv_blocks_removed_total", func(st engine.Stats) float64 { return float64(st.BlocksRemoved) })
	stat("llbsim_kv_cached_blocks", func(st engine.Stats) float64 { return float64(st.CachedBlocks) })
	s.NewGauge(name("llbsim_kv_batches_published_total"), func() float64 { return float64(w.pubStats().Published) })
	s.NewGauge(name("llbsim_kv_batches_dropped_total"), func() float64 {
		return float64(w.pubStats().Dropped + w.drv.publishErrors.Load())
	})
	if w.ring != nil {
		ring := func(pick func(next, dropped, drains uint64, pending int) float64) func() float64 {
			return func() float64 { return pick(w.ring.stats()) }
		}
		s.NewGauge(name("llbsim_kv_events_total"), ring(func(n, _, _ uint64, _ int) float64 { return float64(n) }))
		s.NewGauge(name("llbsim_kv_events_dropped_total"), ring(func(_, d, _ uint64, _ int) float64 { return float64(d) }))
		s.NewGauge(name("llbsim_kv_drains_total"), ring(func(_, _, d uint64, _ int) float64 { return float64(d) }))
		s.NewGauge(name("llbsim_kv_events_pending"), ring(func(_, _, _ uint64, p int) float64 { return float64(p) }))
	}

	m := &workerMetrics{
		set:              s,
		ttft:             s.NewPrometheusHistogramExt(name(ttftName), ttftBuckets()),
		e2e:              s.NewPrometheusHistogramExt(name(e2eName), e2eBuckets()),
		rejected:         s.NewCounter(name("llbsim_requests_rejected_total")),
		strictRefused:    s.NewCounter(name("llbsim_requests_strict_refused_total")),
		kvParamsReceived: s.NewCounter(name("llbsim_kv_params_received_total")),
		pulls:            s.NewCounter(name("llbsim_kv_pulls_total")),
		pullFailures:     s.NewCounter(name("llbsim_kv_pull_failures_total")),
		nixlReadsServed:  s.NewCounter(name("llbsim_nixl_reads_served_total")),
	}
	for k := faultDead; k <= faultDrop; k++ {
		m.faults[k] = s.NewCounter(name("llbsim_faults_injected_total", fmt.Sprintf("kind=%q", k.String())))
	}
	return m
}

// fault counts one injected fault.
func (m *workerMetrics) fault(k faultKind) { m.faults[k].Inc() }

// handleMetrics serves GET /metrics in the Prometheus text format; a
// TensorRT-LLM worker answers its JSON iteration stats instead.
func (w *Worker) handleMetrics(rw http.ResponseWriter, r *http.Request) {
	if w.cfg.Dialect == DialectTRTLLM && r.URL.Path == "/metrics" {
		w.handleIterationStats(rw)
		return
	}
	rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.met.set.WritePrometheus(rw)
	w.writeLoRAInfo(rw)
}

// handleIterationStats answers like trtllm-serve's GET /metrics: a JSON
// list of iteration stats (one, now) with the KV cache's block counts.
func (w *Worker) handleIterationStats(rw http.ResponseWriter) {
	st := w.drv.snapshot()
	ec := w.cfg.Engine
	used := int(st.KVUsage()*float64(ec.NumBlocks) + 0.5)
	writeJSON(rw, http.StatusOK, []map[string]any{{
		"iter":              st.Submitted,
		"numActiveRequests": st.Running,
		"numQueuedRequests": st.Waiting,
		"kvCacheStats": map[string]any{
			"maxNumBlocks": ec.NumBlocks, "freeNumBlocks": ec.NumBlocks - used, "usedNumBlocks": used,
			"tokensPerBlock": ec.BlockSize,
		},
	}})
}

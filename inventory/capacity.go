package inventory

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
)

// CacheConfig is what an engine's vllm:cache_config_info series says about
// its KV cache.
type CacheConfig struct {
	// NumGPUBlocks is the KV-block capacity, summed over the engines (DP
	// ranks) the endpoint reports; 0 when unknown.
	NumGPUBlocks int64
	// BlockSize is the engine's tokens per block; 0 when unknown (or when
	// engines disagree).
	BlockSize int
	// HashAlgo is prefix_caching_hash_algo when reported.
	HashAlgo string
	// Engines is the number of cache_config_info series found.
	Engines int
	// Waiting and Running are vllm:num_requests_waiting and
	// vllm:num_requests_running summed over every series (DP engines);
	// HasLoad is false when neither series was found.
	Waiting, Running int64
	HasLoad          bool
	// KVUsage is vllm:kv_cache_usage_perc (vLLM V1; gpu_cache_usage_perc
	// on V0), the fraction 0..1 of KV blocks in use, averaged over the
	// series (DP engines); HasKVUsage is false when no series was found.
	KVUsage    float64
	HasKVUsage bool
	// KVTokens is SGLang's KV pool in tokens (sglang:max_total_num_tokens,
	// summed over its series: one per DP rank); 0 when not reported.
	// ForBlockSize turns it into blocks.
	KVTokens int64
	// LoRA is vllm:lora_requests_info's latest series.
	LoRA LoRAInfo
}

// LoRAInfo is what vLLM's vllm:lora_requests_info gauge says: the LoRA
// adapters of the running and waiting requests and --max-loras. vLLM keeps
// a series per label combination it ever set, each valued at the time it
// was last set: the one with the largest value is the current state.
type LoRAInfo struct {
	// Known is true when the gauge was found.
	Known bool
	// Running and Waiting are the adapters, comma-joined as vLLM sends
	// them ("" for none).
	Running, Waiting string
	// MaxLoRA is the max_lora label (0 when absent).
	MaxLoRA int
	// at is the chosen series' value.
	at float64
}

// ForBlockSize fills NumGPUBlocks from KVTokens (SGLang reports its pool in
// tokens; its pages are the rule's kvBlockSize) when vLLM's series gave
// none.
func (c CacheConfig) ForBlockSize(bs int) CacheConfig {
	if c.NumGPUBlocks == 0 && c.KVTokens > 0 && bs > 0 {
		c.NumGPUBlocks = c.KVTokens / int64(bs)
	}
	return c
}

// KVUsedBlocks is KVUsage × NumGPUBlocks, rounded to the nearest block (0
// when either is unknown).
func (c CacheConfig) KVUsedBlocks() int64 {
	if !c.HasKVUsage || c.NumGPUBlocks <= 0 {
		return 0
	}
	return int64(math.Round(c.KVUsage * float64(c.NumGPUBlocks)))
}

// Known reports whether the capacity is known; an unknown capacity is
// treated as equal to the other endpoints' by the selection law.
func (c CacheConfig) Known() bool { return c.NumGPUBlocks > 0 }

// cacheConfigMetric is vLLM's info metric (value 1, data in labels).
const cacheConfigMetric = "vllm:cache_config_info"

// The engine's queue gauges (Tier 2's queued_requests) and KV-usage
// gauges (V1's name, then V0's), and SGLang's (python/sglang/srt/metrics:
// the same quantities under its own names, the KV pool in tokens).
const (
	waitingMetric   = "vllm:num_requests_waiting"
	runningMetric   = "vllm:num_requests_running"
	kvUsageMetric   = "vllm:kv_cache_usage_perc"
	kvUsageMetricV0 = "vllm:gpu_cache_usage_perc"

	sglangWaitingMetric = "sglang:num_queue_reqs"
	sglangRunningMetric = "sglang:num_running_reqs"
	sglangUsageMetric   = "sglang:token_usage"
	sglangTokensMetric  = "sglang:max_total_num_tokens"
)

// usageSample parses a KV-usage sample line: a fraction in [0, 1] (values
// outside are clamped; unparsable ones ignored).
func usageSample(line []byte) (float64, bool) {
	var rest []byte
	switch {
	case bytes.HasPrefix(line, []byte(kvUsageMetric)):
		rest = line[len(kvUsageMetric):]
	case bytes.HasPrefix(line, []byte(kvUsageMetricV0)):
		rest = line[len(kvUsageMetricV0):]
	case bytes.HasPrefix(line, []byte(sglangUsageMetric)):
		rest = line[len(sglangUsageMetric):]
	default:
		return 0, false
	}
	if len(rest) == 0 || (rest[0] != '{' && rest[0] != ' ') {
		return 0, false
	}
	if rest[0] == '{' {
		end := bytes.LastIndexByte(rest, '}')
		if end < 0 {
			return 0, false
		}
		rest = rest[end+1:]
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil || f != f {
		return 0, false
	}
	return min(max(f, 0), 1), true
}

// loadSample parses a num_requests_waiting/running sample line: the metric
// name, optional labels, and a value (a float in the text format, rounded
// down; negative or unparsable values are ignored).
func loadSample(line []byte) (int64, string, bool) {
	var which string
	for _, m := range []string{waitingMetric, runningMetric, sglangWaitingMetric, sglangRunningMetric, sglangTokensMetric} {
		if bytes.HasPrefix(line, []byte(m)) {
			which = m
			break
		}
	}
	if which == "" {
		return 0, "", false
	}
	rest := line[len(which):]
	if len(rest) == 0 || (rest[0] != '{' && rest[0] != ' ') {
		return 0, "", false // a longer name, e.g. ..._waiting_by_reason
	}
	if rest[0] == '{' {
		end := bytes.LastIndexByte(rest, '}')
		if end < 0 {
			return 0, "", false
		}
		rest = rest[end+1:]
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 {
		return 0, "", false
	}
	f, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil || f < 0 || f != f {
		return 0, "", false
	}
	return int64(f), which, true
}

// maxMetricsLine bounds one exposition line.
const maxMetricsLine = 1 << 20

// ParseCacheConfig reads Prometheus text exposition and extracts every
// vllm:cache_config_info series: num_gpu_blocks summed per distinct
// "engine" label (the last series of an engine wins), block_size and
// prefix_caching_hash_algo; the queue and KV-usage gauges of vLLM or
// SGLang; SGLang's KV pool in tokens. Labels may come in any order with escaped
// values. Absent series give a zero CacheConfig and no error; a malformed
// cache_config_info line is an error wrapping ErrMalformed.
func ParseCacheConfig(r io.Reader) (CacheConfig, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxMetricsLine)
	perEngine := map[string]int64{}
	var cfg CacheConfig
	sizes := map[int]bool{}
	usageSum, usageN := 0.0, 0
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if u, ok := usageSample(line); ok {
			usageSum += u
			usageN++
			continue
		}
		if v, which, ok := loadSample(line); ok {
			switch which {
			case waitingMetric, sglangWaitingMetric:
				cfg.HasLoad = true
				cfg.Waiting += v
			case runningMetric, sglangRunningMetric:
				cfg.HasLoad = true
				cfg.Running += v
			case sglangTokensMetric:
				cfg.KVTokens += v
			}
			continue
		}
		name, rest, ok := bytes.Cut(line, []byte("{"))
		if ok && string(bytes.TrimSpace(name)) == loraInfoMetric {
			cfg.LoRA.take(rest)
			continue
		}
		if !ok || string(bytes.TrimSpace(name)) != cacheConfigMetric {
			continue
		}
		labels, err := parseLabels(rest)
		if err != nil {
			return CacheConfig{}, fmt.Errorf("%s: %w", cacheConfigMetric, err)
		}
		cfg.Engines++
		if v, ok := labels["num_gpu_blocks"]; ok && v != "" && v != "None" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return CacheConfig{}, fmt.Errorf("%s: num_gpu_blocks %q: %w", cacheConfigMetric, v, ErrMalformed)
			}
			perEngine[labels["engine"]] = n
		}
		if v, ok := labels["block_size"]; ok && v != "" && v != "None" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return CacheConfig{}, fmt.Errorf("%s: block_size %q: %w", cacheConfigMetric, v, ErrMalformed)
			}
			sizes[n] = true
		}
		if v := labels["prefix_caching_hash_algo"]; v != "" {
			cfg.HashAlgo = v
		}
	}
	if err := sc.Err(); err != nil {
		return CacheConfig{}, fmt.Errorf("metrics text: %w: %w", ErrMalformed, err)
	}
	for _, n := range perEngine {
		cfg.NumGPUBlocks += n
	}
	if usageN > 0 {
		cfg.KVUsage, cfg.HasKVUsage = usageSum/float64(usageN), true
	}
	if len(sizes) == 1 {
		for n := range sizes {
			cfg.BlockSize = n
		}
	}
	return cfg, nil
}

// parseLabels parses `k="v",k2="v2"} value` (the text after '{').
func parseLabels(s []byte) (map[string]string, error) {
	out := map[string]string{}
	i := 0
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}
		if i < len(s) && s[i] == '}' {
			return out, nil
		}
		eq := bytes.IndexByte(s[i:], '=')
		if eq <= 0 {
			return nil, fmt.Errorf("label without '=' at %q: %w", clip(s[i:]), ErrMalformed)
		}
		key := string(bytes.TrimSpace(s[i : i+eq]))
		i += eq + 1
		if i >= len(s) || s[i] != '"' {
			return nil, fmt.Errorf("label %s value not quoted: %w", key, ErrMalformed)
		}
		i++
		var v strings.Builder
		for {
			if i >= len(s) {
				return nil, fmt.Errorf("label %s value unterminated: %w", key, ErrMalformed)
			}
			c := s[i]
			i++
			if c == '"' {
				break
			}
			if c == '\\' && i < len(s) {
				switch s[i] {
				case 'n':
					c = '\n'
				default: // \\ and \"
					c = s[i]
				}
				i++
			}
			v.WriteByte(c)
		}
		out[key] = v.String()
	}
}

// loraInfoMetric is vLLM's LoRA gauge.
const loraInfoMetric = "vllm:lora_requests_info"

// take keeps the series in rest (the text after '{') when it is newer than
// the one kept. A malformed series is skipped.
func (l *LoRAInfo) take(rest []byte) {
	labels, err := parseLabels(rest)
	if err != nil {
		return
	}
	end := bytes.LastIndexByte(rest, '}')
	f := strings.Fields(string(rest[end+1:]))
	if len(f) == 0 {
		return
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || l.Known && v <= l.at {
		return
	}
	n, _ := strconv.Atoi(labels["max_lora"])
	*l = LoRAInfo{Known: true, Running: labels["running_lora_adapters"], Waiting: labels["waiting_lora_adapters"], MaxLoRA: n, at: v}
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// ScrapeCacheConfig GETs an engine's /metrics (metricsURL is the full URL)
// and parses it, reading at most maxBytes.
func ScrapeCacheConfig(ctx context.Context, client *http.Client, metricsURL string, maxBytes int64) (CacheConfig, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return CacheConfig{}, fmt.Errorf("scrape %s: %w: %w", metricsURL, ErrConfig, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return CacheConfig{}, fmt.Errorf("scrape %s: %w", metricsURL, ErrTimeout)
		}
		return CacheConfig{}, fmt.Errorf("scrape %s: %w: %w", metricsURL, ErrUpstream, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return CacheConfig{}, fmt.Errorf("scrape %s: engine answered %d %s: %w", metricsURL, resp.StatusCode, http.StatusText(resp.StatusCode), ErrUpstream)
	}
	body := io.LimitReader(resp.Body, maxBytes+1)
	cr := &countingReader{r: body}
	cfg, err := ParseCacheConfig(cr)
	if err == nil && cr.n > maxBytes {
		err = fmt.Errorf("metrics over %d bytes: %w", maxBytes, ErrMalformed)
	}
	if err != nil {
		return CacheConfig{}, fmt.Errorf("scrape %s: %w", metricsURL, err)
	}
	return cfg, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

// Read implements io.Reader.
func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Capacity poller defaults.
const (
	// DefaultCapacityMaxBytes bounds one /metrics body.
	DefaultCapacityMaxBytes = 8 << 20
)

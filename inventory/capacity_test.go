package inventory

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// vllmMetrics is shaped like a real vLLM V1 /metrics page.
const vllmMetrics = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-0.6B"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.042
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="27709",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256_cbor",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 12800.0
`

func TestParseCacheConfig_ReadsRealisticExpositions(t *testing.T) {
	tests := []struct {
		name string
		give string
		want CacheConfig
	}{
		{"vLLM V1 page", vllmMetrics, CacheConfig{NumGPUBlocks: 27709, BlockSize: 16, HashAlgo: "sha256_cbor", Engines: 1, Running: 3, HasLoad: true, KVUsage: 0.042, HasKVUsage: true}},
		{"llm-d-inference-sim", "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"64\"} 1\n", CacheConfig{NumGPUBlocks: 64, BlockSize: 16, Engines: 1}},
		{"labels in another order, escaped quotes and newline",
			`vllm:cache_config_info{model_name="a \"quoted\\ model\nx",num_gpu_blocks="100",engine="0",block_size="32",} 1` + "\n",
			CacheConfig{NumGPUBlocks: 100, BlockSize: 32, Engines: 1}},
		{"data-parallel engines are summed",
			"vllm:cache_config_info{engine=\"0\",num_gpu_blocks=\"1000\",block_size=\"16\"} 1\nvllm:cache_config_info{engine=\"1\",num_gpu_blocks=\"1200\",block_size=\"16\"} 1\n",
			CacheConfig{NumGPUBlocks: 2200, BlockSize: 16, Engines: 2}},
		{"a repeated engine counts once",
			"vllm:cache_config_info{engine=\"0\",num_gpu_blocks=\"1000\"} 1\nvllm:cache_config_info{engine=\"0\",num_gpu_blocks=\"1000\"} 1\n",
			CacheConfig{NumGPUBlocks: 1000, Engines: 2}},
		{"not profiled yet", "vllm:cache_config_info{num_gpu_blocks=\"None\",block_size=\"16\"} 1\n", CacheConfig{BlockSize: 16, Engines: 1}},
		{"no cache_config_info at all", "vllm:num_requests_running 0\n", CacheConfig{HasLoad: true}},
		{"queue gauges summed over engines; longer names and garbage ignored",
			"vllm:num_requests_waiting{engine=\"0\"} 4.0\nvllm:num_requests_waiting{engine=\"1\"} 2\nvllm:num_requests_waiting_by_reason{reason=\"capacity\"} 9\nvllm:num_requests_running{engine=\"0\"} NaN\nvllm:num_requests_running{engine=\"1\"} 7 1700000000\n",
			CacheConfig{Waiting: 6, Running: 7, HasLoad: true}},
		{"a similar name is not it", "vllm:cache_config_info_total{num_gpu_blocks=\"5\"} 1\n", CacheConfig{}},
		{"KV usage averaged over engines, V0's name too, clamped, garbage ignored",
			"vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\nvllm:gpu_cache_usage_perc{engine=\"1\"} 1.5\nvllm:kv_cache_usage_perc{engine=\"2\"} NaN\nvllm:kv_cache_usage_perc_max 0.9\n",
			CacheConfig{KVUsage: 0.75, HasKVUsage: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCacheConfig(strings.NewReader(tt.give))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v; want %+v", got, tt.want)
			}
			if got.Known() != (tt.want.NumGPUBlocks > 0) {
				t.Fatalf("Known() = %v", got.Known())
			}
		})
	}
}

func TestParseCacheConfig_RejectsMalformedSeries(t *testing.T) {
	for _, give := range []string{
		`vllm:cache_config_info{num_gpu_blocks="12x"} 1`,
		`vllm:cache_config_info{num_gpu_blocks="-3"} 1`,
		`vllm:cache_config_info{block_size="0"} 1`,
		`vllm:cache_config_info{num_gpu_blocks=12} 1`,
		`vllm:cache_config_info{num_gpu_blocks="12} 1`,
		`vllm:cache_config_info{oops} 1`,
	} {
		if _, err := ParseCacheConfig(strings.NewReader(give)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v; want ErrMalformed", give, err)
		}
	}
}

func TestScrapeCacheConfig_OverRealHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			io.WriteString(w, vllmMetrics)
		case "/huge":
			io.WriteString(w, strings.Repeat("# padding line\n", 1000))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	got, err := ScrapeCacheConfig(ctx, srv.Client(), srv.URL+"/metrics", 1<<20)
	if err != nil || got.NumGPUBlocks != 27709 {
		t.Fatalf("got %+v, %v; want 27709 blocks", got, err)
	}
	if _, err := ScrapeCacheConfig(ctx, srv.Client(), srv.URL+"/nope", 1<<20); !errors.Is(err, ErrUpstream) {
		t.Fatalf("404: got %v; want ErrUpstream", err)
	}
	if _, err := ScrapeCacheConfig(ctx, srv.Client(), srv.URL+"/huge", 100); !errors.Is(err, ErrMalformed) {
		t.Fatalf("oversized: got %v; want ErrMalformed", err)
	}
}

func TestCacheConfig_KVUsedBlocksIsUsageTimesCapacity(t *testing.T) {
	tests := []struct {
		name string
		give CacheConfig
		want int64
	}{
		{"rounded to the nearest block", CacheConfig{NumGPUBlocks: 27709, KVUsage: 0.042, HasKVUsage: true}, 1164},
		{"usage unknown", CacheConfig{NumGPUBlocks: 27709}, 0},
		{"capacity unknown", CacheConfig{KVUsage: 0.5, HasKVUsage: true}, 0},
		{"full", CacheConfig{NumGPUBlocks: 100, KVUsage: 1, HasKVUsage: true}, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.give.KVUsedBlocks(); got != tt.want {
				t.Fatalf("KVUsedBlocks() = %d; want %d", got, tt.want)
			}
		})
	}
}

// TestParseCacheConfig_SGLangMetrics reads SGLang's names: the queue and
// usage gauges, and the KV pool in tokens (summed over DP ranks), turned
// into blocks of the rule's page size.
func TestParseCacheConfig_SGLangMetrics(t *testing.T) {
	text := `# HELP sglang:max_total_num_tokens Maximum total number of tokens in the KV cache pool.
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="m",dp_rank="0"} 65536.0
sglang:max_total_num_tokens{model_name="m",dp_rank="1"} 65536.0
sglang:num_running_reqs{model_name="m",dp_rank="0"} 3.0
sglang:num_running_reqs{model_name="m",dp_rank="1"} 1.0
sglang:num_queue_reqs{model_name="m",dp_rank="0"} 2.0
sglang:token_usage{model_name="m",dp_rank="0"} 0.5
sglang:token_usage{model_name="m",dp_rank="1"} 0.25
`
	cc, err := ParseCacheConfig(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if cc.KVTokens != 131072 || cc.Running != 4 || cc.Waiting != 2 || !cc.HasLoad || !cc.HasKVUsage || cc.KVUsage != 0.375 || cc.Known() {
		t.Fatalf("parsed %+v", cc)
	}
	if b := cc.ForBlockSize(64); b.NumGPUBlocks != 2048 || !b.Known() || b.KVUsedBlocks() != 768 {
		t.Fatalf("for page size 64: %+v", b)
	}
}

func TestParseCacheConfig_LoRAInfoTakesTheNewestSeries(t *testing.T) {
	text := `# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="",running_lora_adapters="sql"} 1.7e9
vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="chat",running_lora_adapters="sql,fr"} 1.700000005e9
vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="",running_lora_adapters=""} 1.700000002e9
`
	cfg, err := ParseCacheConfig(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.LoRA; !l.Known || l.Running != "sql,fr" || l.Waiting != "chat" || l.MaxLoRA != 2 {
		t.Errorf("LoRA = %+v; want the newest series (sql,fr / chat / 2)", l)
	}
	cfg, _ = ParseCacheConfig(strings.NewReader("vllm:num_requests_waiting 0\n"))
	if cfg.LoRA.Known {
		t.Errorf("no gauge: %+v; want unknown", cfg.LoRA)
	}
}

// CacheConfig / SchedulerConfig validation and the kv_cache_dtype_skip_layers parser: every
// rejected value names its flag; accepted edge values pass.
#include <catch2/catch.hpp>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/engine_config.h"
#include "config/generate_config.h"

using namespace octet;
using Catch::Matchers::Contains;

TEST_CASE("CacheConfig defaults and accepted values validate", "[engine_config]") {
  CacheConfig c;
  CHECK_NOTHROW(c.validate());
  for (const char* d : {"auto", "bf16", "bfloat16", "fp16", "float16", "half", "fp8", "fp8_e4m3",
                        "fp8_e5m2"}) {
    c.kv_cache_dtype = d;
    CHECK_NOTHROW(c.validate());
  }
  for (int64_t bs : {1, 2, 16, 1024}) {
    c.block_size = bs;
    CHECK_NOTHROW(c.validate());
  }
  c.num_kv_blocks = 2;
  c.kv_cache_memory_bytes = 123;
  c.kv_cache_dtype_skip_layers = "0, 5,sliding_window";
  CHECK_NOTHROW(c.validate());
}

TEST_CASE("CacheConfig rejects bad values, naming the flag", "[engine_config]") {
  CacheConfig c;
  c.kv_cache_dtype = "fp4";
  CHECK_THROWS_WITH(c.validate(), Contains("--kv-cache-dtype") && Contains("fp4"));
  c.kv_cache_dtype = "FP8";  // case-sensitive, as vLLM
  CHECK_THROWS_AS(c.validate(), std::invalid_argument);

  for (int64_t bs : {0, -16, 3, 24, 2048}) {
    CacheConfig b;
    b.block_size = bs;
    CHECK_THROWS_WITH(b.validate(), Contains("--block-size"));
  }
  CacheConfig m;
  m.kv_cache_memory_bytes = -1;
  CHECK_THROWS_WITH(m.validate(), Contains("--kv-cache-memory-bytes"));
  for (int64_t n : {-1, 1}) {
    CacheConfig k;
    k.num_kv_blocks = n;
    CHECK_THROWS_WITH(k.validate(), Contains("--num-kv-blocks"));
  }
  CacheConfig s;
  s.kv_cache_dtype_skip_layers = "0,x";
  CHECK_THROWS_WITH(s.validate(), Contains("--kv-cache-dtype-skip-layers"));
}

TEST_CASE("KVSkipLayers::parse", "[engine_config]") {
  KVSkipLayers a = KVSkipLayers::parse("0,5,sliding_window");
  CHECK(a.layers == std::vector<int64_t>{0, 5});
  CHECK(a.sliding_window);

  KVSkipLayers b = KVSkipLayers::parse(" 7 , 3,7 ,12");  // spaces; sorted, duplicates dropped
  CHECK(b.layers == std::vector<int64_t>{3, 7, 12});
  CHECK_FALSE(b.sliding_window);

  KVSkipLayers c = KVSkipLayers::parse("sliding_window");
  CHECK(c.layers.empty());
  CHECK(c.sliding_window);

  for (const char* empty : {"", "  "}) {
    KVSkipLayers e = KVSkipLayers::parse(empty);
    CHECK(e.layers.empty());
    CHECK_FALSE(e.sliding_window);
  }

  for (const char* bad : {"-1", "1.5", "a", "1,,2", ",", "3,", "Sliding_Window", "sliding",
                          "1 2", "+3", "99999999999999999999"}) {
    INFO(bad);
    CHECK_THROWS_AS(KVSkipLayers::parse(bad), std::invalid_argument);
  }
  CHECK(KVSkipLayers::parse("9223372036854775807").layers ==
        std::vector<int64_t>{9223372036854775807LL});
}

TEST_CASE("SchedulerConfig validation", "[engine_config]") {
  SchedulerConfig d;
  CHECK_NOTHROW(d.validate());
  d.scheduling_policy = "priority";
  CHECK_NOTHROW(d.validate());

  SchedulerConfig s;
  s.max_num_seqs = 0;
  CHECK_THROWS_WITH(s.validate(), Contains("--max-num-seqs"));
  s = SchedulerConfig{};
  s.max_num_batched_tokens = 0;
  CHECK_THROWS_WITH(s.validate(), Contains("--max-num-batched-tokens"));
  s = SchedulerConfig{};
  s.max_model_len = -1;
  CHECK_THROWS_WITH(s.validate(), Contains("--max-model-len"));
  s = SchedulerConfig{};
  s.scheduling_policy = "lifo";
  CHECK_THROWS_WITH(s.validate(), Contains("--scheduling-policy") && Contains("lifo"));

  // Without chunked prefill a whole max_model_len prompt must fit one step (vLLM's rule).
  s = SchedulerConfig{};
  s.enable_chunked_prefill = false;
  s.max_num_batched_tokens = 512;
  s.max_model_len = 1024;
  CHECK_THROWS_WITH(s.validate(), Contains("--max-num-batched-tokens"));
  s.max_model_len = 512;
  CHECK_NOTHROW(s.validate());
  s.max_model_len = 0;  // resolved from the model at start-up, checked again there
  CHECK_NOTHROW(s.validate());
  s.enable_chunked_prefill = true;
  s.max_model_len = 1024;
  CHECK_NOTHROW(s.validate());
}

TEST_CASE("perplexity: KV options need --kv-cache-dtype and exclude --compare",
          "[engine_config]") {
  PerplexityConfig c;
  c.model = "m.gguf";
  c.text = "t.txt";
  CHECK_NOTHROW(c.validate());
  c.calculate_kv_scales = true;
  CHECK_THROWS_WITH(c.validate(), Contains("need --kv-cache-dtype"));
  c.kv_cache_dtype = "fp8";
  CHECK_NOTHROW(c.validate());
  c.compare = true;
  CHECK_THROWS_WITH(c.validate(), Contains("--compare"));
}

TEST_CASE("engine options are capped where int32 ids and positions end", "[engine_config]") {
  using Catch::Matchers::Contains;
  CacheConfig k;
  k.num_kv_blocks = CacheConfig::kMaxNumKVBlocks;
  CHECK_NOTHROW(k.validate());
  k.num_kv_blocks = CacheConfig::kMaxNumKVBlocks + 1;
  CHECK_THROWS_WITH(k.validate(), Contains("--num-kv-blocks"));
  CacheConfig m;
  m.kv_cache_memory_bytes = CacheConfig::kMaxMemoryBytes;
  CHECK_NOTHROW(m.validate());
  m.kv_cache_memory_bytes = std::numeric_limits<int64_t>::max();
  CHECK_THROWS_WITH(m.validate(), Contains("--kv-cache-memory-bytes"));
  SchedulerConfig s;
  s.max_model_len = int64_t{1} << 31;  // one past INT32_MAX
  CHECK_THROWS_WITH(s.validate(), Contains("--max-model-len"));
  s.max_model_len = SchedulerConfig::kMaxTokens;
  s.max_num_batched_tokens = SchedulerConfig::kMaxTokens;
  CHECK_NOTHROW(s.validate());
  s.max_num_batched_tokens = std::numeric_limits<int64_t>::max();
  CHECK_THROWS_WITH(s.validate(), Contains("--max-num-batched-tokens"));
  SchedulerConfig q;
  q.max_num_seqs = std::numeric_limits<int64_t>::max();
  CHECK_THROWS_WITH(q.validate(), Contains("--max-num-seqs"));
}

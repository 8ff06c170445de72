// --kv-cache-dtype fp8_per_token_head through the engine on the real stories260K model (5
// layers, 4 KV heads, head_dim 8): batch invariance (a request alone equals its output in a
// batch of 16), the page size counting the scales, the start-up table, and the errors.
#include <catch2/catch.hpp>
#include <random>
#include <string>

#include "engine/engine.h"
#include "engine/kv_cache_setup.h"
#include "engine/model_loader.h"
#include "engine_test_support.h"
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::collect;
using testing::Result;
using testing::stories;
using testing::stories_model;

std::vector<std::vector<int32_t>> make_prompts(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p(3 + rng() % 120);
    for (int32_t& t : p) t = static_cast<int32_t>(3 + rng() % 500);
    prompts.push_back(p);
  }
  return prompts;
}

SamplingParams params_for(int i) {
  SamplingParams p;
  p.max_tokens = 12 + i % 5;
  p.ignore_eos = true;
  p.logprobs = 3;
  if (i % 2 == 0) {
    p.temperature = 0.0f;
  } else {
    p.temperature = 0.9f;
    p.seed = 1000 + i;
  }
  return p;
}

}  // namespace

TEST_CASE("per-token-head KV: a request is bit-identical alone and in a batch of 16",
          "[engine][token_scale]") {
  auto engine = Engine::create(testing::engine_args(
      stories(),
      {.kv_cache_dtype = "fp8_per_token_head", .num_kv_blocks = 256, .max_model_len = 512}));
  const auto prompts = make_prompts(16, 5);
  std::vector<Result> solo;
  for (int target : {2, 5, 9})
    solo.push_back(collect(*engine->add_request("solo" + std::to_string(target), prompts[target],
                                                params_for(target))));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 16; ++i)
    streams.push_back(engine->add_request("b" + std::to_string(i), prompts[i], params_for(i)));
  std::vector<Result> batch;
  for (auto& s : streams) batch.push_back(collect(*s));
  int k = 0;
  for (int target : {2, 5, 9}) {
    INFO("request " << target);
    const Result &x = solo[k++], &y = batch[target];
    testing::require_same_logprobs(x, y);
  }
  for (int i = 0; i < 16; ++i) CHECK(batch[i].token_ids.size() == 12u + i % 5);
}

TEST_CASE("per-token-head KV: page size counts the scales, the table says dynamic",
          "[engine][token_scale]") {
  CacheConfig c;
  c.kv_cache_dtype = "fp8_per_token_head";
  c.num_kv_blocks = 40;
  const KVCacheSetup s = setup_kv_cache(c, 512, stories_model());
  // Per layer and token: K and V, 4 heads x (8 one-byte codes + one 4-byte scale) = 96 bytes;
  // 5 layers, 16 tokens per block.
  CHECK(s.bytes_per_block == 16 * 5 * 2 * 4 * (8 + 4));
  for (const KVLayerSpec& l : s.layers) {
    CHECK(l.per_token_head);
    CHECK(l.dtype == DType::FP8_E4M3);
    CHECK(l.scale_source == "per-token-head");
  }
  CHECK(s.report.find("dynamic              dynamic              per-token-head") !=
        std::string::npos);
  // Skip layers stay bf16 without token scales.
  c.kv_cache_dtype_skip_layers = "0";
  const KVCacheSetup t = setup_kv_cache(c, 512, stories_model());
  CHECK(!t.layers[0].per_token_head);
  CHECK(t.bytes_per_block == 16 * (4 * 2 * 4 * (8 + 4) + 2 * 4 * 8 * 2));
  // The prefix-cache salt differs from plain fp8_e4m3 with unit scales.
  CacheConfig u;
  u.kv_cache_dtype = "fp8_e4m3";
  u.num_kv_blocks = 40;
  CHECK(setup_kv_cache(u, 512, stories_model()).cache_salt != s.cache_salt);
}

TEST_CASE("per-token-head KV: --kv-scales-path is a clear error", "[engine][token_scale]") {
  CacheConfig c;
  c.kv_cache_dtype = "fp8_per_token_head";
  c.kv_scales_path = "/nonexistent/scales.json";
  c.num_kv_blocks = 40;
  REQUIRE_THROWS_WITH(c.validate(), Catch::Contains("--kv-scales-path cannot be used with "
                                                    "--kv-cache-dtype fp8_per_token_head"));
  REQUIRE_THROWS_WITH(setup_kv_cache(c, 512, stories_model()),
                      Catch::Contains("cannot be used with --kv-cache-dtype fp8_per_token_head"));
}

}  // namespace octet

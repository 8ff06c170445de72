// KV cache start-up: per-layer dtypes, capacity from a budget, scale sources and the errors
// for bad configuration (issue 4 items 1-2), on the real stories260K model (5 layers, 4 KV
// heads, head_dim 8, context 2048); most cases use max_model_len 512.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>

#include "engine/kv_cache_setup.h"
#include "engine/model_loader.h"
#include "models/kv_scales.h"
#include "gguf_writer.h"

namespace octet {
namespace {

const LoadedModel& stories() {
  static std::unique_ptr<LoadedModel> m = load_model(
      std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf", make_load_options("auto", "channel"));
  return *m;
}

// Bytes per token of one layer, K and V: 2 * num_kv_heads (4) * head_dim (8) * element bytes.
constexpr int64_t kLayerTokenBytesFp8 = 2 * 4 * 8 * 1;
constexpr int64_t kLayerTokenBytesBf16 = 2 * 4 * 8 * 2;

CacheConfig cache_with(const std::string& dtype, int64_t budget_bytes) {
  CacheConfig c;
  c.kv_cache_dtype = dtype;
  c.kv_cache_memory_bytes = budget_bytes;
  c.calculate_kv_scales = true;
  return c;
}

}  // namespace

TEST_CASE("kv setup: fp8 holds exactly twice the tokens of bf16 in the same budget", "[kv]") {
  const int64_t budget = 5 * kLayerTokenBytesBf16 * 16 * 40;  // 40 bf16 blocks of 16 tokens
  const KVCacheSetup bf16 = setup_kv_cache(cache_with("bf16", budget), 512, stories());
  const KVCacheSetup fp8 = setup_kv_cache(cache_with("fp8", budget), 512, stories());
  CHECK(bf16.bytes_per_block == 5 * kLayerTokenBytesBf16 * 16);
  CHECK(fp8.bytes_per_block == 5 * kLayerTokenBytesFp8 * 16);
  CHECK(bf16.num_usable_blocks == 40);
  CHECK(fp8.num_usable_blocks == 80);
  CHECK(fp8.num_usable_blocks * fp8.block_size == 2 * bf16.num_usable_blocks * bf16.block_size);
  for (const KVLayerSpec& s : fp8.layers) CHECK(s.dtype == DType::FP8_E4M3);
  for (const KVLayerSpec& s : bf16.layers) CHECK(s.dtype == DType::BF16);
  // "auto" is bf16; e5m2 is one byte too.
  CHECK(setup_kv_cache(cache_with("auto", budget), 512, stories()).num_usable_blocks == 40);
  CHECK(setup_kv_cache(cache_with("fp8_e5m2", budget), 512, stories()).num_usable_blocks == 80);
}

TEST_CASE("kv setup: skipped layers stay bf16 and the budget counts their real bytes", "[kv]") {
  CacheConfig c = cache_with("fp8_e4m3", 1 << 20);
  c.kv_cache_dtype_skip_layers = "0,3";
  const KVCacheSetup s = setup_kv_cache(c, 512, stories());
  REQUIRE(s.layers.size() == 5);
  CHECK(s.layers[0].dtype == DType::BF16);
  CHECK(s.layers[1].dtype == DType::FP8_E4M3);
  CHECK(s.layers[2].dtype == DType::FP8_E4M3);
  CHECK(s.layers[3].dtype == DType::BF16);
  CHECK(s.layers[4].dtype == DType::FP8_E4M3);
  // Per block: 16 tokens * (2 bf16 layers * 128 B + 3 fp8 layers * 64 B) = 7168 B.
  CHECK(s.bytes_per_block == 16 * (2 * kLayerTokenBytesBf16 + 3 * kLayerTokenBytesFp8));
  CHECK(s.bytes_per_block == 7168);
  CHECK(s.num_usable_blocks == (1 << 20) / 7168);
  CHECK(s.layers[0].scale_source == "-");
  CHECK(s.layers[1].scale_source == "calculated");
}

TEST_CASE("kv setup: budget in blocks, and a budget below one sequence is an error", "[kv]") {
  CacheConfig c;
  c.kv_cache_dtype = "bf16";
  c.num_kv_blocks = 128;  // 2048 tokens = one sequence of the model's full context
  CHECK(setup_kv_cache(c, 0, stories()).num_usable_blocks == 128);
  CHECK(setup_kv_cache(c, 0, stories()).max_model_len == 2048);
  c.num_kv_blocks = 127;
  CHECK_THROWS_WITH(setup_kv_cache(c, 0, stories()),
                    Catch::Contains("fewer than one sequence of max_model_len 2048"));
  CHECK(setup_kv_cache(c, 512, stories()).max_model_len == 512);  // a shorter limit fits
  c.num_kv_blocks = 31;
  CHECK_THROWS_WITH(setup_kv_cache(c, 512, stories()),
                    Catch::Contains("fewer than one sequence of max_model_len 512"));
  CHECK_THROWS_WITH(setup_kv_cache(c, 4096, stories()),
                    Catch::Contains("exceeds the model's context length of 2048"));
}

TEST_CASE("kv setup: configuration errors name the option", "[kv]") {
  CacheConfig c = cache_with("fp8", 1 << 20);
  c.kv_cache_dtype = "int8";
  CHECK_THROWS_WITH(setup_kv_cache(c, 512, stories()), Catch::Contains("--kv-cache-dtype"));
  c.kv_cache_dtype = "fp8";
  c.kv_cache_dtype_skip_layers = "5";
  CHECK_THROWS_WITH(setup_kv_cache(c, 512, stories()),
                    Catch::Contains("layer 5 is out of range") && Catch::Contains("0..4"));
  // No sliding-window layers: a warning, nothing skipped.
  c.kv_cache_dtype_skip_layers = "sliding_window";
  const KVCacheSetup s = setup_kv_cache(c, 512, stories());
  REQUIRE(s.warnings.size() == 1);
  CHECK_THAT(s.warnings[0], Catch::Contains("no sliding-window layers"));
  for (const KVLayerSpec& l : s.layers) CHECK(l.dtype == DType::FP8_E4M3);
}

TEST_CASE("kv setup: unit scales are a loud warning naming the layers", "[kv]") {
  CacheConfig c = cache_with("fp8", 1 << 20);
  c.calculate_kv_scales = false;
  c.kv_cache_dtype_skip_layers = "1";
  const KVCacheSetup s = setup_kv_cache(c, 512, stories());
  REQUIRE(s.warnings.size() == 1);
  CHECK_THAT(s.warnings[0], Catch::Contains("layers 0,2,3,4") && Catch::Contains("1.0"));
  CHECK(s.layers[0].k_scale == std::vector<float>(4, 1.0f));
  CHECK(s.layers[0].scale_source == "unit");
  CHECK_THAT(s.report, Catch::Contains("unit"));
}

TEST_CASE("kv setup: calibration ids are the text, then every special token", "[kv]") {
  const Tokenizer& tok = *stories().tokenizer;
  const std::vector<int32_t> text = tok.encode(kv_calibration_text(), true, false);
  const std::vector<int32_t> ids = kv_calibration_ids(tok, 512);
  REQUIRE(ids.size() > text.size());
  CHECK(std::equal(text.begin(), text.end(), ids.begin()));
  // stories260K's special tokens: <unk> 0, <s> 1, </s> 2, each followed by the filler line.
  std::vector<int32_t> specials;
  for (size_t i = text.size(); i < ids.size(); ++i)
    if (tok.is_special(ids[i])) specials.push_back(ids[i]);
  CHECK(specials == std::vector<int32_t>{0, 1, 2});
}

TEST_CASE("kv setup: calculated scales are amax / 224 (448 with 2x headroom) of the calibration K/V", "[kv]") {
  const KVCacheSetup s = setup_kv_cache(cache_with("fp8", 1 << 20), 512, stories());
  const LlamaModel& model = *stories().model;
  // Independent recomputation: the calibration ids through the dense forward, amax per head.
  std::vector<int32_t> ids = kv_calibration_ids(*stories().tokenizer, 512);
  if (ids.size() > 2048) ids.resize(2048);  // the model's context (not max_model_len 512)
  DenseKVCache dense = model.new_cache(static_cast<int64_t>(ids.size()));
  (void)model.forward(ids.data(), static_cast<int64_t>(ids.size()), 0, dense, false);
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t l = 0; l < 5; ++l)
    for (int64_t h = 0; h < 4; ++h) {
      float k_amax = 0, v_amax = 0;
      for (int64_t t = 0; t < n; ++t)
        for (int64_t d = 0; d < 8; ++d) {
          const int64_t i = ((l * n + t) * 4 + h) * 8 + d;
          k_amax = std::max(k_amax, std::fabs(dense.k[i]));
          v_amax = std::max(v_amax, std::fabs(dense.v[i]));
        }
      INFO("layer " << l << " head " << h);
      CHECK(s.layers[l].k_scale[h] == Approx(k_amax / 224.0f).epsilon(1e-6));
      CHECK(s.layers[l].v_scale[h] == Approx(v_amax / 224.0f).epsilon(1e-6));
    }
  CHECK(s.cache_salt != setup_kv_cache(cache_with("bf16", 1 << 20), 512, stories()).cache_salt);
  // The scales do not depend on max_model_len (they were computed from the first
  // max_model_len tokens of the text only: from 16 tokens with --max-model-len 16).
  const KVCacheSetup short_len = setup_kv_cache(cache_with("fp8", 1 << 20), 16, stories());
  for (int64_t l = 0; l < 5; ++l) {
    CHECK(short_len.layers[l].k_scale == s.layers[l].k_scale);
    CHECK(short_len.layers[l].v_scale == s.layers[l].v_scale);
  }
  CHECK(short_len.cache_salt == s.cache_salt);
}

TEST_CASE("kv setup: a scales file overrides and bad files are errors", "[kv]") {
  testing::TempDir dir;
  const std::string path = dir.file("scales.json");
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  CacheConfig c = cache_with("fp8", 1 << 20);
  c.kv_scales_path = path;
  write(R"({"layers": {"0": {"k_scale": 0.5, "v_scale": [0.1, 0.2, 0.3, 0.4]},
                       "1": {"k_scale": 1, "v_scale": 1}, "2": {"k_scale": 1, "v_scale": 1},
                       "3": {"k_scale": 1, "v_scale": 1}, "4": {"k_scale": 2, "v_scale": 3}}})");
  const KVCacheSetup s = setup_kv_cache(c, 512, stories());
  CHECK(s.layers[0].k_scale == std::vector<float>(4, 0.5f));
  CHECK(s.layers[0].v_scale == std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f});
  CHECK(s.layers[4].v_scale == std::vector<float>(4, 3.0f));
  CHECK(s.layers[0].scale_source == "file");
  // Wrong layer count, wrong head count, non-finite value.
  write(R"({"layers": {"0": {"k_scale": 1, "v_scale": 1}}})");
  CHECK_THROWS_WITH(setup_kv_cache(c, 512, stories()), Catch::Contains("layer"));
  write(R"({"layers": {"0": {"k_scale": [1, 1], "v_scale": 1}, "1": {"k_scale": 1, "v_scale": 1},
                       "2": {"k_scale": 1, "v_scale": 1}, "3": {"k_scale": 1, "v_scale": 1},
                       "4": {"k_scale": 1, "v_scale": 1}}})");
  CHECK_THROWS_WITH(setup_kv_cache(c, 512, stories()), Catch::Contains("head"));
  write(R"({"layers": {"0": {"k_scale": 1, "v_scale": 1}, "1": {"k_scale": 1, "v_scale": 1},
                       "2": {"k_scale": 1, "v_scale": -1}, "3": {"k_scale": 1, "v_scale": 1},
                       "4": {"k_scale": 1, "v_scale": 1}}})");
  CHECK_THROWS(setup_kv_cache(c, 512, stories()));
}

TEST_CASE("kv setup: a budget beyond the machine's memory is a clear error, not an OOM kill",
          "[kv]") {
  // 1 PB in bytes, and in blocks: no test machine has that much memory (before, the zero-fill
  // of the cache was left to the OOM killer, or std::bad_alloc's bare "out of memory").
  CacheConfig c = cache_with("bf16", int64_t{1} << 50);
  CHECK_THROWS_WITH(setup_kv_cache(c, 512, stories()),
                    Catch::Contains("bytes of memory available") &&
                        Catch::Contains("--kv-cache-memory-bytes"));
  c.kv_cache_memory_bytes = std::numeric_limits<int64_t>::max();
  CHECK_THROWS_WITH(setup_kv_cache(c, 512, stories()),
                    Catch::Contains("bytes of memory available"));
  c.kv_cache_memory_bytes = 0;
  c.num_kv_blocks = int64_t{1} << 40;
  CHECK_THROWS_WITH(setup_kv_cache(c, 512, stories()),
                    Catch::Contains("bytes of memory available"));
  // Blocks x bytes per block beyond 64 bits (it wrapped to a negative block count).
  c.num_kv_blocks = std::numeric_limits<int64_t>::max();
  CHECK_THROWS_WITH(setup_kv_cache(c, 512, stories()),
                    Catch::Contains("--num-kv-blocks") && Catch::Contains("overflow"));
}

}  // namespace octet

namespace octet {
TEST_CASE("kv setup: vLLM's dtype spellings map to the same layouts", "[kv]") {
  CHECK(parse_kv_cache_dtype("bfloat16") == DType::BF16);
  CHECK(parse_kv_cache_dtype("auto") == DType::BF16);
  CHECK(parse_kv_cache_dtype("float16") == DType::F16);
  CHECK(parse_kv_cache_dtype("half") == DType::F16);
  CHECK(parse_kv_cache_dtype("fp8") == DType::FP8_E4M3);
  CHECK(parse_kv_cache_dtype("fp8_e5m2") == DType::FP8_E5M2);
  CHECK_THROWS_WITH(parse_kv_cache_dtype("fp8_e4m3fn"), Catch::Contains("--kv-cache-dtype"));
}
}  // namespace octet

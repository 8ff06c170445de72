// --kv-cache-rotation hadamard (issue 13 item 4) on the real stories260K model (5 layers, 8
// query heads, 4 KV heads, head_dim 8): the cache holds H k / sqrt(8) (checked against a
// double-precision Hadamard product of the unrotated K written here), q.k is unchanged up to
// rounding (FP32 KV: logits within a stated bound, same greedy tokens; bf16 KV through the
// engine: same greedy tokens), FP8 E4M3 with rotation is batch invariant, and the start-up
// errors and warnings.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "config/engine_config.h"
#include "engine/calibrate.h"
#include "engine/engine.h"
#include "engine/kv_cache_setup.h"
#include "engine/model_loader.h"
#include "engine/sequence_forward.h"
#include "engine_test_support.h"
#include "gguf_writer.h"
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::collect;
using testing::random_prompt;
using testing::Result;
using testing::stories;
using testing::stories_model;

SamplingParams greedy_params(int64_t n) { return testing::greedy_params(n, /*logprobs=*/3); }

EngineArgs stories_args(const std::string& dtype, const std::string& rotation) {
  return testing::engine_args(
      stories(),
      {.device = "cpu",
       .kv_cache_dtype = dtype,
       .kv_cache_rotation = rotation,
       .calculate_kv_scales = dtype.rfind("fp8", 0) == 0 && dtype != kPerTokenHeadDtype,
       .num_kv_blocks = 256,
       .max_model_len = 512});
}

}  // namespace

TEST_CASE("kv rotation: the cache holds H k / sqrt(head_dim) and V unrotated", "[kv][rotation]") {
  const LoadedModel& m = stories_model();
  const ModelConfig& c = m.model->config();
  REQUIRE(c.head_dim == 8);
  const std::vector<int32_t> ids = random_prompt(40, 1);
  const auto n = static_cast<int64_t>(ids.size());
  std::vector<SequenceKVCache> plain = new_sequence_caches(m, n, false);
  std::vector<SequenceKVCache> rotated = new_sequence_caches(m, n, true);
  (void)forward_sequence(m, plain, ids.data(), n, 0, false);
  (void)forward_sequence(m, rotated, ids.data(), n, 0, false);
  const DenseKVCache a = download_sequence_kv(m, plain), b = download_sequence_kv(m, rotated);
  // Layer 0 sees the same input either way: its V is bit-identical and its K the Hadamard
  // product of the unrotated K (double reference; 3 butterfly levels + the scale: within
  // 5 * eps * sum |k| / sqrt(8), a factor 2 over the FP32 rounding bound).
  const int64_t hd = c.head_dim, rows = n * c.num_key_value_heads;
  const float eps = std::numeric_limits<float>::epsilon();
  int64_t checked = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double l1 = 0;
    for (int64_t j = 0; j < hd; ++j) l1 += std::fabs(a.k[r * hd + j]);
    for (int64_t i = 0; i < hd; ++i) {
      double ref = 0;
      for (int64_t j = 0; j < hd; ++j)
        ref += (std::popcount(static_cast<uint64_t>(i & j)) % 2 ? -1.0 : 1.0) * a.k[r * hd + j];
      ref /= std::sqrt(8.0);
      CHECK(std::fabs(b.k[r * hd + i] - ref) <= 5 * eps * l1 / std::sqrt(8.0));
      CHECK(b.v[r * hd + i] == a.v[r * hd + i]);
      ++checked;
    }
  }
  CHECK(checked == 40 * 4 * 8);
  // And the rotation did something: some K element of layer 0 differs by far more than rounding.
  double max_diff = 0;
  for (int64_t i = 0; i < rows * hd; ++i)
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(a.k[i] - b.k[i])));
  CHECK(max_diff > 0.1);
}

TEST_CASE("kv rotation: FP32 KV gives the same logits up to rounding and the same greedy tokens",
          "[kv][rotation]") {
  const LoadedModel& m = stories_model();
  const int64_t vocab = m.model->config().vocab_size;
  const std::vector<int32_t> ids = random_prompt(60, 2);
  const auto n = static_cast<int64_t>(ids.size());
  std::vector<SequenceKVCache> plain = new_sequence_caches(m, n + 20, false);
  std::vector<SequenceKVCache> rotated = new_sequence_caches(m, n + 20, true);
  const std::vector<float> la = forward_sequence(m, plain, ids.data(), n, 0, true);
  const std::vector<float> lb = forward_sequence(m, rotated, ids.data(), n, 0, true);
  REQUIRE(la.size() == static_cast<size_t>(n * vocab));
  REQUIRE(lb.size() == la.size());
  // q.k is unchanged in exact arithmetic; in FP32 each rotated q and k carries a relative
  // error of a few eps (3 levels + the scale) and the score's 8-term dot product is summed in
  // another order, so scores move by ~1e-6 relative, and through 5 layers of FP32 the logits
  // (|logit| < 30 here) by ~1e-5 absolute (5.7e-6 measured). Bound: 1e-4 (a wrong rotation,
  // e.g. a missing 1/sqrt(8) or q not rotated, moves logits by O(1)).
  double max_abs = 0, max_logit = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(la[i] - lb[i])));
    max_logit = std::max(max_logit, static_cast<double>(std::fabs(la[i])));
  }
  INFO("max |logit| " << max_logit << ", max |diff| " << max_abs);
  CHECK(max_logit < 30);
  CHECK(max_abs <= 1e-4);
  // Greedy decode of 20 tokens on each cache: the same tokens.
  auto greedy = [&](std::vector<SequenceKVCache>& cache, const std::vector<float>& prefill) {
    std::vector<int32_t> out;
    std::vector<float> logits(prefill.end() - vocab, prefill.end());
    for (int64_t i = 0; i < 20; ++i) {
      out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                         logits.begin()));
      logits = forward_sequence(m, cache, &out.back(), 1, n + i, false);
    }
    return out;
  };
  CHECK(greedy(plain, la) == greedy(rotated, lb));
}

TEST_CASE("kv rotation: bf16 KV through the engine stays within bf16's own rounding error",
          "[kv][rotation]") {
  // With bf16 KV the rotated K rounds differently, so greedy tokens of this tiny model can part
  // at near-ties; what rotation must not do is add error beyond bf16's own. bf16's rounding
  // error is measured against fp16 KV (8x finer mantissa): the prompt logprobs of bf16 KV with
  // rotation may differ from bf16 without it by at most 3x the bf16 vs fp16 difference (a
  // wrong rotation moves logprobs by O(1)).
  const std::vector<int32_t> ids = random_prompt(200, 7);
  auto prompt_logprobs = [&](const char* dtype, const char* rotation) {
    auto engine = Engine::create(stories_args(dtype, rotation));
    SamplingParams p = greedy_params(1);
    p.prompt_logprobs = 0;
    std::vector<TokenLogprobs> lp;
    auto stream = engine->add_request("r", ids, p);
    while (auto o = stream->next()) {
      REQUIRE(o->error.empty());
      lp.insert(lp.end(), o->prompt_logprobs.begin(), o->prompt_logprobs.end());
    }
    REQUIRE(lp.size() == ids.size());
    return lp;
  };
  const auto bf16 = prompt_logprobs("bf16", "none"), fp16 = prompt_logprobs("fp16", "none"),
             rotated = prompt_logprobs("bf16", "hadamard");
  double rounding = 0, rotation = 0;
  for (size_t i = 1; i < ids.size(); ++i) {
    rounding = std::max(rounding, static_cast<double>(std::fabs(bf16[i].logprob - fp16[i].logprob)));
    rotation = std::max(rotation, static_cast<double>(std::fabs(rotated[i].logprob -
                                                                bf16[i].logprob)));
  }
  INFO("max |logprob| change: bf16 vs fp16 KV " << rounding << ", bf16 rotated vs not "
                                                << rotation);
  CHECK(rounding > 0);
  CHECK(rotation > 0);  // the rotation ran (it changes bf16 rounding)
  CHECK(rotation <= 3 * rounding);
}

TEST_CASE("kv rotation: fp8_e4m3 with rotation is bit-identical alone and in a batch of 12",
          "[kv][rotation]") {
  auto engine = Engine::create(stories_args("fp8_e4m3", "hadamard"));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) prompts.push_back(random_prompt(3 + (i * 37) % 110, 100 + i));
  std::vector<Result> solo;
  for (int target : {1, 6, 10})
    solo.push_back(collect(*engine->add_request("solo" + std::to_string(target), prompts[target],
                                                greedy_params(10 + target % 3))));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 12; ++i)
    streams.push_back(engine->add_request("b" + std::to_string(i), prompts[i],
                                          greedy_params(10 + i % 3)));
  std::vector<Result> batch;
  for (auto& s : streams) batch.push_back(collect(*s));
  int k = 0;
  for (int target : {1, 6, 10}) {
    INFO("request " << target);
    const Result &x = solo[k++], &y = batch[target];
    testing::require_same_logprobs(x, y);
  }
}

TEST_CASE("kv rotation: setup marks every layer, salts the prefix cache and warns",
          "[kv][rotation]") {
  CacheConfig c;
  c.kv_cache_dtype = "fp8_e4m3";
  c.num_kv_blocks = 64;
  c.calculate_kv_scales = true;
  const KVCacheSetup off = setup_kv_cache(c, 512, stories_model());
  c.kv_cache_rotation = "hadamard";
  const KVCacheSetup on = setup_kv_cache(c, 512, stories_model());
  for (const KVLayerSpec& s : off.layers) CHECK_FALSE(s.hadamard_rotation);
  for (const KVLayerSpec& s : on.layers) CHECK(s.hadamard_rotation);
  CHECK(on.cache_salt != off.cache_salt);
  // Calculated scales come from the rotated K: different from the unrotated ones; V's equal.
  CHECK(on.layers[0].k_scale != off.layers[0].k_scale);
  CHECK(on.layers[0].v_scale == off.layers[0].v_scale);
  auto has = [](const KVCacheSetup& s, const std::string& text) {
    return std::any_of(s.warnings.begin(), s.warnings.end(), [&](const std::string& w) {
      return w.find(text) != std::string::npos;
    });
  };
  CHECK_FALSE(has(on, "--kv-cache-rotation"));  // calculated scales: nothing to warn about
  // Static scales from a file: a warning naming the file.
  testing::TempDir dir;
  const std::string path = dir.file("scales.json");
  std::ofstream(path) << R"({"layers": {"0": {"k_scale": 1, "v_scale": 1},
      "1": {"k_scale": 1, "v_scale": 1}, "2": {"k_scale": 1, "v_scale": 1},
      "3": {"k_scale": 1, "v_scale": 1}, "4": {"k_scale": 1, "v_scale": 1}}})";
  c.calculate_kv_scales = false;
  c.kv_scales_path = path;
  const KVCacheSetup file = setup_kv_cache(c, 512, stories_model());
  CHECK(has(file, "WARNING: --kv-cache-rotation hadamard with static k_scale from "
                  "--kv-scales-path " + path));
  c.kv_cache_rotation = "none";
  CHECK_FALSE(has(setup_kv_cache(c, 512, stories_model()), "--kv-cache-rotation"));
  // 16-bit KV: allowed, with a one-line note.
  CacheConfig b;
  b.kv_cache_dtype = "bf16";
  b.num_kv_blocks = 64;
  b.kv_cache_rotation = "hadamard";
  CHECK(has(setup_kv_cache(b, 512, stories_model()), "note: --kv-cache-rotation hadamard with "
                                                     "--kv-cache-dtype bf16"));
}

TEST_CASE("kv rotation: bad spellings and a non-power-of-two head_dim are start-up errors",
          "[kv][rotation]") {
  CacheConfig c;
  c.kv_cache_rotation = "hadamard";
  CHECK_NOTHROW(c.validate());
  c.kv_cache_rotation = "none";
  CHECK_NOTHROW(c.validate());
  c.kv_cache_rotation = "walsh";
  CHECK_THROWS_AS(c.validate(), std::invalid_argument);
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("--kv-cache-rotation must be none or hadamard"));
  CHECK(parse_kv_cache_rotation("none", 12) == false);
  CHECK(parse_kv_cache_rotation("hadamard", 64) == true);
  CHECK(parse_kv_cache_rotation("hadamard", 1) == true);
  for (int64_t hd : {int64_t{12}, int64_t{96}, int64_t{0}, int64_t{-8}}) {
    CAPTURE(hd);
    CHECK_THROWS_AS(parse_kv_cache_rotation("hadamard", hd), std::invalid_argument);
  }
  CHECK_THROWS_WITH(parse_kv_cache_rotation("hadamard", 96),
                    Catch::Contains("power-of-two head_dim") && Catch::Contains("96"));

  // A dummy model of head_dim 12 (hidden 48, 4 heads): the engine refuses to start.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("octet_rotation_hd12_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 48,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 64, "vocab_size": 512, "max_position_embeddings": 256})";
  EngineArgs a;
  a.model = dir.string();
  a.load_format = "dummy";
  a.tokenizer = stories();
  a.device = "cpu";
  a.cache.kv_cache_memory_bytes = 1 << 20;
  a.cache.kv_cache_rotation = "hadamard";
  CHECK_THROWS_WITH(Engine::create(a), Catch::Contains("--kv-cache-rotation hadamard needs a "
                                                       "power-of-two head_dim") &&
                                           Catch::Contains("12"));
  a.cache.kv_cache_rotation = "none";
  CHECK_NOTHROW(Engine::create(a));
  std::filesystem::remove_all(dir);
}

}  // namespace octet

namespace octet {

TEST_CASE("kv rotation: octet calibrate --kv-cache-rotation hadamard records rotated K amax",
          "[kv][rotation]") {
  const LoadedModel& m = stories_model();
  const std::vector<std::vector<int32_t>> samples = {random_prompt(64, 21), random_prompt(90, 22)};
  CalibrateOptions o;
  o.strategy = "attn_head";
  const KVCalibration plain = calibrate_kv_cache(m, samples, o, {});
  o.kv_cache_rotation = "hadamard";
  const KVCalibration rotated = calibrate_kv_cache(m, samples, o, {});
  // The amax of H k / sqrt(8) over the same K, by hand from an unrotated pass: every head's
  // rotated amax matches it; V is the same with or without rotation.
  const int64_t hd = 8, nkv = 4;
  std::vector<std::vector<float>> expect(5, std::vector<float>(nkv, 0.0f));
  for (const std::vector<int32_t>& ids : samples) {
    const auto n = static_cast<int64_t>(ids.size());
    std::vector<SequenceKVCache> seq = new_sequence_caches(m, n, false);
    (void)forward_sequence(m, seq, ids.data(), n, 0, false);
    const DenseKVCache kv = download_sequence_kv(m, seq);
    for (int64_t l = 0; l < 5; ++l)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t h = 0; h < nkv; ++h) {
          const float* k = kv.k.data() + ((l * kv.max_tokens + t) * nkv + h) * hd;
          for (int64_t i = 0; i < hd; ++i) {
            double y = 0;
            for (int64_t j = 0; j < hd; ++j)
              y += (std::popcount(static_cast<uint64_t>(i & j)) % 2 ? -1.0 : 1.0) * k[j];
            expect[l][h] = std::max(expect[l][h], static_cast<float>(std::fabs(y) / std::sqrt(8.0)));
          }
        }
  }
  bool any_differs = false;
  for (int64_t l = 0; l < 5; ++l)
    for (int64_t h = 0; h < nkv; ++h) {
      CAPTURE(l, h);
      // Layer 0's K are exact either way; deeper layers see rounding-level differences.
      CHECK(std::fabs(rotated.k_amax[l][h] - expect[l][h]) <= 1e-4f * expect[l][h]);
      CHECK(std::fabs(rotated.v_amax[l][h] - plain.v_amax[l][h]) <= 1e-4f * plain.v_amax[l][h]);
      any_differs |= std::fabs(rotated.k_amax[l][h] - plain.k_amax[l][h]) > 1e-2f * plain.k_amax[l][h];
    }
  CHECK(any_differs);
  o.kv_cache_rotation = "givens";
  CHECK_THROWS_WITH(validate_calibrate_options(o), Catch::Contains("--kv-cache-rotation"));
}

}  // namespace octet

// FP8 KV clipping visibility (issue 13 item 6): the float and stored-code counts on hand-built
// values, the serving-time sampler reading back a cache written with known K/V, the engine's
// counters, and the start-up clipping warning, on the real stories260K model (5 layers, 4 KV
// heads, head_dim 8). Expected counts are worked out by hand from E4M3/E5M2's ranges:
// E4M3 max 448, clip point 464 (448 + half its 32 step), min normal 2^-6, min subnormal 2^-9;
// E5M2 max 57344, clip point 61440, min normal 2^-14, min subnormal 2^-16.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_cache_manager.h"
#include "engine/kv_cache_setup.h"
#include "engine/kv_saturation.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler_output.h"
#include "gguf_writer.h"
#include "models/kv_scales.h"
#include "models/paged_kv_cache.h"
#include "engine_test_support.h"
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::stories_model;

KVLayerSpec fp8_layer(DType d, float scale) {
  KVLayerSpec s;
  s.dtype = d;
  s.k_scale = s.v_scale = std::vector<float>(4, scale);
  s.scale_source = "file";
  return s;
}

// A scales file for stories260K: every layer k_scale = v_scale = 1 except `layer`'s k_scale.
std::string scales_json(int layer, float k_scale) {
  std::string s = "{\"layers\": {";
  for (int l = 0; l < 5; ++l)
    s += (l ? ", \"" : "\"") + std::to_string(l) + "\": {\"k_scale\": " +
         (l == layer ? std::to_string(k_scale) : std::string("1")) + ", \"v_scale\": 1}";
  return s + "}}";
}

}  // namespace

TEST_CASE("kv saturation: float values that clip or underflow, counted by hand", "[kv][saturation]") {
  // Scale 1, E4M3: 500, -1000 and 464 clip (>= 464); 463.9 and 448 round to 448 and do not;
  // 1e-4 flushes to 0 (< 2^-10, half the smallest subnormal) and 2^-7 is subnormal: both
  // underflow; 0 is not counted (nothing is lost); 2^-6 is the smallest normal.
  const std::vector<float> x = {500.0f, -1000.0f, 464.0f, 463.9f, 448.0f, 1.0f,
                                1e-4f,  0x1p-7f,  0.0f,   0x1p-6f, -3.5f};
  KVClipCounts c = count_kv_clipping(x.data(), static_cast<int64_t>(x.size()), 1.0f,
                                     DType::FP8_E4M3);
  CHECK(c.values == 11);
  CHECK(c.clipped == 3);
  CHECK(c.underflow == 2);
  CHECK(c.amax == 1000.0f);
  // Scale 2: only -1000 (-> -500) clips; 1e-4, 2^-7 and 2^-6 (-> 2^-7) underflow.
  c = count_kv_clipping(x.data(), static_cast<int64_t>(x.size()), 2.0f, DType::FP8_E4M3);
  CHECK(c.clipped == 1);
  CHECK(c.underflow == 3);
  // Values in range: nothing.
  const std::vector<float> ok = {0.5f, -200.0f, 447.0f, 0.03125f, -0.0625f};
  c = count_kv_clipping(ok.data(), 5, 1.0f, DType::FP8_E4M3);
  CHECK(c.clipped == 0);
  CHECK(c.underflow == 0);
  // E5M2, scale 1: 70000 clips (>= 61440), 61000 does not; 1e-6 flushes (< 2^-17), 3e-5 is
  // subnormal (< 2^-14 = 6.1e-5), 2^-14 is normal.
  const std::vector<float> e5 = {70000.0f, 61000.0f, 1e-6f, 3e-5f, 0x1p-14f};
  c = count_kv_clipping(e5.data(), 5, 1.0f, DType::FP8_E5M2);
  CHECK(c.clipped == 1);
  CHECK(c.underflow == 2);
}

TEST_CASE("kv saturation: stored codes at +-max and zero/subnormal codes", "[kv][saturation]") {
  // E4M3: 0x7E = 448, 0xFE = -448, 0x7D = 416, 0x00 / 0x80 = +-0, 0x01 and 0x87 subnormal,
  // 0x08 = 2^-6 (smallest normal), 0x7F NaN, 0x3C = 1.5.
  const std::vector<uint8_t> e4 = {0x7E, 0xFE, 0x7D, 0x00, 0x80, 0x01, 0x87, 0x08, 0x7F, 0x3C};
  FP8CodeCounts c = count_fp8_codes(e4.data(), 10, DType::FP8_E4M3);
  CHECK(c.values == 10);
  CHECK(c.saturated == 2);
  CHECK(c.underflow == 4);
  // E5M2: 0x7B = 57344, 0xFB = -57344, 0x7C = inf (never stored: satfinite), 0x03 subnormal,
  // 0x04 = 2^-14 (smallest normal), 0x00 zero.
  const std::vector<uint8_t> e5 = {0x7B, 0xFB, 0x7C, 0x03, 0x04, 0x00};
  c = count_fp8_codes(e5.data(), 6, DType::FP8_E5M2);
  CHECK(c.saturated == 2);
  CHECK(c.underflow == 2);
}

TEST_CASE("kv saturation: the sampler counts exactly what a known write stored", "[kv][saturation]") {
  const LoadedModel& loaded = stories_model();
  const LlamaModel& model = *loaded.model;
  // Layer 0: E4M3 scale 1; 1: per-token-head (not counted); 2: E4M3 scale 2; 3: bf16 (not
  // counted); 4: E5M2 scale 1.
  std::vector<KVLayerSpec> layers = {fp8_layer(DType::FP8_E4M3, 1.0f),
                                     fp8_layer(DType::FP8_E4M3, 1.0f),
                                     fp8_layer(DType::FP8_E4M3, 2.0f), KVLayerSpec{},
                                     fp8_layer(DType::FP8_E5M2, 1.0f)};
  layers[1].per_token_head = true;
  constexpr int64_t kBlock = 4, kRow = 4 * 8;
  PagedKVCache cache(model.backend(), 8, kBlock, 4, 8, layers);
  ModelRunner runner(model, cache);
  KVCacheManager kv(8, kBlock, false, 0, 64);
  Request r;
  r.request_id = "r";
  r.prompt_token_ids = std::vector<int32_t>(6, 5);
  REQUIRE(kv.allocate_slots(r, 6));
  const std::vector<int32_t>& blocks = kv.get_block_ids("r");
  std::vector<int64_t> slots;
  for (int64_t p = 0; p < 6; ++p) slots.push_back(blocks[p / kBlock] * kBlock + p % kBlock);
  // K, V: [6 tokens, 4 heads x 8] of 1.0, with planted values at token 4 (K: 500, -1000, 1e-4,
  // 0; V: 440) and token 0 (K: 900, seen only when every token is sampled).
  std::vector<float> k(6 * kRow, 1.0f), v(6 * kRow, 1.0f);
  k[4 * kRow + 0] = 500.0f, k[4 * kRow + 9] = -1000.0f, k[4 * kRow + 17] = 1e-4f;
  k[4 * kRow + 31] = 0.0f, v[4 * kRow + 3] = 440.0f, k[0 * kRow + 5] = 900.0f;
  for (int64_t l = 0; l < 5; ++l)
    model.backend().write_kv_cache(cache.layer(l), k.data(), v.data(), slots.data(), 6);
  SchedulerOutput out;
  out.scheduled = {&r};
  out.num_scheduled_tokens = {6};
  out.total_num_scheduled_tokens = 6;

  SECTION("every token of the step") {
    KVSaturationSampler s(layers, /*every_steps=*/1, /*tokens_per_sample=*/8);
    REQUIRE(s.counts().size() == 3);  // layers 0, 2, 4
    s.after_step(out, kv, runner);
    const auto& c = s.counts();
    CHECK(c[0].layer == 0);
    CHECK(c[1].layer == 2);
    CHECK(c[2].layer == 4);
    for (const KVLayerSaturation& x : c) {
      CHECK(x.k_sampled == 6 * kRow);
      CHECK(x.v_sampled == 6 * kRow);
    }
    // E4M3 scale 1: 500, -1000, 900 stored at +-448; V 440 rounds to 448 (within half a step);
    // 1e-4 and 0 stored as code 0.
    CHECK(c[0].k_saturated == 3);
    CHECK(c[0].k_underflow == 2);
    CHECK(c[0].v_saturated == 1);
    CHECK(c[0].v_underflow == 0);
    // E4M3 scale 2: -1000 and 900 (-> -500, 450) at +-448; 500 -> 250 and V 440 -> 220 are
    // not; 1e-4 and 0 underflow, and 1.0 -> 0.5 is normal.
    CHECK(c[1].k_saturated == 2);
    CHECK(c[1].k_underflow == 2);
    CHECK(c[1].v_saturated == 0);
    // E5M2 scale 1: nothing near 57344; 1e-4 is normal (>= 2^-14 = 6.1e-5), 0 is zero.
    CHECK(c[2].k_saturated == 0);
    CHECK(c[2].k_underflow == 1);
    CHECK(c[2].v_saturated == 0);
    CHECK(c[2].v_underflow == 0);
  }

  SECTION("two tokens of six, every third step") {
    // Tokens (2j + 1) * 6 / 4 for j = 0, 1: positions 1 and 4 (not 0, whose 900 is missed).
    KVSaturationSampler s(layers, /*every_steps=*/3, /*tokens_per_sample=*/2);
    s.after_step(out, kv, runner);  // step 0: sampled
    CHECK(s.take_changed());
    CHECK(s.counts()[0].k_sampled == 2 * kRow);
    CHECK(s.counts()[0].k_saturated == 2);
    CHECK(s.counts()[0].k_underflow == 2);
    s.after_step(out, kv, runner);  // steps 1, 2: not sampled
    s.after_step(out, kv, runner);
    CHECK_FALSE(s.take_changed());
    CHECK(s.counts()[0].k_sampled == 2 * kRow);
    s.after_step(out, kv, runner);  // step 3: sampled
    CHECK(s.counts()[0].k_sampled == 4 * kRow);
    CHECK(s.counts()[0].k_saturated == 4);
  }

  SECTION("values in range count nothing") {
    std::vector<float> ok(6 * kRow, 0.75f);
    for (int64_t l = 0; l < 5; ++l)
      model.backend().write_kv_cache(cache.layer(l), ok.data(), ok.data(), slots.data(), 6);
    KVSaturationSampler s(layers, 1, 8);
    s.after_step(out, kv, runner);
    for (const KVLayerSaturation& x : s.counts()) {
      CHECK(x.k_sampled == 6 * kRow);
      CHECK(x.k_saturated + x.k_underflow + x.v_saturated + x.v_underflow == 0);
    }
  }
}

TEST_CASE("kv saturation: each sampled slot, layer and K or V is read from its own row",
          "[kv][saturation]") {
  // The sampler gathers the sampled rows of every layer's K and V on the device and downloads
  // them at once: a wrong slot, layer, K/V order, row width or a stale row of an earlier
  // sample changes these counts. Every layer E4M3 scale 1; all values 1.0 (counted as
  // neither) except, at layer l and position p of request r, l + 2p + 1 K values of 1000
  // (stored at 448: saturated) and 2l + p + 1 V values of 1e-5 (below half of E4M3's smallest
  // subnormal 2^-9: stored as 0, underflow). The other request's rows are all 1000 and
  // unwritten rows are all code 0, so reading either is seen.
  const LoadedModel& loaded = stories_model();
  const LlamaModel& model = *loaded.model;
  const std::vector<KVLayerSpec> layers(5, fp8_layer(DType::FP8_E4M3, 1.0f));
  constexpr int64_t kBlock = 4, kRow = 4 * 8, kBlocks = 16, kLen = 10;
  PagedKVCache cache(model.backend(), kBlocks, kBlock, 4, 8, layers);
  ModelRunner runner(model, cache);
  KVCacheManager kv(kBlocks, kBlock, false, 0, 64);
  Request other, r;
  other.request_id = "o";
  other.prompt_token_ids = std::vector<int32_t>(7, 5);
  r.request_id = "r";
  r.prompt_token_ids = std::vector<int32_t>(kLen, 5);
  REQUIRE(kv.allocate_slots(other, 7));  // takes the first blocks: r's slots are not positions
  REQUIRE(kv.allocate_slots(r, kLen));
  const auto slots_of = [&](const std::string& id, int64_t n) {
    const std::vector<int32_t>& blocks = kv.get_block_ids(id);
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < n; ++p) slots.push_back(blocks[p / kBlock] * kBlock + p % kBlock);
    return slots;
  };
  const std::vector<int64_t> r_slots = slots_of("r", kLen), o_slots = slots_of("o", 7);
  REQUIRE(r_slots[0] != 0);
  const std::vector<float> big(7 * kRow, 1000.0f);
  for (int64_t l = 0; l < 5; ++l) {
    std::vector<float> k(kLen * kRow, 1.0f), v(kLen * kRow, 1.0f);
    for (int64_t p = 0; p < kLen; ++p) {
      for (int64_t i = 0; i < l + 2 * p + 1; ++i) k[p * kRow + i] = 1000.0f;
      for (int64_t i = 0; i < 2 * l + p + 1; ++i) v[p * kRow + kRow - 1 - i] = 1e-5f;
    }
    model.backend().write_kv_cache(cache.layer(l), k.data(), v.data(), r_slots.data(), kLen);
    model.backend().write_kv_cache(cache.layer(l), big.data(), big.data(), o_slots.data(), 7);
  }
  KVSaturationSampler s(layers, /*every_steps=*/1, /*tokens_per_sample=*/3);
  REQUIRE(s.counts().size() == 5);

  // Step 1: r's 10 prompt tokens; tokens (2j + 1) * 10 / 6 for j < 3: positions 1, 5, 8.
  SchedulerOutput out;
  out.scheduled = {&r};
  out.num_scheduled_tokens = {kLen};
  out.total_num_scheduled_tokens = kLen;
  s.after_step(out, kv, runner);
  for (int64_t l = 0; l < 5; ++l) {
    INFO("layer " << l << ", first sample");
    const KVLayerSaturation& c = s.counts()[l];
    CHECK(c.layer == l);
    CHECK(c.k_sampled == 3 * kRow);
    CHECK(c.v_sampled == 3 * kRow);
    CHECK(c.k_saturated == (l + 3) + (l + 11) + (l + 17));  // p = 1, 5, 8
    CHECK(c.k_underflow == 0);
    CHECK(c.v_saturated == 0);
    CHECK(c.v_underflow == (2 * l + 2) + (2 * l + 6) + (2 * l + 9));
  }

  // Step 2: r's last two positions only (fewer slots than the first sample gathered):
  // tokens (2j + 1) * 2 / 4 for j < 2: positions 8 and 9, added to the first counts.
  r.num_computed_tokens = 8;
  out.num_scheduled_tokens = {2};
  out.total_num_scheduled_tokens = 2;
  s.after_step(out, kv, runner);
  for (int64_t l = 0; l < 5; ++l) {
    INFO("layer " << l << ", second sample");
    const KVLayerSaturation& c = s.counts()[l];
    CHECK(c.k_sampled == 5 * kRow);
    CHECK(c.k_saturated == (3 * l + 31) + (l + 17) + (l + 19));
    CHECK(c.k_underflow == 0);
    CHECK(c.v_saturated == 0);
    CHECK(c.v_underflow == (6 * l + 17) + (2 * l + 9) + (2 * l + 10));
  }

  // Step 3: both requests, 7 + 1 tokens: tokens (2j + 1) * 8 / 6 = 1, 4, 6 are o's (every
  // value 1000, in K and V).
  r.num_computed_tokens = 9;
  out.scheduled = {&other, &r};
  out.num_scheduled_tokens = {7, 1};
  out.total_num_scheduled_tokens = 8;
  const KVLayerSaturation before = s.counts()[2];
  s.after_step(out, kv, runner);
  const KVLayerSaturation& c = s.counts()[2];
  CHECK(c.k_saturated - before.k_saturated == 3 * kRow);
  CHECK(c.v_saturated - before.v_saturated == 3 * kRow);
  CHECK(c.v_underflow == before.v_underflow);
}

TEST_CASE("kv saturation: rows that are not whole FP32 words are read one by one",
          "[kv][saturation]") {
  // One KV head of 6 dims: a token's row is 6 bytes, not a whole number of the FP32 words
  // gather_rows moves, so each sampled row is downloaded on its own. Layer 0 E4M3, layer 1
  // E5M2, scale 1; values 1.0 except, at layer l and position p, l + p + 1 K values of 60000
  // (E4M3: 448, E5M2: 57344, both saturated) and l + p % 3 + 1 V values of 1e-9 (code 0 in
  // both formats: underflow).
  const LlamaModel& model = *stories_model().model;
  std::vector<KVLayerSpec> one_head = {fp8_layer(DType::FP8_E4M3, 1.0f),
                                       fp8_layer(DType::FP8_E5M2, 1.0f)};
  for (KVLayerSpec& l : one_head) l.k_scale = l.v_scale = {1.0f};
  constexpr int64_t kBlock = 4, kRow = 6, kLen = 5;
  PagedKVCache cache(model.backend(), 8, kBlock, 1, kRow, one_head);
  ModelRunner runner(model, cache);
  KVCacheManager kv(8, kBlock, false, 0, 64);
  Request other, r;
  other.request_id = "o";
  other.prompt_token_ids = std::vector<int32_t>(3, 5);
  r.request_id = "r";
  r.prompt_token_ids = std::vector<int32_t>(kLen, 5);
  REQUIRE(kv.allocate_slots(other, 3));
  REQUIRE(kv.allocate_slots(r, kLen));
  const std::vector<int32_t>& blocks = kv.get_block_ids("r");
  std::vector<int64_t> slots;
  for (int64_t p = 0; p < kLen; ++p) slots.push_back(blocks[p / kBlock] * kBlock + p % kBlock);
  for (int64_t l = 0; l < 2; ++l) {
    std::vector<float> k(kLen * kRow, 1.0f), v(kLen * kRow, 1.0f);
    for (int64_t p = 0; p < kLen; ++p) {
      for (int64_t i = 0; i < l + p + 1; ++i) k[p * kRow + i] = 60000.0f;
      for (int64_t i = 0; i < l + p % 3 + 1; ++i) v[p * kRow + kRow - 1 - i] = 1e-9f;
    }
    model.backend().write_kv_cache(cache.layer(l), k.data(), v.data(), slots.data(), kLen);
  }
  // Two tokens of five: (2j + 1) * 5 / 4 = positions 1 and 3.
  KVSaturationSampler s(one_head, /*every_steps=*/1, /*tokens_per_sample=*/2);
  SchedulerOutput out;
  out.scheduled = {&r};
  out.num_scheduled_tokens = {kLen};
  out.total_num_scheduled_tokens = kLen;
  s.after_step(out, kv, runner);
  REQUIRE(s.counts().size() == 2);
  for (int64_t l = 0; l < 2; ++l) {
    INFO("layer " << l);
    const KVLayerSaturation& c = s.counts()[l];
    CHECK(c.k_sampled == 2 * kRow);
    CHECK(c.k_saturated == (l + 2) + (l + 4));  // p = 1, 3
    CHECK(c.k_underflow == 0);
    CHECK(c.v_saturated == 0);
    CHECK(c.v_underflow == (l + 2) + (l + 1));
  }
}

TEST_CASE("kv saturation: the engine counts sampled K/V of its FP8 layers", "[kv][saturation]") {
  testing::TempDir dir;
  const std::string path = dir.file("scales.json");
  std::ofstream(path) << scales_json(2, 1e-4f);  // layer 2's K: everything clips
  EngineArgs a = testing::engine_args(
      testing::stories(), {.kv_cache_dtype = "fp8", .num_kv_blocks = 64, .max_model_len = 256});
  a.cache.kv_cache_dtype_skip_layers = "4";
  a.cache.kv_scales_path = path;
  auto engine = Engine::create(a);
  REQUIRE(engine->stats().kv_saturation.size() == 4);  // layers 0-3 (4 is bf16), zero so far
  CHECK(engine->stats().kv_saturation[3].layer == 3);
  CHECK(engine->stats().kv_saturation[0].k_sampled == 0);
  SamplingParams p;
  p.max_tokens = 20;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  auto s = engine->add_request("a", {1, 403, 407, 261, 378, 113, 260, 280}, p);
  while (auto o = s->next()) REQUIRE(o->error.empty());
  const EngineStats st = engine->stats();
  // 20 steps (one prompt step, 19 decode steps): steps 0 and 16 sampled, 4 prompt tokens then
  // 1 decode token, each token 4 heads x 8 values.
  for (const KVLayerSaturation& x : st.kv_saturation) {
    INFO("layer " << x.layer);
    CHECK(x.k_sampled == 5 * 32);
    CHECK(x.v_sampled == 5 * 32);
    CHECK(x.v_saturated == 0);
  }
  // Layer 2's K / 1e-4: every value whose |K| >= 0.0432 is at +-448, i.e. nearly all.
  CHECK(st.kv_saturation[2].k_saturated > 5 * 32 / 2);
  CHECK(st.kv_saturation[1].k_saturated == 0);
}

TEST_CASE("kv saturation: tensor parallel ranks' heads add up to the one-rank counts",
          "[kv][saturation][tp]") {
  // TP 2 and 4 hold 2 and 1 of the 4 KV heads per rank; their K/V are TP 1's bit for bit
  // (test_tensor_parallel_engine), so the counts over every rank's heads must be TP 1's.
  testing::TempDir dir;
  const std::string path = dir.file("scales.json");
  std::ofstream(path) << scales_json(1, 0.002f);  // layer 1's K clips in part
  std::vector<std::vector<KVLayerSaturation>> counts;
  for (int64_t tp : {1, 2, 4}) {
    EngineArgs a;
    a.model = testing::stories();
    a.tensor_parallel_size = tp;
    a.cache.kv_cache_dtype = "fp8";
    a.cache.kv_scales_path = path;
    a.cache.kv_cache_memory_bytes = 8 << 20;
    a.scheduler.max_model_len = 256;
    auto engine = Engine::create(a);
    SamplingParams p;
    p.max_tokens = 18;
    p.temperature = 0.0f;
    p.ignore_eos = true;
    auto s = engine->add_request("a", {1, 403, 407, 261, 378, 113, 260, 280, 300, 301}, p);
    while (auto o = s->next()) REQUIRE(o->error.empty());
    counts.push_back(engine->stats().kv_saturation);
  }
  REQUIRE(counts[0].size() == 5);
  CHECK(counts[0][1].k_sampled == 5 * 32);  // steps 0 (4 of 10 prompt tokens) and 16 (1)
  CHECK(counts[0][1].k_saturated > 0);
  CHECK(counts[0][1].k_saturated < 5 * 32);
  for (size_t t = 1; t < 3; ++t)
    for (size_t l = 0; l < 5; ++l) {
      INFO("tp index " << t << ", layer " << l);
      const KVLayerSaturation &x = counts[0][l], &y = counts[t][l];
      CHECK(y.layer == x.layer);
      CHECK(y.k_sampled == x.k_sampled);
      CHECK(y.k_saturated == x.k_saturated);
      CHECK(y.k_underflow == x.k_underflow);
      CHECK(y.v_sampled == x.v_sampled);
      CHECK(y.v_saturated == x.v_saturated);
      CHECK(y.v_underflow == x.v_underflow);
    }
}

TEST_CASE("kv saturation: start-up check ids are 64 text tokens, then the special tokens",
          "[kv][saturation]") {
  const Tokenizer& tok = *stories_model().tokenizer;
  const std::vector<int32_t> text = tok.encode(kv_calibration_text(), true, false);
  REQUIRE(text.size() > 64);
  const std::vector<int32_t> ids = kv_check_ids(tok, 512);
  const std::vector<int32_t> filler = tok.encode("\nThe answer is below.\n", false, false);
  // stories260K's special tokens: <unk> 0, <s> 1, </s> 2.
  REQUIRE(ids.size() == 64 + 3 * (1 + filler.size()));
  CHECK(std::equal(text.begin(), text.begin() + 64, ids.begin()));
  CHECK(ids[64] == 0);
  CHECK(ids[64 + 1 + filler.size()] == 1);
  CHECK(ids[64 + 2 * (1 + filler.size())] == 2);
}

TEST_CASE("kv saturation: a loaded scale that clips start-up K/V is one warning per layer",
          "[kv][saturation]") {
  const LoadedModel& loaded = stories_model();
  testing::TempDir dir;
  const std::string path = dir.file("scales.json");
  CacheConfig c;
  c.kv_cache_dtype = "fp8";
  c.kv_cache_memory_bytes = 1 << 20;
  c.kv_scales_path = path;
  // Scales of 1: stories260K's K/V stay far below 448 (checked below), nothing to warn about.
  std::ofstream(path) << scales_json(-1, 1.0f);
  CHECK(setup_kv_cache(c, 512, loaded).warnings.empty());

  // Layer 3's k_scale 0.01: K beyond 4.64 clips. Count those by hand over the check's ids.
  std::ofstream(path) << scales_json(3, 0.01f);
  const KVCacheSetup s = setup_kv_cache(c, 512, loaded);
  const std::vector<int32_t> ids = kv_check_ids(*loaded.tokenizer, 512);
  const auto n = static_cast<int64_t>(ids.size());
  SequenceKVCache seq = loaded.model->new_cache(n);
  (void)loaded.model->forward(ids.data(), n, 0, seq, false);
  const DenseKVCache dense = seq.download();
  int64_t clipped = 0, k_over_1 = 0, v_over_1 = 0;
  for (int64_t l = 0; l < 5; ++l)
    for (int64_t i = 0; i < n * 32; ++i) {
      const float kx = dense.k[l * n * 32 + i], vx = dense.v[l * n * 32 + i];
      if (l == 3 && std::fabs(kx / 0.01f) >= 464.0f) ++clipped;
      k_over_1 += std::fabs(kx) >= 464.0f, v_over_1 += std::fabs(vx) >= 464.0f;
    }
  REQUIRE(k_over_1 + v_over_1 == 0);  // the scale-1 case above had nothing to clip
  REQUIRE(clipped > 0);               // the case is meaningful
  INFO(s.warnings.size() << " warnings; first: " << (s.warnings.empty() ? "" : s.warnings[0]));
  REQUIRE(s.warnings.size() == 1);
  const std::string& w = s.warnings[0];
  CHECK_THAT(w, Catch::StartsWith("layer 3: "));
  CHECK_THAT(w, Catch::Contains("(file)"));
  CHECK_THAT(w, Catch::Contains("K amax "));
  CHECK_THAT(w, Catch::Contains("k_scale 0.01 = 4.48"));
  CHECK_THAT(w, Catch::Contains(std::to_string(clipped) + " of " + std::to_string(n * 32) +
                                " K values clipped"));
  CHECK_THAT(w, Catch::Contains(std::to_string(n) + " tokens"));
  CHECK_THAT(w, Catch::Contains("octet calibrate") && Catch::Contains("fp8_per_token_head") &&
                    Catch::Contains("--kv-cache-dtype-skip-layers 3"));
  CHECK(w.find("V amax") == std::string::npos);  // V's scale 1 does not clip

  // Calculated scales (amax / 224) never clip their own pass.
  CacheConfig calc = c;
  calc.kv_scales_path.clear();
  calc.calculate_kv_scales = true;
  CHECK(setup_kv_cache(calc, 512, loaded).warnings.empty());
  // Per-token-head layers have no static scale to check.
  CacheConfig pth = calc;
  pth.kv_cache_dtype = "fp8_per_token_head";
  pth.calculate_kv_scales = false;
  CHECK(setup_kv_cache(pth, 512, loaded).warnings.empty());
}

}  // namespace octet

// The same model on the CPU and the CUDA backend gives the same logits, within stated bounds:
// stories260K on the FP32 path (quantization none) and the FP8 W8A8 path (auto), with every KV
// dtype the CUDA backend stores (bf16, fp16, fp8_e4m3, fp8_e5m2; fp8_per_token_head is refused
// on CUDA with an error naming it), and a Llama-3.2-1B-shaped model (preset llama-3.2-1b) with
// the same seeded dummy weights on both devices. The CPU backend is the reference (every CPU
// kernel is checked against float64 / plain references in tests/kernels). Each run: two
// sequences prefilled in one step (stories260K: one of 600 tokens, so the GPU's attention
// splits into partitions and merges), then decode steps fed the CPU's greedy token, so both
// devices see the same tokens. Needs a build with CUDA and a GPU: without one every case that
// needs it exits 77 (skipped).
//
// Tolerances (derived from the arithmetic, not from a run of the code under test):
//  - FP32 linears, 16-bit KV: both devices compute the same FP32 operations in another order
//    (GEMM and attention sums, reductions, expf). That is ~1e-6 relative per op; the one
//    larger step is a K/V value that sits within that much of a bf16 / fp16 rounding boundary
//    and rounds to the neighbour (2^-8 relative): a rare event whose effect on a logit is
//    ~1e-4 of the logit range. Bound: max |cpu - cuda| <= 5e-3 x (max - min of the CPU row).
//  - FP8 (W8A8 linears or an FP8 KV cache): the same, plus an activation or K/V that the FP32
//    differences push across an E4M3 / E5M2 rounding boundary takes the neighbouring code
//    (1/16 to 1/4 of that value): rare (~1e-5 per value), but the next layers see it.
//    Bound: 3e-2 x the row's range.
//  A layout, scale or indexing bug moves logits by a sizeable fraction of the range, far
//  beyond both bounds. Greedy tokens: on the FP32 path with 16-bit KV every step's argmax
//  (the greedy token both lanes are then fed) must be the CPU's (a flip needs a top-2 lead
//  below ~1e-4 of the range); on FP8 paths wherever the CPU's lead exceeds twice the bound.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/engine_config.h"
#include "engine/engine.h"
#include "engine/kv_cache_setup.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine_test_support.h"
#include "test_model_paths.h"

using namespace octet;

namespace {

constexpr double kFp32Bound = 5e-3;  // of the CPU row's logit range (file comment)
constexpr double kFp8Bound = 3e-2;

// stories260K on `device` with `quantization` (none: FP32; auto: FP8 W8A8), loaded once.
const LoadedModel& stories_on(const std::string& device, const std::string& quantization) {
  static std::map<std::string, std::unique_ptr<LoadedModel>> models;
  std::unique_ptr<LoadedModel>& m = models[device + "/" + quantization];
  if (!m) {
    LoadOptions o = make_load_options(quantization, "channel");
    o.device = device;
    m = load_model(testing::stories(), o);
  }
  return *m;
}

// The llama-3.2-1b preset with dummy weights of seed 7 (FP8 W8A8, per-channel scales) and the
// stories260K tokenizer (padded to 128256 ids), loaded once per device.
const LoadedModel& llama1b_on(const std::string& device) {
  static std::map<std::string, std::unique_ptr<LoadedModel>> models;
  std::unique_ptr<LoadedModel>& m = models[device];
  if (!m) {
    ModelSource s;
    s.model = "llama-3.2-1b";
    s.load_format = "dummy";
    s.tokenizer = testing::stories();
    s.seed = 7;
    LoadOptions o = make_load_options("auto", "channel");
    o.device = device;
    m = load_model(s, o);
  }
  return *m;
}

// How far one device's run is from the reference's.
struct Agreement {
  double worst = 0.0;  // max over rows of max |cpu - cuda| / range of the CPU row
  int64_t rows = 0;    // rows compared
  int64_t argmax_mismatch = 0;        // rows whose CUDA argmax is not the CPU's
  int64_t argmax_clear_mismatch = 0;  // ... where the CPU's lead exceeds 2 x bound x range
};

// Compares one logits row of `cuda` with the CPU's (vocab each) into `a`.
void compare_row(const float* cpu, const float* cuda, int64_t vocab, double bound,
                 Agreement& a) {
  float lo = cpu[0], hi = cpu[0];
  int64_t best = 0, cuda_best = 0;
  double max_diff = 0.0;
  int64_t non_finite = 0;
  for (int64_t j = 0; j < vocab; ++j) {
    non_finite += !std::isfinite(cpu[j]) || !std::isfinite(cuda[j]);
    lo = std::min(lo, cpu[j]), hi = std::max(hi, cpu[j]);
    if (cpu[j] > cpu[best]) best = j;
    if (cuda[j] > cuda[cuda_best]) cuda_best = j;
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(cpu[j]) - cuda[j]));
  }
  REQUIRE(non_finite == 0);
  const double range = static_cast<double>(hi) - lo;
  REQUIRE(range > 0.0);  // real logits, not a constant row
  a.worst = std::max(a.worst, max_diff / range);
  ++a.rows;
  float second = -INFINITY;
  for (int64_t j = 0; j < vocab; ++j)
    if (j != best) second = std::max(second, cpu[j]);
  if (cuda_best != best) {
    ++a.argmax_mismatch;
    a.argmax_clear_mismatch += static_cast<double>(cpu[best]) - second > 2.0 * bound * range;
  }
}

// The bounds of the file comment, and the greedy tokens: with strict_greedy (FP32 linears and
// 16-bit KV, differences ~1e-6 relative) every step's CUDA argmax is the CPU's, so both
// devices' greedy sequences are the same; otherwise only where the CPU's lead is clear.
// Prints one line per run (label: model, path, KV dtype) for the GPU check's log.
void check_agreement(const std::string& label, const Agreement& a, double bound,
                     bool strict_greedy) {
  std::printf("cuda logits %s: max|cpu - cuda| / range %.3g (bound %.3g), %lld rows, %lld argmax "
              "mismatches (%lld with a clear lead)\n",
              label.c_str(), a.worst, bound, static_cast<long long>(a.rows),
              static_cast<long long>(a.argmax_mismatch),
              static_cast<long long>(a.argmax_clear_mismatch));
  INFO("worst max|cpu - cuda| / range " << a.worst << " (bound " << bound << "), rows "
                                        << a.rows << ", argmax mismatches "
                                        << a.argmax_mismatch << " (clear leads "
                                        << a.argmax_clear_mismatch << ")");
  CHECK(a.rows > 0);
  CHECK(a.worst <= bound);
  CHECK(a.argmax_clear_mismatch == 0);
  if (strict_greedy) CHECK(a.argmax_mismatch == 0);
}

int64_t argmax(const float* row, int64_t vocab) {
  return std::max_element(row, row + vocab) - row;
}

// Runs `prompts` on both models (same KV layers) for `decode_steps` decode steps after one
// prefill step of every prompt, feeding both the CPU's greedy tokens; compares every logits
// row. max_model_len: the lanes' longest sequence.
Agreement compare_devices(const LoadedModel& cpu, const LoadedModel& cuda,
                          const std::vector<KVLayerSpec>& layers,
                          const std::vector<std::vector<int32_t>>& prompts, int64_t decode_steps,
                          int64_t max_model_len, double bound) {
  const int64_t vocab = cpu.model->config().vocab_size;
  REQUIRE(cuda.model->config().vocab_size == vocab);
  const auto n = static_cast<int64_t>(prompts.size());
  testing::RunnerLane a(cpu, layers, max_model_len, n, false),
      b(cuda, layers, max_model_len, n, false);
  for (int64_t i = 0; i < n; ++i) {
    a.add("r" + std::to_string(i), prompts[static_cast<size_t>(i)]);
    b.add("r" + std::to_string(i), prompts[static_cast<size_t>(i)]);
  }
  Agreement agree;
  const auto run_step = [&](bool prefill) {
    std::vector<int64_t> tokens;
    for (const auto& r : a.requests)
      tokens.push_back(prefill ? r->num_tokens() : 1);
    // Both lanes append a placeholder, replaced below by the CPU's greedy token.
    const std::vector<int32_t> placeholder(static_cast<size_t>(n), 0);
    const StepLogits x = a.step(tokens, placeholder), y = b.step(tokens, placeholder);
    REQUIRE(x.sample_row == y.sample_row);
    REQUIRE(x.logits.size() == y.logits.size());
    REQUIRE(x.logits.size() == static_cast<size_t>(n * vocab));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = x.sample_row[static_cast<size_t>(i)];
      REQUIRE(row >= 0);
      INFO("request " << i << (prefill ? " prefill" : " decode"));
      compare_row(x.row(row), y.row(row), vocab, bound, agree);
      const auto next = static_cast<int32_t>(argmax(x.row(row), vocab));
      a.requests[static_cast<size_t>(i)]->output_token_ids.back() = next;
      b.requests[static_cast<size_t>(i)]->output_token_ids.back() = next;
    }
  };
  run_step(true);
  for (int64_t s = 0; s < decode_steps; ++s) run_step(false);
  return agree;
}

// Layers of `kv_cache_dtype` as the engine sets them up, FP8 scales computed on the CPU model
// (--calculate-kv-scales), so both devices store with the same scales.
std::vector<KVLayerSpec> cpu_kv_layers(const LoadedModel& cpu, const std::string& kv_cache_dtype) {
  CacheConfig c;
  c.kv_cache_dtype = kv_cache_dtype;
  c.calculate_kv_scales = kv_cache_dtype.rfind("fp8", 0) == 0;
  c.num_kv_blocks = 64;
  return setup_kv_cache(c, 1024, cpu).layers;
}

std::vector<int32_t> ids(int64_t len, int64_t salt, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t j = 0; j < len; ++j)
    p.push_back(static_cast<int32_t>(3 + (salt * 131 + j * 17) % (vocab - 3)));
  return p;
}

}  // namespace

TEST_CASE("cuda logits: stories260K agrees on CPU and CUDA on both paths with every KV dtype",
          "[cuda][logits]") {
  testing::require_cuda_or_skip();
  for (const std::string quantization : {"none", "auto"}) {
    const LoadedModel& cpu = stories_on("cpu", quantization);
    const LoadedModel& cuda = stories_on("cuda", quantization);
    const int64_t vocab = cpu.model->config().vocab_size;
    // 600 tokens: past the GPU's 512-position attention partitions; 9: one block and a bit.
    const std::vector<std::vector<int32_t>> prompts = {ids(600, 1, vocab), ids(9, 2, vocab)};
    for (const std::string kv : {"bf16", "fp16", "fp8_e4m3", "fp8_e5m2"}) {
      INFO("quantization " << quantization << ", kv_cache_dtype " << kv);
      const bool fp8 = quantization != "none" || kv.rfind("fp8", 0) == 0;
      const double bound = fp8 ? kFp8Bound : kFp32Bound;
      const Agreement a =
          compare_devices(cpu, cuda, cpu_kv_layers(cpu, kv), prompts, 6, 1024, bound);
      CHECK(a.rows == 2 * 7);  // 2 requests x (1 prefill + 6 decode steps)
      check_agreement("stories260K " + quantization + " " + kv, a, bound,
                      /*strict_greedy=*/!fp8);
    }
  }
}

TEST_CASE("cuda logits: fp8_per_token_head is refused on CUDA and not silently compared",
          "[cuda][logits]") {
  testing::require_cuda_or_skip();
  CacheConfig c;
  c.kv_cache_dtype = "fp8_per_token_head";
  c.num_kv_blocks = 64;
  // The CPU takes it (the reference exists) ...
  CHECK(setup_kv_cache(c, 256, stories_on("cpu", "auto")).layers.at(0).per_token_head);
  // ... the CUDA backend refuses it at set-up, naming the dtype.
  CHECK_THROWS_WITH(setup_kv_cache(c, 256, stories_on("cuda", "auto")),
                    Catch::Contains("fp8_per_token_head"));
  CHECK_THROWS_WITH(Engine::create(testing::engine_args(
                        testing::stories(), {.device = "cuda",
                                             .kv_cache_dtype = "fp8_per_token_head",
                                             .num_kv_blocks = 64,
                                             .max_model_len = 256})),
                    Catch::Contains("fp8_per_token_head"));
}

TEST_CASE("cuda logits: a Llama-3.2-1B-shaped dummy model agrees on CPU and CUDA",
          "[cuda][logits][dummy]") {
  testing::require_cuda_or_skip();
  const LoadedModel& cpu = llama1b_on("cpu");
  const LoadedModel& cuda = llama1b_on("cuda");
  const ModelConfig& c = cpu.model->config();
  REQUIRE(c.hidden_size == 2048);
  REQUIRE(c.vocab_size == 128256);
  // Prompts of 11 and 5 tokens (ids anywhere in the vocabulary), 3 decode steps.
  const std::vector<std::vector<int32_t>> prompts = {ids(11, 3, c.vocab_size),
                                                     ids(5, 4, c.vocab_size)};
  // bf16 KV, and E4M3 KV with scale 0.02 per KV head (dummy K/V are ~N(0, 1) per value,
  // models/dummy_weights.h: 448 x 0.02 = 8.96, beyond 8 sigma).
  KVLayerSpec bf16;
  KVLayerSpec e4m3;
  e4m3.dtype = DType::FP8_E4M3;
  e4m3.k_scale = e4m3.v_scale =
      std::vector<float>(static_cast<size_t>(c.num_key_value_heads), 0.02f);
  for (const KVLayerSpec& spec : {bf16, e4m3}) {
    INFO("KV " << dtype_name(spec.dtype));
    const std::vector<KVLayerSpec> layers(static_cast<size_t>(c.num_hidden_layers), spec);
    const Agreement a = compare_devices(cpu, cuda, layers, prompts, 3, 64, kFp8Bound);
    CHECK(a.rows == 2 * 4);
    check_agreement(std::string("llama-3.2-1b dummy fp8 kv ") + dtype_name(spec.dtype), a,
                    kFp8Bound, /*strict_greedy=*/false);
  }
}

// `octet perplexity --kv-cache-dtype`: the paged engine's perplexity with a KV dtype against
// bf16 KV (engine/kv_accuracy.h), on the real stories260K model.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "engine/kv_accuracy.h"
#include "engine/perplexity.h"
#include "engine_test_support.h"

namespace octet {
namespace {

const std::string kStories = std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf";

std::string text() {
  // Plain English a TinyStories model can predict: a few sentences, repeated with variations.
  std::string t;
  for (int i = 0; i < 12; ++i)
    t += "Once upon a time, there was a little girl named Lily. She liked to play in the park "
         "with her dog. One day, they found a big red ball under a tree. Lily was very happy. ";
  return t;
}

EngineArgs args(const std::string& dtype, const std::string& quantization) {
  return testing::engine_args(kStories, {.quantization = quantization,
                                         .kv_cache_dtype = dtype,
                                         .calculate_kv_scales = true,
                                         .kv_cache_memory_bytes = 16 << 20});
}

}  // namespace

TEST_CASE("kv accuracy: bf16 against itself is identical", "[kv_accuracy]") {
  const KVAccuracyResult r = compare_kv_cache_dtype(args("bf16", "auto"), text(), 300);
  CHECK(r.tokens == 300);
  CHECK(r.perplexity == r.baseline_perplexity);
  CHECK(r.top1_agreement == 1.0);
  CHECK(r.mean_abs_logprob_diff == 0.0);
}

TEST_CASE("kv accuracy: bf16 KV perplexity agrees with the dense FP32-KV reference path",
          "[kv_accuracy]") {
  // The dense path (engine/perplexity.h) keeps K/V in FP32 and is checked against
  // transformers elsewhere; bf16 rounding of K/V moves perplexity by well under 1%.
  const KVAccuracyResult r = compare_kv_cache_dtype(args("fp16", "none"), text(), 300);
  PerplexityOptions o;
  o.model = kStories;
  o.quantization = "none";
  o.max_tokens = 300;
  const PerplexityResult dense = compute_perplexity(o, text());
  REQUIRE(dense.tokens == 300);
  CHECK(r.baseline_perplexity == Approx(dense.perplexity).epsilon(0.01));
  CHECK(r.perplexity == Approx(dense.perplexity).epsilon(0.01));
  CHECK(r.perplexity < 20.0);  // the model does predict this text
}

TEST_CASE("kv accuracy: FP8 costs measurable, bounded accuracy, 2 mantissa bits cost more",
          "[kv_accuracy]") {
  const KVAccuracyResult e4m3 = compare_kv_cache_dtype(args("fp8_e4m3", "auto"), text(), 300);
  const KVAccuracyResult e5m2 = compare_kv_cache_dtype(args("fp8_e5m2", "auto"), text(), 300);
  CHECK(e4m3.kv_cache_dtype == "fp8_e4m3");
  CHECK(e4m3.perplexity != e4m3.baseline_perplexity);  // FP8 KV is really used
  CHECK(e4m3.mean_abs_logprob_diff > 0.0);
  CHECK(std::abs(e4m3.perplexity / e4m3.baseline_perplexity - 1.0) < 0.10);
  CHECK(e4m3.top1_agreement > 0.8);
  CHECK(e5m2.mean_abs_logprob_diff > e4m3.mean_abs_logprob_diff);
  WARN("stories260K, 300 tokens: e4m3 ppl " << e4m3.perplexity << " vs bf16 "
                                            << e4m3.baseline_perplexity << ", top-1 "
                                            << e4m3.top1_agreement << "; e5m2 ppl "
                                            << e5m2.perplexity << ", top-1 "
                                            << e5m2.top1_agreement);
}

}  // namespace octet

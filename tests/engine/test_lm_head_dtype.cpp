// --lm-head-dtype fp8 (per-channel E4M3 lm_head) on stories260K (tied embeddings, vocab 512,
// hidden 64): the lm_head's bytes shrink from 2 to 1 per weight (+ 4 per output channel for
// the scale), the logits move by less than the FP8 quantization of the rest of the model
// already moves them, and the vocab-parallel lm_head at TP 2 gives TP 1's logits bit for bit
// (each output column depends on its own weight row and scale only, so the vocab split decides
// which rank computes it, never how).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "engine/sequence_forward.h"

namespace octet {
namespace {

const std::string kStories = std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf";

std::vector<int32_t> ids() {
  std::ifstream in(std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.greedy.json");
  REQUIRE(in);
  std::vector<int32_t> v =
      nlohmann::json::parse(in).at("expected_token_ids").get<std::vector<int32_t>>();
  v.resize(64);
  v.insert(v.begin(), 1);  // BOS
  return v;
}

std::unique_ptr<LoadedModel> load(const std::string& quantization, const std::string& lm_head,
                                  int tp) {
  LoadOptions o;
  o.quantization = quantization;
  o.lm_head_dtype = lm_head;
  o.world_size = tp;
  return load_model(kStories, o);
}

std::vector<float> logits(const LoadedModel& m, const std::vector<int32_t>& t) {
  const int64_t n = static_cast<int64_t>(t.size());
  std::vector<SequenceKVCache> caches = new_sequence_caches(m, n);
  return forward_sequence(m, caches, t.data(), n, 0, true);
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float d = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

}  // namespace

TEST_CASE("lm_head fp8: bytes, logits within the model's FP8 noise, TP 2 == TP 1", "[lm_head]") {
  const std::vector<int32_t> t = ids();
  auto bf16 = load("auto", "bf16", 1);
  auto fp8 = load("auto", "fp8", 1);
  const int64_t vocab = bf16->model->config().vocab_size, h = bf16->model->config().hidden_size;
  // Worked out from the shapes: bf16 2 * vocab * h bytes; fp8 vocab * h codes + vocab scales.
  CHECK(bf16->model->decode_weight_bytes() - fp8->model->decode_weight_bytes() ==
        2 * vocab * h - (vocab * h + 4 * vocab));

  const std::vector<float> ref = logits(*load("none", "bf16", 1), t);  // FP32 everywhere
  const std::vector<float> a = logits(*bf16, t), b = logits(*fp8, t);
  const float model_noise = max_abs_diff(a, ref), head_noise = max_abs_diff(b, a);
  std::printf("stories260K: max |dlogit| FP8 model (bf16 lm_head) vs FP32 %.3g; fp8 vs bf16 "
              "lm_head %.3g\n",
              static_cast<double>(model_noise), static_cast<double>(head_noise));
  CHECK(head_noise > 0.0f);  // the flag changed the lm_head
  // E4M3 keeps 3 mantissa bits (relative step 2^-4 at worst per weight, errors of a 64-term
  // dot product partly cancel): below the noise the FP8 linears already add.
  CHECK(head_noise < model_noise);

  const std::vector<float> tp2 = logits(*load("auto", "fp8", 2), t);
  CHECK(max_abs_diff(tp2, b) == 0.0f);
}

TEST_CASE("lm_head fp8 on the FP32 reference path leaves the lm_head in FP32", "[lm_head]") {
  auto none = load("none", "bf16", 1);
  auto none_fp8 = load("none", "fp8", 1);
  CHECK(none->model->decode_weight_bytes() == none_fp8->model->decode_weight_bytes());
}

}  // namespace octet

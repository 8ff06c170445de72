// The FP32 reference forward pass against values made outside octet:
//  - stories260K: the 200 greedy ids of ../shared/models/stories260K.greedy.json (an independent
//    float64 implementation; see that folder's README).
//  - SmolLM2-135M-Instruct: greedy ids and logits of Hugging Face transformers running the same
//    GGUF in float32 (tests/models/golden/smollm2_reference.json, scripts/make_smollm2_reference.py).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "models/checkpoint.h"
#include "models/gguf.h"
#include "greedy.h"
#include "models/llama.h"

using octet::testing::greedy;
using octet::GGUFFile;
using octet::LlamaModel;
using octet::LoadOptions;

namespace {

// The FP32 reference path (no quantization): what the goldens were made with.
LoadOptions fp32() {
  LoadOptions o;
  o.quantization = "none";
  return o;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

int32_t argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}


std::string smollm2_path() {
  const std::string p = OCTET_SMOLLM2_GGUF;
  INFO("SmolLM2 GGUF not configured: run scripts/test.sh (it downloads the model and passes "
       "-DOCTET_SMOLLM2_GGUF to CMake)");
  REQUIRE(!p.empty());
  return p;
}

}  // namespace

TEST_CASE("stories260K greedy decoding matches the golden 200 tokens", "[llama][golden]") {
  const auto golden = read_json(std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.greedy.json");
  GGUFFile file = GGUFFile::open(std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf");
  LlamaModel model = LlamaModel::load(file, fp32());
  CHECK(model.config().rope_theta == 10000.0f);
  CHECK(model.config().num_key_value_heads == 4);
  const auto expected = golden["expected_token_ids"].get<std::vector<int32_t>>();
  const auto prompt = golden["prompt_token_ids"].get<std::vector<int32_t>>();
  REQUIRE(expected.size() == 200);
  CHECK(greedy(model, prompt, 200) == expected);
}

TEST_CASE("SmolLM2 greedy tokens and logits match transformers float32", "[llama][golden]") {
  const auto ref = read_json(std::string(OCTET_SOURCE_DIR) +
                             "/tests/models/golden/smollm2_reference.json");
  GGUFFile file = GGUFFile::open(smollm2_path());
  LlamaModel model = LlamaModel::load(file, fp32());
  const int64_t vocab = model.config().vocab_size;
  REQUIRE(vocab == 49152);
  const auto fixed_ids = ref["fixed_vocab_ids"].get<std::vector<int32_t>>();

  // Tolerance: both sides are FP32 through 30 layers with different summation orders; logits
  // are O(10-30), and observed differences are ~1e-4. 1e-2 absolute leaves room for other
  // compilers while still catching any real error (a wrong RoPE, norm or weight is >> 0.1).
  const float kLogitTol = 1e-2f;
  float max_diff = 0.0f;
  for (const auto& p : ref["prompts"]) {
    const std::string name = p["name"];
    const auto prompt = p["prompt_token_ids"].get<std::vector<int32_t>>();
    const auto expected = p["greedy_token_ids"].get<std::vector<int32_t>>();
    INFO("prompt " << name);
    CHECK(greedy(model, prompt, static_cast<int64_t>(expected.size())) == expected);

    // Logits at every position of prompt + reference continuation, one batched pass.
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), expected.begin(), expected.end());
    auto cache = model.new_cache(static_cast<int64_t>(seq.size()));
    const std::vector<float> logits =
        model.forward(seq.data(), static_cast<int64_t>(seq.size()), 0, cache, true);
    const auto& positions = p["positions"];
    REQUIRE(positions.size() == seq.size());
    for (size_t t = 0; t < seq.size(); ++t) {
      const float* row = logits.data() + t * vocab;
      const auto& pos = positions[t];
      const auto top_ids = pos["top_ids"].get<std::vector<int32_t>>();
      const auto top_logits = pos["top_logits"].get<std::vector<float>>();
      const auto fixed_logits = pos["fixed_logits"].get<std::vector<float>>();
      for (size_t j = 0; j < top_ids.size(); ++j)
        max_diff = std::max(max_diff, std::fabs(row[top_ids[j]] - top_logits[j]));
      for (size_t j = 0; j < fixed_ids.size(); ++j)
        max_diff = std::max(max_diff, std::fabs(row[fixed_ids[j]] - fixed_logits[j]));
      if (pos["margin"].get<float>() > 2 * kLogitTol) CHECK(argmax(row, vocab) == pos["argmax"]);
    }
  }
  WARN("SmolLM2 largest |logit - transformers logit| = " << max_diff << " (tolerance "
                                                            << kLogitTol << ")");
  CHECK(max_diff < kLogitTol);
}

TEST_CASE("SmolLM2 from a Hugging Face float32 checkpoint matches transformers too",
          "[llama][golden][hf]") {
  // Same weights as the GGUF, but in HF layout: half-split RoPE, un-permuted Q/K rows,
  // safetensors, config.json (scripts/make_hf_checkpoint.py --dtype f32, run by the set-up).
  const auto ref = read_json(std::string(OCTET_SOURCE_DIR) +
                             "/tests/models/golden/smollm2_reference.json");
  const octet::HFCheckpoint ckpt = octet::HFCheckpoint::open(OCTET_HF_SMOLLM2_F32_DIR);
  LlamaModel model = LlamaModel::load(ckpt, fp32());
  CHECK(model.rope_layout() == octet::RopeLayout::HalfSplit);
  CHECK(model.linear_format() == "fp32");
  const int64_t vocab = model.config().vocab_size;
  float max_diff = 0.0f;
  for (const auto& p : ref["prompts"]) {
    const auto prompt = p["prompt_token_ids"].get<std::vector<int32_t>>();
    const auto expected = p["greedy_token_ids"].get<std::vector<int32_t>>();
    INFO("prompt " << p["name"]);
    CHECK(greedy(model, prompt, static_cast<int64_t>(expected.size())) == expected);
    auto cache = model.new_cache(static_cast<int64_t>(prompt.size()));
    const auto logits =
        model.forward(prompt.data(), static_cast<int64_t>(prompt.size()), 0, cache, true);
    for (size_t t = 0; t < prompt.size(); ++t) {
      const auto& pos = p["positions"][t];
      const auto top_ids = pos["top_ids"].get<std::vector<int32_t>>();
      const auto top_logits = pos["top_logits"].get<std::vector<float>>();
      for (size_t j = 0; j < top_ids.size(); ++j)
        max_diff = std::max(max_diff, std::fabs(logits[t * vocab + top_ids[j]] - top_logits[j]));
    }
  }
  WARN("HF float32 checkpoint: largest |logit - transformers logit| = " << max_diff);
  CHECK(max_diff < 1e-2f);
}

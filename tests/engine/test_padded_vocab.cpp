// A padded vocabulary (config.json's vocab_size larger than the tokenizer's token count, legal
// and common: Qwen2.5 pads to a multiple of 128) and requests that can never be sampled. As
// vLLM: an id in [tokenizer size, vocab_size) is a valid prompt id and a valid sample, whose text
// is ""; ids >= vocab_size are refused with a RequestError (a 400). A min_tokens that masks
// every id of the vocabulary (EOS + stop_token_ids cover it) is refused up front instead of
// failing every step.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/detokenizer.h"
#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine/request_error.h"
#include "engine_test_support.h"
#include "tiny_models.h"

namespace octet {
namespace {

constexpr int64_t kTokenizerSize = 512;  // tiny_llama's tokenizer.json
constexpr int64_t kPadded = 520;         // the padded config vocab_size

/// tiny_llama with vocab_size 520: embed_tokens and lm_head get 8 more rows, the tokenizer is
/// unchanged (512 tokens). Written once per process.
std::string padded_model_dir() {
  namespace fs = std::filesystem;
  static testing::TempDir dir;
  static std::string made;
  if (!made.empty()) return made;
  const std::string src = std::string(OCTET_SOURCE_DIR) + "/tests/models/golden/tiny_llama";
  const std::string dst = dir.file("tiny_llama_padded");
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "weights.json")
      fs::copy_file(e.path(), dst + "/" + e.path().filename().string());
  nlohmann::json config = nlohmann::json::parse(std::ifstream(src + "/config.json"));
  REQUIRE(config["vocab_size"] == kTokenizerSize);
  config["vocab_size"] = kPadded;
  std::ofstream(dst + "/config.json") << config.dump();
  const nlohmann::json recipe = nlohmann::json::parse(std::ifstream(src + "/weights.json"));
  std::vector<WriterTensor> tensors;
  for (const auto& t : recipe["tensors"]) {
    WriterTensor w;
    w.name = t["name"];
    w.shape = t["shape"].get<std::vector<int64_t>>();
    if (w.name == "model.embed_tokens.weight" || w.name == "lm_head.weight") {
      REQUIRE(w.shape[0] == kTokenizerSize);
      w.shape[0] = kPadded;
    }
    const std::vector<float> v =
        testing::tiny_tensor_values(w.name, w.shape, t["rule"], recipe["seed"].get<uint64_t>());
    w.bytes.resize(v.size() * sizeof(float));
    std::memcpy(w.bytes.data(), v.data(), w.bytes.size());
    tensors.push_back(std::move(w));
  }
  write_safetensors(dst + "/model.safetensors", tensors);
  return made = dst;
}

std::unique_ptr<Engine> padded_engine() {
  return Engine::create(testing::engine_args(
      padded_model_dir(), {.quantization = "none", .num_kv_blocks = 32, .max_model_len = 64}));
}

}  // namespace

TEST_CASE("padded vocabulary: prompt ids in the gap run, and ids past vocab_size are refused",
          "[engine][padded_vocab]") {
  auto engine = padded_engine();
  REQUIRE(engine->vocab_size() == kPadded);
  REQUIRE(engine->tokenizer().vocab_size() == kTokenizerSize);
  SamplingParams p;
  p.max_tokens = 3;
  p.temperature = 0.0f;
  // 515 has no token: before, building the request's detokenizer threw out_of_range outside
  // the request rules (the server answered 503, which clients retry).
  const testing::Result r =
      testing::collect(*engine->add_request("gap", {1, 515, 7}, p));
  CHECK(r.finished);
  CHECK(r.token_ids.size() == 3);
  for (int32_t bad : {static_cast<int32_t>(kPadded), int32_t{100000}}) {
    try {
      engine->add_request("past" + std::to_string(bad), {1, bad}, p);
      FAIL("no RequestError for prompt id " << bad);
    } catch (const RequestError& e) {
      CHECK(e.kind() == RequestErrorKind::InvalidRequest);
      CHECK(e.param() == "prompt");
      CHECK(std::string(e.what()).find(std::to_string(bad)) != std::string::npos);
    }
  }
}

TEST_CASE("padded vocabulary: a sampled id without a token is empty text, never an error",
          "[engine][padded_vocab]") {
  auto engine = padded_engine();
  SamplingParams p;
  p.max_tokens = 4;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.logprobs = 2;
  p.logit_bias = {{517, 100.0f}};  // greedy picks the gap id every step
  const testing::Result r = testing::collect(*engine->add_request("sample-gap", {1, 5}, p));
  CHECK(r.error.empty());
  CHECK(r.token_ids == std::vector<int32_t>{517, 517, 517, 517});
  CHECK(r.text.empty());
  CHECK(r.finish_reason == "length");
}

TEST_CASE("RequestDetokenizer: ids past the tokenizer decode to empty text in the prompt and output",
          "[engine][padded_vocab]") {
  auto engine = padded_engine();
  // The loaded Tokenizer is reached through a fresh load of the same directory.
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(padded_model_dir());
  SamplingParams p;
  RequestDetokenizer with_gap(*tok, {1, 513}, p), without(*tok, {1}, p);
  const std::vector<int32_t> out = {5, 519, 7, 600};
  std::string a, b;
  for (int32_t id : out) {
    a += with_gap.push(id).text;
    if (id < kTokenizerSize) b += without.push(id).text;
  }
  a += with_gap.finish();
  b += without.finish();
  CHECK(a == b);
  CHECK(detokenize_known(engine->tokenizer(), {5, 519, 7}, false) ==
        engine->tokenizer().detokenize({5, 7}, false));
}

TEST_CASE("min_tokens with EOS and stop_token_ids covering the vocabulary is a RequestError",
          "[engine][padded_vocab]") {
  auto engine = padded_engine();
  SamplingParams p;
  p.max_tokens = 4;
  p.min_tokens = 2;
  for (int32_t id = 0; id < kPadded; ++id) p.stop_token_ids.push_back(id);
  // Before: accepted, then every step failed ("every token's logit is -inf"): a 500.
  try {
    engine->add_request("all-stop", {1, 5}, p);
    FAIL("no RequestError");
  } catch (const RequestError& e) {
    CHECK(e.kind() == RequestErrorKind::InvalidRequest);
    CHECK(e.param() == "min_tokens");
  }
  // One id left unmasked: fine. min_tokens 0: fine (nothing is masked).
  p.stop_token_ids.pop_back();
  CHECK(testing::collect(*engine->add_request("one-left", {1, 5}, p)).finished);
  p.stop_token_ids.push_back(kPadded - 1);
  p.min_tokens = 0;
  CHECK(testing::collect(*engine->add_request("no-min", {1, 5}, p)).finished);
}

}  // namespace octet

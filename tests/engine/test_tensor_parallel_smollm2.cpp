// Tensor parallelism on SmolLM2-135M-Instruct (FP8 W8A8 dynamic, 9 query heads, 3 KV heads,
// intermediate 1536): --tensor-parallel-size 3 gives TP 1's greedy tokens on the golden prompt
// and 3 chat prompts x 32 tokens (FP8 and FP32 paths), FP8 logits bit-identical, FP32 logits
// within the stated bound; a request is bit-identical
// alone and in a batch at TP 3 for bf16 and fp8_e4m3 KV; size 2 is a start-up error naming the
// head counts (engine and CLI). Label `heavy` (CMakeLists.txt).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "engine/engine.h"
#include "engine_test_support.h"
#include "test_model_paths.h"
#include "engine/model_loader.h"
#include "engine/sequence_forward.h"

namespace octet {
namespace {

// TP 3 vs TP 1 logits, teacher-forced. FP8 W8A8: the row-parallel codes and scales equal TP 1's
// and the k-sums are split in the same 3 parts at both sizes (models/tensor_parallel.h), so the
// logits are equal bit for bit. FP32 path: the row-parallel all-reduce adds 3 rank partials where
// TP 1 sums k in one pass, so logits move by the reordering alone: each FP32 sum of k <= 1536
// terms moves by at most ~k u S; through 30 layers of norms this stays far below 1e-2 on
// logits of O(30) (measured 3.5e-5). Tolerance 1e-2.
constexpr float kFp32LogitTolerance = 1e-2f;

using testing::collect;
using testing::Result;
using testing::smollm2;

EngineArgs args(int64_t tp, const std::string& kv_dtype,
                const std::string& quantization = "auto") {
  return testing::engine_args(smollm2(), {.quantization = quantization,
                                          .tensor_parallel_size = tp,
                                          .kv_cache_dtype = kv_dtype,
                                          .calculate_kv_scales = true,
                                          .kv_cache_memory_bytes = 32 << 20,
                                          .max_model_len = 256});
}

SamplingParams greedy32(int64_t max_tokens = 32) {
  return testing::greedy_params(max_tokens, /*logprobs=*/2);
}

std::vector<Result> run_all(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                            int64_t max_tokens = 32) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i)
    streams.push_back(e.add_request("p" + std::to_string(i), prompts[i], greedy32(max_tokens)));
  std::vector<Result> out;
  for (auto& s : streams) out.push_back(collect(*s));
  return out;
}

std::string chat(const std::string& user) {
  return "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
         "Face<|im_end|>\n<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
}

nlohmann::json reference() {
  std::ifstream in(std::string(OCTET_SOURCE_DIR) + "/tests/models/golden/smollm2_reference.json");
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

// The golden prompt ("The capital of France is") and 3 chat prompts.
std::vector<std::vector<int32_t>> prompts(Engine& e) {
  std::vector<std::vector<int32_t>> out{
      reference().at("prompts").at(0).at("prompt_token_ids").get<std::vector<int32_t>>()};
  for (const char* q : {"What is the capital of France?", "Write a haiku about the sea.",
                        "How do I reverse a list in Python?"})
    out.push_back(e.tokenizer().tokenize(chat(q), true));
  return out;
}

}  // namespace

TEST_CASE("tp smollm2: size 3 gives size 1's greedy tokens on the golden and 3 chat prompts",
          "[tp][heavy]") {
  for (const std::string quantization : {"auto", "none"}) {  // FP8 W8A8 (served), FP32
    INFO("quantization " << quantization);
    auto e1 = Engine::create(args(1, "bf16", quantization));
    const std::vector<std::vector<int32_t>> ps = prompts(*e1);
    const std::vector<Result> one = run_all(*e1, ps);
    e1.reset();
    auto e3 = Engine::create(args(3, "bf16", quantization));
    const std::vector<Result> three = run_all(*e3, ps);
    for (size_t p = 0; p < ps.size(); ++p) {
      INFO("prompt " << p);
      CHECK(one[p].token_ids.size() == 32);
      CHECK(three[p].token_ids == one[p].token_ids);
    }
  }
}

TEST_CASE("tp smollm2: at size 3 a request is bit-identical alone and in a batch, bf16 and "
          "fp8_e4m3 KV", "[tp][heavy]") {
  for (const std::string dtype : {"bf16", "fp8_e4m3"}) {
    INFO("kv_cache_dtype " << dtype);
    EngineArgs a = args(3, dtype);
    // Unit FP8 KV scales: invariance does not depend on them, and calibration through the
    // ranks is covered on stories260K (test_tensor_parallel_engine.cpp); keeps this test short.
    a.cache.calculate_kv_scales = false;
    auto e3 = Engine::create(a);
    const std::vector<std::vector<int32_t>> ps = prompts(*e3);
    const Result solo = collect(*e3->add_request("solo", ps[2], greedy32(12)));
    const std::vector<Result> batch = run_all(*e3, ps, 12);
    testing::require_same_logprobs(solo, batch[2]);
  }
}

TEST_CASE("tp smollm2: logits at size 3 are size 1's: FP8 bit for bit, FP32 within the bound",
          "[tp][heavy]") {
  // Teacher-forced over the golden prompts and their 32 transformers tokens (plain, story,
  // chatml).
  const nlohmann::json ref = reference();
  for (const std::string quantization : {"auto", "none"}) {
    INFO("quantization " << quantization);
    LoadOptions o1, o3;
    o1.quantization = o3.quantization = quantization;
    o3.world_size = 3;
    auto m1 = load_model(smollm2(), o1);
    auto m3 = load_model(smollm2(), o3);
    float max_diff = 0.0f;
    int64_t rows = 0;
    for (const auto& gp : ref.at("prompts")) {
      std::vector<int32_t> ids = gp.at("prompt_token_ids").get<std::vector<int32_t>>();
      const std::vector<int32_t> gen = gp.at("greedy_token_ids").get<std::vector<int32_t>>();
      ids.insert(ids.end(), gen.begin(), gen.end());
      const int64_t n = static_cast<int64_t>(ids.size());
      const auto run = [&](const LoadedModel& m) {
        std::vector<SequenceKVCache> c = new_sequence_caches(m, n);
        return forward_sequence(m, c, ids.data(), n, 0, true);
      };
      const std::vector<float> a = run(*m1), b = run(*m3);
      REQUIRE(a.size() == b.size());
      REQUIRE(a.size() % n == 0);
      rows += n;
      for (size_t v = 0; v < a.size(); ++v) max_diff = std::max(max_diff, std::abs(a[v] - b[v]));
      if (quantization == "auto") CHECK(a == b);
    }
    std::printf("SmolLM2 %s TP 3 vs 1: max |dlogit| %.3g over %lld rows\n",
                quantization == "auto" ? "FP8 W8A8" : "FP32", static_cast<double>(max_diff),
                static_cast<long long>(rows));
    if (quantization == "none") CHECK(max_diff <= kFp32LogitTolerance);
  }
}

TEST_CASE("tp smollm2: size 2 fails at start-up naming the head counts", "[tp][heavy]") {
  CHECK_THROWS_WITH(Engine::create(args(2, "bf16")),
                    Catch::Contains("tensor_parallel_size 2 does not divide "
                                    "num_attention_heads 9 (num_key_value_heads 3)"));
  // The CLI: a clear message and a failing exit status.
  const testing::RunResult r = testing::run_octet(
      "generate --model " + smollm2() + " --prompt hi --max-tokens 1 --tensor-parallel-size 2");
  CHECK(r.exit_code != -1);  // exited, not killed
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("num_attention_heads 9 (num_key_value_heads 3)"));
}

}  // namespace octet

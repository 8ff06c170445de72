// Tensor parallelism on SmolLM2-135M-Instruct (FP8 W8A8 dynamic, 9 query heads, 3 KV heads,
// intermediate 1536): --tensor-parallel-size 3 gives TP 1's greedy tokens on the golden prompt
// and 3 chat prompts x 32 tokens, with logits within the stated bound; a request is bit-identical
// alone and in a batch at TP 3 for bf16 and fp8_e4m3 KV; size 2 is a start-up error naming the
// head counts (engine and CLI). Label `heavy` (CMakeLists.txt).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "test_model_paths.h"
#include "engine/model_loader.h"
#include "engine/sequence_forward.h"

namespace octet {
namespace {

// FP8 W8A8 logits (SmolLM2's are O(30)) of TP 3 vs TP 1, teacher-forced. The row-parallel
// codes equal TP 1's for the same input (tests/models/test_tensor_parallel_linear.cpp) and the
// FP32 path's TP 3 logits are within 3.5e-5 of TP 1's (the reduction order alone). But dynamic
// per-token E4M3 is not continuous: a residual moved by ~1e-6 relative puts x / s across a
// rounding boundary with probability ~2e-6 / (code step 2^-4) ~ 3e-5 per element, and a token
// quantizes ~3300 elements in each of 30 layers: ~3 code flips (each 1/16..1/8 of a value) per
// token, compounding. Measured max |dlogit| 4.74 over 247 rows, against 12.9 between FP8 and
// FP32 at TP 1. Tolerance: half the FP8-vs-FP32 change (6.0, checked against the measured
// change below): tensor parallelism moves the logits less than the quantization already does.
// Greedy tokens are therefore compared exactly on the FP32 path; on FP8 the golden prompt's
// 6th token is a near tie (TP 1 margin 0.22, transformers' 0.22) that TP 3 decides otherwise.
constexpr float kLogitTolerance = 6.0f;

using testing::smollm2;

struct Result {
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprobs> logprobs;
};

Result collect(RequestStream& s) {
  Result r;
  while (auto o = s.next()) {
    REQUIRE(o->error.empty());
    r.token_ids.insert(r.token_ids.end(), o->token_ids.begin(), o->token_ids.end());
    r.logprobs.insert(r.logprobs.end(), o->logprobs.begin(), o->logprobs.end());
  }
  return r;
}

EngineArgs args(int64_t tp, const std::string& kv_dtype,
                const std::string& quantization = "auto") {
  EngineArgs a;
  a.model = smollm2();
  a.quantization = quantization;
  a.tensor_parallel_size = tp;
  a.cache.kv_cache_dtype = kv_dtype;
  a.cache.calculate_kv_scales = true;
  a.cache.kv_cache_memory_bytes = 32 << 20;
  a.scheduler.max_model_len = 256;
  return a;
}

SamplingParams greedy32(int64_t max_tokens = 32) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 2;
  return p;
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
  // The FP32 reference path: greedy ties are decided by the model, not by rounding (on FP8 the
  // golden prompt's 6th token is a near tie, margin 0.22, that TP 3 decides otherwise).
  auto e1 = Engine::create(args(1, "bf16", "none"));
  const std::vector<std::vector<int32_t>> ps = prompts(*e1);
  const std::vector<Result> one = run_all(*e1, ps);
  e1.reset();
  auto e3 = Engine::create(args(3, "bf16", "none"));
  const std::vector<Result> three = run_all(*e3, ps);
  for (size_t p = 0; p < ps.size(); ++p) {
    INFO("prompt " << p);
    CHECK(one[p].token_ids.size() == 32);
    CHECK(three[p].token_ids == one[p].token_ids);
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
    REQUIRE(solo.token_ids == batch[2].token_ids);
    REQUIRE(solo.logprobs.size() == batch[2].logprobs.size());
    for (size_t i = 0; i < solo.logprobs.size(); ++i) {
      CHECK(solo.logprobs[i].logprob == batch[2].logprobs[i].logprob);  // bitwise
      CHECK(solo.logprobs[i].top == batch[2].logprobs[i].top);
    }
  }
}

TEST_CASE("tp smollm2: FP8 W8A8 logits at size 3 are size 1's within the stated bound",
          "[tp][heavy]") {
  // Teacher-forced over the golden prompts and their 32 transformers tokens (plain, story,
  // chatml): TP 3 vs TP 1, and the FP8-vs-FP32 change at TP 1 the tolerance is set against.
  LoadOptions o1, o3, none;
  o3.world_size = 3;
  none.quantization = "none";
  auto m1 = load_model(smollm2(), o1);
  auto m3 = load_model(smollm2(), o3);
  auto mr = load_model(smollm2(), none);
  float max_diff = 0.0f, quant_diff = 0.0f;
  int64_t checked = 0, rows = 0;
  const nlohmann::json ref = reference();
  for (const auto& gp : ref.at("prompts")) {
    std::vector<int32_t> ids = gp.at("prompt_token_ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> gen = gp.at("greedy_token_ids").get<std::vector<int32_t>>();
    ids.insert(ids.end(), gen.begin(), gen.end());
    const int64_t n = static_cast<int64_t>(ids.size());
    const auto run = [&](const LoadedModel& m) {
      std::vector<SequenceKVCache> c = new_sequence_caches(m, n);
      return forward_sequence(m, c, ids.data(), n, 0, true);
    };
    const std::vector<float> a = run(*m1), b = run(*m3), r = run(*mr);
    REQUIRE(a.size() == b.size());
    const int64_t vocab = static_cast<int64_t>(a.size()) / n;
    for (int64_t row = 0; row < n; ++row) {
      const float *ra = a.data() + row * vocab, *rb = b.data() + row * vocab;
      int64_t top = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        max_diff = std::max(max_diff, std::abs(ra[v] - rb[v]));
        quant_diff = std::max(quant_diff, std::abs(ra[v] - r[row * vocab + v]));
        if (ra[v] > ra[top]) top = v;
      }
      float second = -1e30f;
      for (int64_t v = 0; v < vocab; ++v)
        if (v != top) second = std::max(second, ra[v]);
      ++rows;
      if (ra[top] - second > 2 * kLogitTolerance) {  // a clear winner stays the winner
        ++checked;
        CHECK(std::max_element(rb, rb + vocab) - rb == top);
      }
    }
  }
  std::printf("SmolLM2 FP8 TP 3 vs 1: max |dlogit| %.3g; FP8 vs FP32 at TP 1: %.3g; argmax "
              "checked on %lld of %lld rows\n", static_cast<double>(max_diff),
              static_cast<double>(quant_diff), static_cast<long long>(checked),
              static_cast<long long>(rows));
  CHECK(max_diff <= kLogitTolerance);
  CHECK(kLogitTolerance <= 0.5f * quant_diff);
  CHECK(checked > 0);  // clear winners exist and keep winning
}

TEST_CASE("tp smollm2: size 2 fails at start-up naming the head counts", "[tp][heavy]") {
  CHECK_THROWS_WITH(Engine::create(args(2, "bf16")),
                    Catch::Contains("tensor_parallel_size 2 does not divide "
                                    "num_attention_heads 9 (num_key_value_heads 3)"));
  // The CLI: a clear message and a failing exit status.
  const std::string cmd = std::string(OCTET_BINARY) + " generate --model " + smollm2() +
                          " --prompt hi --max-tokens 1 --tensor-parallel-size 2 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  REQUIRE(f);
  std::string out;
  char buf[4096];
  while (size_t k = fread(buf, 1, sizeof buf, f)) out.append(buf, k);
  const int status = pclose(f);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK_THAT(out, Catch::Contains("num_attention_heads 9 (num_key_value_heads 3)"));
}

}  // namespace octet

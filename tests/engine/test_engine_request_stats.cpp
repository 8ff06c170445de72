// What the engine reports for /metrics' vLLM families (server/openai/metrics.h), on the tiny
// real stories260K model: the final RequestOutput's preemption count, max_tokens and phase
// timings (vllm:request_num_preemptions, _params_max_tokens, _prefill/_decode/_inference_time),
// and EngineStats' per-step token bins (vllm:iteration_tokens_total). Expected values are
// derived by hand from the request shapes, not read from the engine.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_test_support.h"
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::random_prompt;
using testing::stories;

// The final update of a stream (the one with finished set).
RequestOutput last_output(RequestStream& s) {
  RequestOutput last;
  while (auto o = s.next()) last = std::move(*o);
  REQUIRE(last.finished);
  return last;
}

int64_t total(const std::array<int64_t, 48>& bins) {
  int64_t n = 0;
  for (int64_t b : bins) n += b;
  return n;
}

}  // namespace

TEST_CASE("engine stats: a solo request's steps, preemptions, max_tokens and phase times",
          "[engine][metrics]") {
  EngineArgs a = testing::engine_args(
      stories(), {.quantization = "none", .num_kv_blocks = 64, .max_model_len = 256});
  a.cache.enable_prefix_caching = false;
  auto engine = Engine::create(a);
  SamplingParams p;
  p.max_tokens = 6;
  p.ignore_eos = true;
  p.temperature = 0.0f;
  const EngineStats before = engine->stats();
  const RequestOutput out = last_output(*engine->add_request("a", random_prompt(20, 1), p));
  const EngineStats after = engine->stats();
  CHECK(out.finish_reason == "length");
  CHECK(out.num_generated_tokens == 6);
  CHECK(out.num_preemptions == 0);
  CHECK(out.max_tokens == 6);
  // Timeline: arrival <= first scheduled <= first token <= finished.
  CHECK(out.queue_time_s >= 0.0);
  CHECK(out.first_token_time_s >= out.queue_time_s);
  CHECK(out.e2e_time_s >= out.first_token_time_s);
  // vLLM's count: the prefill step is 20 prompt + 1 generated tokens (2^4 < 21 <= 2^5), then 5
  // one-token decode steps (bin 0).
  std::array<int64_t, 48> bins{};
  for (size_t k = 0; k < bins.size(); ++k)
    bins[k] = after.step_tokens_log2[k] - before.step_tokens_log2[k];
  std::array<int64_t, 48> want{};
  want[0] = 5;
  want[5] = 1;
  CHECK(bins == want);
  CHECK(after.step_tokens_sum - before.step_tokens_sum == 20 + 6);
}

TEST_CASE("engine stats: preemptions are counted per request and sum to the engine's",
          "[engine][metrics]") {
  // 16 blocks of 16 tokens: one 256-token sequence; 6 requests of 20 + 60 tokens need 5 blocks
  // each, so they preempt each other.
  EngineArgs a = testing::engine_args(
      stories(), {.quantization = "none", .num_kv_blocks = 16, .max_model_len = 256});
  a.cache.enable_prefix_caching = false;
  auto engine = Engine::create(a);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    SamplingParams p;
    p.max_tokens = 60;
    p.ignore_eos = true;
    streams.push_back(engine->add_request("r" + std::to_string(i), random_prompt(20, 10 + i), p));
  }
  int64_t preemptions = 0;
  for (auto& s : streams) {
    const RequestOutput out = last_output(*s);
    CHECK(out.num_generated_tokens == 60);
    CHECK(out.max_tokens == 60);
    preemptions += out.num_preemptions;
  }
  const EngineStats st = engine->stats();
  CHECK(st.num_preemptions > 0);
  CHECK(preemptions == st.num_preemptions);
  // Every step computed at least one token, and the bins count every step that ran the model.
  CHECK(total(st.step_tokens_log2) >= 60);
  CHECK(total(st.step_tokens_log2) <= st.num_steps);
  // Each request's 20 prompt tokens (when its first token came) and 60 generated.
  CHECK(st.step_tokens_sum == 6 * (20 + 60));
}

}  // namespace octet

// A request whose sampling fails (every logit masked to -inf) fails alone: its stream ends with
// an error and finish_reason "abort", its KV blocks are freed, a concurrent normal request
// completes exactly as it does alone, and the engine keeps serving (issue 9, class 1).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <string>

#include "engine/engine.h"
#include "engine_test_support.h"
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::collect_outcome;
using testing::random_prompt;
using testing::Result;
using testing::stories;

void require_same(const Result& a, const Result& b) {
  REQUIRE(a.error.empty());
  REQUIRE(b.error.empty());
  testing::require_same_logprobs(a, b);
  CHECK(a.text == b.text);
  CHECK(a.finish_reason == b.finish_reason);
}

}  // namespace

TEST_CASE("a request whose every logit is masked fails alone; the engine stays alive",
          "[engine][failures]") {
  auto engine = Engine::create(testing::engine_args(
      stories(), {.quantization = "none", .num_kv_blocks = 64, .max_model_len = 256}));
  const int64_t free_blocks = engine->stats().num_free_kv_blocks;

  SamplingParams normal;
  normal.temperature = 0.8f;
  normal.seed = 42;
  normal.max_tokens = 24;
  normal.logprobs = 2;
  normal.ignore_eos = true;
  const std::vector<int32_t> prompt = random_prompt(20, 1);
  const Result solo = collect_outcome(*engine->add_request("solo", prompt, normal));
  REQUIRE(solo.token_ids.size() == 24);

  // min_tokens masks every stop token; listing every id as a stop token leaves no token to
  // sample (passes validation: the ids are in the vocabulary). Greedy and random variants.
  SamplingParams masked;
  masked.max_tokens = 3;
  masked.min_tokens = 1;
  masked.stop_token_ids.resize(static_cast<size_t>(engine->vocab_size()));
  std::iota(masked.stop_token_ids.begin(), masked.stop_token_ids.end(), 0);
  SamplingParams masked_greedy = masked;
  masked_greedy.temperature = 0.0f;
  masked_greedy.logprobs = 1;

  auto bad1 = engine->add_request("bad1", random_prompt(30, 2), masked);
  auto good = engine->add_request("good", prompt, normal);
  auto bad2 = engine->add_request("bad2", random_prompt(5, 3), masked_greedy);
  const Result r1 = collect_outcome(*bad1);
  const Result rg = collect_outcome(*good);
  const Result r2 = collect_outcome(*bad2);
  for (const Result* r : {&r1, &r2}) {
    CHECK(r->finished);
    CHECK(r->finish_reason == "abort");
    CHECK_THAT(r->error, Catch::Contains("-inf"));
    CHECK(r->token_ids.empty());
  }
  require_same(rg, solo);

  // The engine is alive, holds no request and has every block back.
  CHECK(engine->wait_idle(std::chrono::milliseconds(5000)));
  EngineStats s = engine->stats();
  CHECK(s.alive);
  CHECK(s.num_requests_running == 0);
  CHECK(s.num_requests_waiting == 0);
  CHECK(s.num_free_kv_blocks == free_blocks);

  // A later request still succeeds, identical to the first solo run.
  const Result later = collect_outcome(*engine->add_request("later", prompt, normal));
  require_same(later, solo);
  CHECK(engine->stats().alive);
}

TEST_CASE("out-of-range sampling parameters are rejected before they reach the engine loop",
          "[engine][failures]") {
  auto engine = Engine::create(testing::engine_args(
      stories(), {.quantization = "none", .num_kv_blocks = 64, .max_model_len = 256}));
  SamplingParams p;
  p.max_tokens = 3;
  p.repetition_penalty = 1e-40f;  // the example: logits / 1e-40 overflow to inf
  CHECK_THROWS_AS(engine->add_request("x", {1, 2, 3}, p), SamplingParamError);
  // The context message gives exact, non-negative counts even for max_tokens INT64_MAX.
  p = SamplingParams{};
  p.max_tokens = INT64_MAX;
  CHECK_THROWS_WITH(engine->add_request("y", {1, 2, 3}, p),
                    Catch::Contains("you requested 9223372036854775810 tokens (3 in the prompt, "
                                    "9223372036854775807 in the completion)"));
  CHECK(engine->stats().alive);
}

}  // namespace octet

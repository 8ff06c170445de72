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

TEST_CASE("a request that could sample no token is refused alone, the engine stays alive",
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

  // min_tokens masks every stop token; listing every id as a stop token would leave no token
  // to sample in every step: refused when added (a 400 naming min_tokens), greedy or not,
  // while a request already running goes on untouched.
  SamplingParams masked;
  masked.max_tokens = 3;
  masked.min_tokens = 1;
  masked.stop_token_ids.resize(static_cast<size_t>(engine->vocab_size()));
  std::iota(masked.stop_token_ids.begin(), masked.stop_token_ids.end(), 0);
  SamplingParams masked_greedy = masked;
  masked_greedy.temperature = 0.0f;
  masked_greedy.logprobs = 1;

  auto good = engine->add_request("good", prompt, normal);
  for (const SamplingParams* p : {&masked, &masked_greedy}) {
    try {
      engine->add_request("bad", random_prompt(30, 2), *p);
      FAIL("a request that can sample no token was accepted");
    } catch (const RequestError& e) {
      CHECK(e.kind() == RequestErrorKind::InvalidRequest);
      CHECK(e.param() == "min_tokens");
      CHECK_THAT(e.what(), Catch::Contains("cannot be met"));
    }
  }
  // With one id left out of the stop list that token is samplable: the request runs, and
  // greedy or not its first token is that id.
  SamplingParams one_left = masked_greedy;
  one_left.stop_token_ids.pop_back();
  const int32_t last = static_cast<int32_t>(engine->vocab_size() - 1);
  const Result r1 = collect_outcome(*engine->add_request("one_left", random_prompt(5, 3), one_left));
  REQUIRE(r1.error.empty());
  REQUIRE(!r1.token_ids.empty());
  CHECK(r1.token_ids[0] == last);
  const Result rg = collect_outcome(*good);
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

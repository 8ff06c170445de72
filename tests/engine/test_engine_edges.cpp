// Engine edge cases on the tiny real stories260K model (fast): prompt logprobs of the shortest
// prompts, aborts at every moment, requests at exactly max_model_len, and concurrent requests
// under preemption and prefix caching equal to their solo runs, for several block sizes.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "engine_test_support.h"
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::collect_outcome;
using testing::random_prompt;
using testing::Result;
using testing::stories;

// Unquantized stories260K, max_model_len 256, 64 blocks of 16.
EngineArgs base_args() {
  return testing::engine_args(stories(),
                              {.quantization = "none", .num_kv_blocks = 64, .max_model_len = 256});
}

}  // namespace

TEST_CASE("engine edges: prompt_logprobs of a one-token prompt has its one entry",
          "[engine][edges]") {
  auto engine = Engine::create(base_args());
  SamplingParams p;
  p.prompt_logprobs = 2;
  for (int64_t max_tokens : {0, 1}) {
    INFO("max_tokens " << max_tokens);
    p.max_tokens = max_tokens;
    const Result r =
        collect_outcome(*engine->add_request("one" + std::to_string(max_tokens), {1}, p));
    // engine.h: entry 0 (the first prompt token) is there, without a logprob.
    REQUIRE(r.prompt_logprobs.size() == 1);
    CHECK(r.prompt_logprobs[0].token_id == 1);
    CHECK(r.prompt_logprobs[0].top.empty());
    CHECK(r.token_ids.size() == static_cast<size_t>(max_tokens));
  }
  const Result three = collect_outcome(*engine->add_request("three", {1, 5, 6}, p));
  REQUIRE(three.prompt_logprobs.size() == 3);
  CHECK(three.prompt_logprobs[0].token_id == 1);
  CHECK(three.prompt_logprobs[2].token_id == 6);
}

TEST_CASE("engine edges: abort_all ends every queued and running request", "[engine][edges]") {
  auto engine = Engine::create(base_args());
  SamplingParams p;
  p.max_tokens = 200;
  p.ignore_eos = true;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i)
    streams.push_back(engine->add_request("r" + std::to_string(i), random_prompt(20, i), p));
  REQUIRE(streams[0]->next());  // running
  engine->abort_all();
  for (auto& s : streams) {
    const Result r = collect_outcome(*s);
    CHECK(r.finish_reason == "abort");
    CHECK(r.token_ids.size() < 200);
  }
  CHECK(engine->wait_idle(std::chrono::milliseconds(5000)));
  const EngineStats st = engine->stats();
  CHECK(st.num_free_kv_blocks == st.num_kv_blocks);
  // Still serving, and the ids are free again.
  p.max_tokens = 2;
  CHECK(collect_outcome(*engine->add_request("r0", {1}, p)).token_ids.size() == 2);
}

TEST_CASE("engine: a request is validated once, at add_requests, with typed errors",
          "[engine][errors]") {
  auto engine = Engine::create(base_args());
  const auto refused = [&](std::vector<int32_t> prompt, const SamplingParams& p)
      -> std::pair<RequestErrorKind, std::string> {
    try {
      engine->add_request("x", std::move(prompt), p);
    } catch (const RequestError& e) {
      return {e.kind(), e.param()};
    }
    FAIL("accepted");
    return {};
  };
  using K = RequestErrorKind;
  SamplingParams p;
  p.max_tokens = 4;
  CHECK(refused({}, p) == std::pair{K::InvalidRequest, std::string("prompt")});
  CHECK(refused({1, 512}, p) == std::pair{K::InvalidRequest, std::string("prompt")});
  CHECK(refused({1, -3}, p) == std::pair{K::InvalidRequest, std::string("prompt")});
  SamplingParams bias = p;
  bias.logit_bias.emplace_back(600, 1.0f);
  CHECK(refused({1, 2}, bias) == std::pair{K::InvalidRequest, std::string("logit_bias")});
  SamplingParams stop = p;
  stop.stop_token_ids = {512};
  CHECK(refused({1, 2}, stop) == std::pair{K::InvalidRequest, std::string("stop_token_ids")});
  SamplingParams bad = p;
  bad.top_p = 2.0f;
  CHECK(refused({1, 2}, bad) == std::pair{K::InvalidRequest, std::string("top_p")});
  SamplingParams longer = p;
  longer.max_tokens = 250;  // 10 + 250 > 256
  CHECK(refused(std::vector<int32_t>(10, 5), longer) ==
        std::pair{K::ContextLengthExceeded, std::string("prompt")});
  longer.max_tokens = 246;  // exactly 256
  CHECK(collect_outcome(*engine->add_request("fits", std::vector<int32_t>(10, 5), longer))
            .error == "");
  // Nothing refused reached the engine.
  CHECK(engine->stats().num_requests_waiting == 0);
}

TEST_CASE("engine: every int64 seeds a stream of its own, the same seed gives the same tokens",
          "[engine][edges][seed]") {
  auto engine = Engine::create(base_args());
  SamplingParams p;
  p.temperature = 1.0f;
  p.max_tokens = 48;
  p.ignore_eos = true;
  int run_id = 0;
  const auto run = [&](std::optional<int64_t> seed) {
    p.seed = seed;
    const Result r =
        collect_outcome(*engine->add_request("s" + std::to_string(run_id++), {1, 5, 6}, p));
    REQUIRE(r.error.empty());
    return r.token_ids;
  };
  // Negative seeds are seeds too (their two's complements seed the RNG), -1 included: the
  // OpenAI server reads a request's -1 as none before the engine sees it.
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const int64_t seed : {int64_t{-5}, int64_t{-1}, int64_t{0}, kMin, kMax}) {
    INFO("seed " << seed);
    CHECK(run(seed) == run(seed));
  }
  const auto minus5 = run(-5);
  CHECK(minus5 != run(5));
  CHECK(minus5 != run(-6));
  CHECK(run(kMin) != run(kMax));
}

}  // namespace octet

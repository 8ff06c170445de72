// Logprob counts up to the whole vocabulary (vLLM's --max-logprobs -1 / 151936 with
// top_logprobs -1) on the tiny real stories260K model (vocabulary 512): every sampled and
// prompt token lists all 512 tokens, most likely first; the listed probabilities sum to 1 and
// the token's own logprob is its entry in the list. A count above the vocabulary is refused,
// naming the field.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>

#include "engine/engine.h"
#include "engine_test_support.h"
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::collect;
using testing::stories;

EngineArgs base_args() {
  return testing::engine_args(stories(),
                              {.quantization = "none", .num_kv_blocks = 64, .max_model_len = 256});
}

/// Checks one token's whole-vocabulary list: `vocab` distinct ids, logprob descending, the
/// probabilities summing to 1, and the token's own logprob and rank equal to its entry.
void check_whole_vocab(const TokenLogprobs& t, int64_t vocab) {
  REQUIRE(static_cast<int64_t>(t.top.size()) == vocab);
  std::set<int32_t> ids;
  double prob_sum = 0.0;
  int64_t own_index = -1;
  for (size_t i = 0; i < t.top.size(); ++i) {
    const auto& [id, lp] = t.top[i];
    ids.insert(id);
    prob_sum += std::exp(static_cast<double>(lp));
    CHECK(lp <= 0.0f);
    if (i > 0) CHECK(lp <= t.top[i - 1].second);
    if (id == t.token_id) own_index = static_cast<int64_t>(i);
  }
  CHECK(static_cast<int64_t>(ids.size()) == vocab);
  CHECK(*ids.begin() == 0);
  CHECK(*ids.rbegin() == vocab - 1);
  // FP32 logprobs of 512 terms: the sum is 1 to within a few 1e-6.
  CHECK(prob_sum == Approx(1.0).margin(1e-4));
  REQUIRE(own_index >= 0);
  CHECK(t.top[static_cast<size_t>(own_index)].second == t.logprob);
  CHECK(t.rank == own_index + 1);  // ranks order ties by id, as the list
}

}  // namespace

TEST_CASE("engine logprobs: k = the vocabulary size lists every token", "[engine][logprobs]") {
  auto engine = Engine::create(base_args());
  const int64_t vocab = engine->vocab_size();
  REQUIRE(vocab == 512);
  for (float temperature : {0.0f, 1.0f}) {
    INFO("temperature " << temperature);
    SamplingParams p;
    p.temperature = temperature;
    p.seed = 7;
    p.max_tokens = 4;
    p.ignore_eos = true;
    p.logprobs = vocab;
    p.prompt_logprobs = vocab;
    const testing::Result r = collect(*engine->add_request(
        "all" + std::to_string(temperature), {1, 403, 407, 261}, p));
    REQUIRE(r.logprobs.size() == 4);
    for (size_t i = 0; i < r.logprobs.size(); ++i) {
      INFO("sampled token " << i);
      CHECK(r.logprobs[i].token_id == r.token_ids[i]);
      check_whole_vocab(r.logprobs[i], vocab);
      // Greedy: the sampled token is the most likely one.
      if (temperature == 0.0f) CHECK(r.logprobs[i].top[0].first == r.token_ids[i]);
    }
    REQUIRE(r.prompt_logprobs.size() == 4);
    CHECK(r.prompt_logprobs[0].top.empty());  // the first prompt token has no logprob
    for (size_t i = 1; i < r.prompt_logprobs.size(); ++i) {
      INFO("prompt token " << i);
      check_whole_vocab(r.prompt_logprobs[i], vocab);
    }
  }
}

TEST_CASE("engine logprobs: a count above the vocabulary is refused, naming the field",
          "[engine][logprobs]") {
  auto engine = Engine::create(base_args());
  const int64_t vocab = engine->vocab_size();
  for (const char* field : {"logprobs", "prompt_logprobs"}) {
    INFO(field);
    SamplingParams p;
    p.max_tokens = 1;
    (std::string(field) == "logprobs" ? p.logprobs : p.prompt_logprobs) = vocab + 1;
    try {
      engine->add_request(std::string("over_") + field, {1, 403}, p);
      FAIL("accepted a count of vocab + 1");
    } catch (const RequestError& e) {
      CHECK(e.param() == field);
      CHECK_THAT(e.what(), Catch::Contains("513") && Catch::Contains("512"));
    }
  }
  // The engine stays usable: the same request at exactly the vocabulary size runs.
  SamplingParams ok;
  ok.max_tokens = 1;
  ok.logprobs = vocab;
  const testing::Result r = collect(*engine->add_request("ok", {1, 403}, ok));
  REQUIRE(r.logprobs.size() == 1);
  CHECK(static_cast<int64_t>(r.logprobs[0].top.size()) == vocab);
}

}  // namespace octet

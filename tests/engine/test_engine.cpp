// The continuous-batching engine end to end on the real SmolLM2-135M-Instruct (FP8 W8A8):
// batch invariance for every kv_cache_dtype, preemption by recompute, prefix caching, abort,
// and that FP8 KV scales are honoured (issue 4 acceptance).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "engine/engine.h"
#include "engine_test_support.h"
#include "test_model_paths.h"
#include "gguf_writer.h"

namespace octet {
namespace {

using testing::smollm2;

using testing::collect;
using testing::Result;

void require_identical(const Result& a, const Result& b) {
  testing::require_same_logprobs(a, b);  // bitwise: the same float, not approximately
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    INFO("token " << i);
    CHECK(a.logprobs[i].rank == b.logprobs[i].rank);
  }
  CHECK(a.text == b.text);
}

// 16 prompts of varied lengths (random ids from a fixed seed, 3..90 tokens).
std::vector<std::vector<int32_t>> make_prompts(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p(3 + rng() % 88);
    for (int32_t& t : p) t = static_cast<int32_t>(100 + rng() % 40000);
    prompts.push_back(p);
  }
  return prompts;
}

SamplingParams params_for(int i) {
  SamplingParams p;
  p.max_tokens = 10 + i % 5;
  p.ignore_eos = true;
  p.logprobs = 3;
  if (i % 2 == 0) {
    p.temperature = 0.0f;
  } else {
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.seed = 1000 + i;
  }
  return p;
}

EngineArgs args_for(const std::string& dtype) {
  return testing::engine_args(smollm2(), {.kv_cache_dtype = dtype,
                                          .calculate_kv_scales = true,
                                          .kv_cache_memory_bytes = 64 << 20,
                                          .max_model_len = 1024});
}

}  // namespace

TEST_CASE("engine: a request is bit-identical alone and in a batch of 16, every kv dtype",
          "[engine]") {
  const auto prompts = make_prompts(16, 42);
  for (const std::string dtype : {"bf16", "fp16", "fp8_e4m3", "fp8_e5m2"}) {
    INFO("kv_cache_dtype " << dtype);
    auto engine = Engine::create(args_for(dtype));
    // Solo runs of request 3 (seeded sampling) and request 6 (greedy).
    std::vector<Result> solo;
    for (int target : {3, 6})
      solo.push_back(collect(*engine->add_request("solo" + std::to_string(target),
                                                  prompts[target], params_for(target))));
    // All 16 at once: they share steps, prefill chunks and decode batches.
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 16; ++i)
      streams.push_back(engine->add_request("batch" + std::to_string(i), prompts[i],
                                            params_for(i)));
    std::vector<Result> batch;
    for (auto& s : streams) batch.push_back(collect(*s));
    require_identical(solo[0], batch[3]);
    require_identical(solo[1], batch[6]);
    CHECK(batch[3].token_ids.size() == 13);
    CHECK(batch[3].finish_reason == "length");
    for (int i = 0; i < 16; ++i) CHECK(batch[i].token_ids.size() == 10u + i % 5);
    const EngineStats st = engine->stats();
    CHECK(st.num_requests_running == 0);
    CHECK(st.num_requests_waiting == 0);
    // Solo 13 + 11 tokens; the batch sum of 10 + i % 5 over i < 16 = 160 + 3 * 10.
    CHECK(st.generation_tokens == 13 + 11 + 190);
  }
}

TEST_CASE("engine: preemption by recompute gives the solo outputs", "[engine]") {
  EngineArgs a = args_for("fp8");
  a.scheduler.max_model_len = 256;
  a.cache.kv_cache_memory_bytes = 0;
  a.cache.num_kv_blocks = 16;  // one 256-token sequence; 8 requests need ~5 blocks each
  a.cache.enable_prefix_caching = false;
  auto engine = Engine::create(a);
  const auto prompts = make_prompts(8, 7);
  std::vector<Result> solo;
  for (int i = 0; i < 8; ++i) {
    SamplingParams p = params_for(i);
    p.max_tokens = 30;
    solo.push_back(collect(*engine->add_request("solo" + std::to_string(i), prompts[i], p)));
  }
  CHECK(engine->stats().num_preemptions == 0);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 8; ++i) {
    SamplingParams p = params_for(i);
    p.max_tokens = 30;
    streams.push_back(engine->add_request("b" + std::to_string(i), prompts[i], p));
  }
  for (int i = 0; i < 8; ++i) {
    INFO("request " << i);
    require_identical(solo[i], collect(*streams[i]));
  }
  CHECK(engine->stats().num_preemptions > 0);
  CHECK(engine->stats().num_free_kv_blocks == 16);
}

TEST_CASE("engine: prefix cache hits give the same output and are counted", "[engine]") {
  auto engine = Engine::create(args_for("fp8"));
  auto prompt = make_prompts(1, 99)[0];
  while (prompt.size() < 70) prompt.push_back(prompt[prompt.size() % 7]);
  SamplingParams p = params_for(0);
  const Result first = collect(*engine->add_request("a", prompt, p));
  const EngineStats s1 = engine->stats();
  const Result second = collect(*engine->add_request("b", prompt, p));
  const EngineStats s2 = engine->stats();
  require_identical(first, second);
  // 70 tokens: the second lookup hits the 4 full blocks (64 tokens).
  CHECK(s2.prefix_cache_queries - s1.prefix_cache_queries == 70);
  CHECK(s2.prefix_cache_hits - s1.prefix_cache_hits == 64);
}

TEST_CASE("engine: abort frees the blocks at once and ends the stream", "[engine]") {
  auto engine = Engine::create(args_for("fp8"));
  SamplingParams p;
  p.max_tokens = 500;
  p.ignore_eos = true;
  auto s = engine->add_request("long", make_prompts(1, 5)[0], p);
  auto first = s->next();
  REQUIRE(first);
  engine->abort("long");
  std::string reason;
  while (auto o = s->next())
    if (o->finished) reason = o->finish_reason;
  CHECK(reason == "abort");
  const EngineStats st = engine->stats();
  CHECK(st.num_requests_running == 0);
  CHECK(st.num_free_kv_blocks == st.num_kv_blocks);
}

TEST_CASE("engine: bad requests are rejected with a clear message", "[engine]") {
  auto engine = Engine::create(args_for("fp8"));
  SamplingParams p;
  p.max_tokens = 1000;
  CHECK_THROWS_WITH(engine->add_request("x", std::vector<int32_t>(100, 5), p),
                    Catch::Contains("maximum context length is 1024") &&
                        Catch::Contains("1100"));
  p.max_tokens = 4;
  CHECK_THROWS_WITH(engine->add_request("x", {}, p), Catch::Contains("no tokens"));
  CHECK_THROWS_WITH(engine->add_request("x", {49152}, p), Catch::Contains("vocabulary"));
  // The engine keeps serving.
  CHECK(collect(*engine->add_request("ok", {1, 2, 3}, p)).token_ids.size() <= 4);
}

}  // namespace octet

namespace octet {
// The chat markers of SmolLM2's default system prompt once saturated FP8 scales calibrated on
// plain text only, and this question got "L'Étoile de la Cité, la Cité, ..." (fresh-user run).
TEST_CASE("engine: a chat prompt with the default system prompt is answered under FP8 KV",
          "[engine][fp8]") {
  const std::string prompt =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
      "<|im_start|>assistant\n";
  // fp8_e5m2 (2 mantissa bits) still answers "L'Étoile, the capital of France" here: its
  // rounding, not its scales (its range needs none), is what this small model cannot take.
  for (const std::string dtype : {"bf16", "fp8_e4m3"}) {
    INFO("kv_cache_dtype " << dtype);
    auto engine = Engine::create(args_for(dtype));
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 16;
    const Result r = collect(*engine->add_request("q", engine->tokenizer().tokenize(prompt, true), p));
    CHECK_THAT(r.text, Catch::Contains("Paris"));
    CHECK(r.finish_reason == "stop");
  }
}
}  // namespace octet

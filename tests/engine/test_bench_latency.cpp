// `octet bench latency` through the Engine (engine/benchmarks.h) on the tiny stories260K model:
// it prefills the prompt it was asked for, runs the decode steps it was asked for (ignoring
// EOS, greedy), and reports positive figures; the engine's own counters confirm the counts.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "engine/benchmarks.h"
#include "engine/engine.h"
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::stories;

}  // namespace

TEST_CASE("bench latency runs through the Engine: the asked counts, positive figures",
          "[engine][bench]") {
  const int64_t input_len = 40, output_len = 12;
  const EngineArgs args = latency_engine_args(stories(), "none", "channel", input_len, output_len);
  CHECK(args.scheduler.max_num_seqs == 1);
  CHECK(args.scheduler.max_num_batched_tokens >= input_len);  // the prefill is one step
  CHECK_FALSE(args.cache.enable_prefix_caching);              // repeated runs recompute
  auto engine = Engine::create(args);
  for (int run = 0; run < 2; ++run) {
    const LatencyResult r = bench_latency(*engine, input_len, output_len);
    CHECK(r.input_len == input_len);
    CHECK(r.output_len == output_len);
    CHECK(std::isfinite(r.prefill_tokens_per_second));
    CHECK(r.prefill_tokens_per_second > 0);
    CHECK(std::isfinite(r.decode_tokens_per_second));
    CHECK(r.decode_tokens_per_second > 0);
    CHECK(r.linear_format == "fp32");  // quantization none
    CHECK(r.decode_weight_bytes > 0);
  }
  // The engine's counters: every prompt token computed (no prefix-cache hit on the second run)
  // and output_len + 1 tokens generated per run (the prefill's, then one per decode step).
  const EngineStats st = engine->stats();
  CHECK(st.prompt_tokens == 2 * input_len);
  CHECK(st.generation_tokens == 2 * (output_len + 1));
  CHECK(st.prefix_cache_hits == 0);
  CHECK(st.num_requests_running == 0);
  CHECK(st.num_free_kv_blocks == st.num_kv_blocks);
}

TEST_CASE("bench latency refuses lengths that are not positive or do not fit", "[engine][bench]") {
  CHECK_THROWS_AS(latency_engine_args(stories(), "none", "channel", 0, 4), std::invalid_argument);
  CHECK_THROWS_AS(latency_engine_args(stories(), "none", "channel", 4, 0), std::invalid_argument);
  auto engine = Engine::create(latency_engine_args(stories(), "none", "channel", 8, 4));
  CHECK_THROWS_AS(bench_latency(*engine, 8, 0), std::invalid_argument);
  try {
    (void)bench_latency(*engine, 8, 5);  // 8 + 5 + 1 > max_model_len 13
    FAIL("accepted");
  } catch (const RequestError& e) {
    CHECK(e.kind() == RequestErrorKind::ContextLengthExceeded);
  }
  CHECK(bench_latency(*engine, 8, 4).output_len == 4);
}

}  // namespace octet

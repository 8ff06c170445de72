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

// The CPU rehearsal of the CUDA kernel count (kernels/launch_counter.h, launch_model.h), by hand
// for stories260K (5 layers, hidden 64, 8 heads x 8, 4 KV heads, FFN 172, vocab 512) at a
// decode step (one sequence, position < 512):
//   outside the layers: embedding, final rms_norm, gather_rows, then the lm_head: FP32 (with
//     quantization none) one cuBLASLt GEMM = 4
//   FP32 (quantization none), a layer: rms_norm 1, q/k/v 3 (cuBLASLt F32, no bias), rope of q
//     and k with the K/V cache write 1, attention 2 (split + merge, as a graph runs it),
//     o_proj 1, rms_norm 1, gate/up 2, silu_mul 1, down_proj 1 = 13
//   FP8 (quantization fp8): the first layer's input rms_norm with the quantization of its
//     output 1; a layer: q/k/v merged (one input): one GEMM of 128 stacked outputs + one
//     epilogue = 2; rope with the K/V cache write 1; attention 2; o_proj: quantization +
//     GEMM + one row kernel (epilogue, residual add, rms_norm, quantization for gate/up) = 3;
//     gate/up merged: GEMM of 344 + one row kernel (both epilogues, silu_mul, quantization) =
//     2; down_proj: simt_gemm (k = 172 is no multiple of 16, cuBLASLt's FP8 rule) + the next
//     rms_norm fused with the residual add and quantization (the last layer's: the final
//     norm) = 2; 12 in all; outside them embedding, gather_rows, the BF16 lm_head
//     (activations to BF16 + GEMM) = 4
TEST_CASE("bench latency on the CPU counts the CUDA backend's kernels of a decode step",
          "[engine][bench]") {
  struct Case {
    const char* quantization;
    int64_t kernels;
  };
  for (const Case c : {Case{"none", 4 + 5 * 13}, Case{"fp8", 4 + 1 + 5 * 12}}) {
    CAPTURE(c.quantization);
    EngineArgs args = latency_engine_args(stories(), c.quantization, "channel", 8, 4);
    args.device = "cpu";
    args.count_kernel_launches = true;
    auto engine = Engine::create(args);
    CHECK(engine->decode_step_kernels() == -1);  // no decode step yet
    CHECK(engine->num_hidden_layers() == 5);
    (void)bench_latency(*engine, 8, 4);
    CHECK(engine->decode_step_kernels() == c.kernels);
  }
  // Without the flag nothing is counted.
  auto engine = Engine::create(latency_engine_args(stories(), "none", "channel", 8, 4));
  (void)bench_latency(*engine, 8, 4);
  CHECK(engine->decode_step_kernels() == -1);
}

}  // namespace octet

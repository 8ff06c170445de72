// kernels/cuda/launch_model.h: the kernels the CUDA backend queues per call, by hand from
// cuda_backend_*.cu's dispatch (the rules LaunchCounter applies; test_bench_latency counts whole
// decode steps with them).
#include <catch2/catch.hpp>

#include <cstdint>

#include "kernels/cuda/launch_model.h"

namespace octet::cuda_kernels {

TEST_CASE("launch model: GEMMs take cuBLASLt where its shape rule allows, else one simt kernel",
          "[launch]") {
  CHECK(launches_linear_w8a8(4096, 14336) == 2);  // FP8 GEMM + the scaling epilogue
  CHECK(launches_linear_w8a8(64, 172) == 1);      // k % 16 != 0: simt_gemm, scales inside
  CHECK(launches_linear_w8a8(37, 64) == 1);       // n % 4 != 0
  CHECK(launches_linear(GemmInput::F32, 64, 172, false) == 1);  // F32: k % 4 == 0 suffices
  CHECK(launches_linear(GemmInput::F32, 64, 64, true) == 2);     // + the bias add
  CHECK(launches_linear(GemmInput::F32, 64, 70, true) == 1);     // simt_gemm adds the bias
  // BF16 weights (the lm_head): activations to BF16, then the GEMM; simt_gemm when k % 8 != 0.
  CHECK(launches_linear(GemmInput::BF16, 128256, 4096, false) == 2);
  CHECK(launches_linear(GemmInput::BF16, 512, 60, false) == 1);
  CHECK(launches_linear_w8a8_partials(4096, 4096, 32) == 32);  // one GEMM per part
  CHECK(launches_linear_w8a8_partials(64, 168, 12) == 1);      // parts of 14: simt, all parts
  CHECK(launches_linear_w8a8_merged(6144, 4096) == 2);  // q/k/v of Llama-3.1-8B
  CHECK(launches_linear_w8a8_merged(344, 64) == 2);     // stories260K's gate/up
  CHECK(launches_linear_w8a8_merged(130, 64) == 0);     // refused: one call each
  CHECK(launches_rope() == 1);  // q and k in one kernel
}

TEST_CASE("launch model: paged attention's split, merge and prefill kernels", "[launch]") {
  // A decode step (every sequence one query): split + merge, whatever the lengths.
  const int64_t one[] = {0, 1, 2}, short_lens[] = {5, 9};
  CHECK(launches_paged_attention(2, one, short_lens, 0) == 2);
  // One sequence of 3 rows at positions 2..4 (eager): the split kernel only.
  const int64_t three[] = {0, 3}, len5[] = {5};
  CHECK(launches_paged_attention(1, three, len5, 0) == 1);
  // Rows at positions 510..512 cross the 512-position partition edge: split + merge; with a
  // 100-token window they see 411..512, still across it; a 1-token window keeps each in its
  // own partition.
  const int64_t len513[] = {513};
  CHECK(launches_paged_attention(1, three, len513, 0) == 2);
  CHECK(launches_paged_attention(1, three, len513, 100) == 2);
  CHECK(launches_paged_attention(1, three, len513, 1) == 1);
  // A prefill of 8 rows beside a 2-row decode: prefill + split.
  const int64_t mixed[] = {0, 8, 10}, mixed_lens[] = {8, 20};
  CHECK(launches_paged_attention(2, mixed, mixed_lens, 0) == 2);
  // A prefill alone: the tiled kernel only.
  const int64_t eight[] = {0, 8}, len8[] = {8};
  CHECK(launches_paged_attention(1, eight, len8, 0) == 1);
  CHECK(launches_paged_attention(0, eight, len8, 0) == 0);
}

}  // namespace octet::cuda_kernels

#pragma once
// y = x W^T with W stored as bf16 bits: the "16-bit" path for lm_head and embeddings.
// bf16 widens to FP32 exactly (bits << 16); products and sums in FP32.
#include <cstdint>

#include "kernels/common/views.h"  // Bf16Layout

namespace octet {

/// y: [m, n] = x: [m, k] . W^T, W: [n, k] bf16 bits row-major. Threads over n; AVX-512F when
/// the CPU has it, else AVX2+FMA, else scalar (runtime dispatch, once per process). Batch invariant:
/// row i of y is bit-identical for every m, position of the row in x and thread count (each
/// output is one fixed FP32 accumulation over k; up to 4 rows only share the weight loads).
void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k);

/// True when the CPU has AVX2+FMA (linear_bf16 runs that path unless AVX-512F is there too).
bool linear_bf16_avx2_available();
/// True when linear_bf16 runs the AVX-512F path (linear_bf16_avx512.cpp).
bool linear_bf16_avx512_available();

// Explicit paths, for tests and benchmarks: the scalar one (index-order FP32 sum) and the AVX2
// one (8-lane FMA chain, lanes summed, the k % 8 tail added in order) and the AVX-512 one (the
// same on 16 lanes, k % 16 tail); each aborts when its _available() is false. Each is batch
// invariant; they differ from each other in summation order.
void linear_bf16_scalar(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                        int64_t k);
void linear_bf16_avx2(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                      int64_t k);
void linear_bf16_avx512(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                        int64_t k);
/// Bf16Layout::Rows8x8: n rounded up to a multiple of 8 (padding rows zero), per block of 8
/// rows (8 k values): for each c < k / 8, values [8 c, 8 c + 8) of rows 0..7 in row order (64
/// values), then each row's k % 8 tail values in row order. One GEMV step reads 128 bytes in
/// sequence where the row-major AVX2 GEMV reads 4 rows' streams (Zen 3, SmolLM2's 49152 x 576
/// lm_head from DRAM, 2 threads: 22 -> 29-31 GB/s).
int64_t bf16_rows8x8_elements(int64_t n, int64_t k);
/// src: [n, k] row-major -> dst: bf16_rows8x8_elements(n, k) values.
void pack_bf16_rows8x8(const uint16_t* src, int64_t n, int64_t k, uint16_t* dst);
/// linear_bf16_avx2 on a weight in Rows8x8 (pack_bf16_rows8x8), bit for bit; aborts without
/// AVX2+FMA.
void linear_bf16_rows8x8(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                         int64_t k);
/// The layout linear_bf16 reads fastest on this CPU: Rows8x8 when it runs the AVX2 path,
/// RowMajor otherwise.
Bf16Layout linear_bf16_preferred_layout();

/// Aborts with "needs AVX-512F" (linear_bf16_avx512 on a CPU or build without it).
[[noreturn]] void linear_bf16_avx512_unavailable();

namespace ref {
/// Plain reference: widen each weight, FP32 dot product in index order.
void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k);
}  // namespace ref

}  // namespace octet

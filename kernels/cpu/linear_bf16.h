#pragma once
// y = x W^T with W stored as bf16 bits: the "16-bit" path for lm_head and embeddings.
// bf16 widens to FP32 exactly (bits << 16); products and sums in FP32.
#include <cstdint>

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
/// Aborts with "needs AVX-512F" (linear_bf16_avx512 on a CPU or build without it).
[[noreturn]] void linear_bf16_avx512_unavailable();

namespace ref {
/// Plain reference: widen each weight, FP32 dot product in index order.
void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k);
}  // namespace ref

}  // namespace octet

#pragma once
// y = x W^T with W stored as bf16 bits: the "16-bit" path for lm_head and embeddings.
// bf16 widens to FP32 exactly (bits << 16); products and sums in FP32.
#include <cstdint>

namespace octet {

/// y: [m, n] = x: [m, k] . W^T, W: [n, k] bf16 bits row-major. OpenMP over n; AVX2+FMA when
/// the CPU has them (runtime dispatch, once per process), scalar otherwise. Batch invariant:
/// row i of y is bit-identical for every m, position of the row in x and thread count (each
/// output is one fixed FP32 accumulation over k; up to 4 rows only share the weight loads).
void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k);

/// True when linear_bf16 runs the AVX2+FMA path.
bool linear_bf16_avx2_available();

// Explicit paths, for tests and benchmarks: the scalar one (index-order FP32 sum) and the AVX2
// one (8-lane FMA chain, lanes summed, the k % 8 tail added in order); _avx2 aborts when
// linear_bf16_avx2_available() is false. Each is batch invariant; they differ from each other
// in summation order.
void linear_bf16_scalar(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                        int64_t k);
void linear_bf16_avx2(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                      int64_t k);

namespace ref {
/// Plain reference: widen each weight, FP32 dot product in index order.
void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k);
}  // namespace ref

}  // namespace octet

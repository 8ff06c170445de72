#pragma once
// Fast FP32 ops for the forward pass: the same contracts as the plain references in ops_ref.h
// (shapes, layouts, in-place rules), vectorised with AVX2+FMA and threaded with OpenMP where the
// work is large enough. Each function picks the AVX2 code at run time when the CPU has
// AVX2+FMA+F16C (fp8_avx2_available()), else falls back to the reference (linear: to
// scalar::linear, a batch-invariant scalar kernel).
// Agreement with ref:: (tested in tests/kernels/test_ops.cpp):
//   rope               bit-identical (same float angle, same std::cos/std::sin, no FMA);
//   rms_norm, linear   FP32 summation order only: |y - y_ref| <= ~k * eps * sum |terms|;
//   silu_mul           vector exp (Cephes polynomial, <= 2 ulp) instead of std::exp.
#include <cstdint>

#include "kernels/cpu/ops_ref.h"

namespace octet::cpu {

/// y[n] = x[n] / sqrt(mean(x^2) + eps) * weight[n]; x, y: [n] (may alias); weight: [n].
void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps);

/// rms_norm of each of m rows: x, y: [m, n] (may alias). Rows spread over threads.
void rms_norm_rows(const float* x, const float* weight, float* y, int64_t m, int64_t n,
                   float eps);

/// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]); x: [m, k], w: [n, k] ([out, in]), y: [m, n].
/// m == 1: GEMV (weights streamed once, 4 rows per activation load); m > 1: blocks of weight rows
/// kept in L2 while all m rows stream past (3 x 4 register tile). Threads split the n rows.
/// Batch invariant: row i of y is bit-identical for every m, position of the row in x and
/// thread count (each output is one 8-lane FP32 FMA chain over k in order, lanes summed the
/// same way in every tile shape); the path (AVX2 or scalar) is chosen per process.
void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
            int64_t k);

/// Rotate in place x: [num_heads, head_dim] at position pos (see ref::rope). cos/sin are computed
/// once per frequency and shared by all heads.
void rope(float* x, int64_t num_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
          const float* inv_freq, RopeLayout layout);

/// rope for num_tokens rows of x (row t starts at x + t * row_stride, holds [num_heads,
/// head_dim]) at positions[t]. Tokens spread over threads.
void rope_rows(float* x, int64_t num_tokens, int64_t row_stride, int64_t num_heads,
               int64_t head_dim, int64_t rot_dim, const int64_t* positions,
               const float* inv_freq, RopeLayout layout);

/// out[n] = silu(gate[n]) * up[n] (see ref::silu_mul); out may alias gate or up.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// The scalar linear that cpu::linear runs without AVX2 (batch invariant, see linear).
namespace scalar {
void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
            int64_t k);
}  // namespace scalar

// Explicit AVX2 paths, for tests and benchmarks (abort without AVX2+FMA+F16C).
namespace avx2 {
void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps);
void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
            int64_t k);
void rope(float* x, int64_t num_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
          const float* inv_freq, RopeLayout layout);
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
}  // namespace avx2

}  // namespace octet::cpu

#pragma once
// Internal to the W8A8 linear files (w8a8_linear*.cpp): argument checks and the one epilogue
// every path and every batch size shares, so that y = acc * (s_a * s_w) + bias rounds the same
// way for a row whatever m is (batch invariance, docs/benchmarks.md).
#include <cstdint>

#include "kernels/cpu/w8a8.h"

namespace octet::w8a8_detail {

/// Aborts with a message on a negative shape or a null pointer the shape needs.
void check_args(const uint8_t* qa, const float* a_scale, const Fp8WeightView& w, float* y,
                int64_t m);

/// y_row[j] = acc[j - j0] * (sa * s_w[j]) + (bias ? bias[j] : 0) for j in [j0, j1): two FP32
/// roundings (multiply, then add), never fused into an FMA (the function is compiled apart
/// with contraction off), identical for every path and batch size.
void epilogue(float* y_row, const float* acc, int64_t j0, int64_t j1, float sa,
              const Fp8WeightView& w, const float* bias);

/// The activation scale of row i.
inline float row_scale(const float* a_scale, ScaleGranularity g, int64_t i) {
  return g == ScaleGranularity::PerRow ? a_scale[i] : a_scale[0];
}

}  // namespace octet::w8a8_detail

#pragma once
// Internal to the W8A8 linear files (w8a8_linear*.cpp): argument checks, where a path's sums go
// (the one epilogue every path and batch size shares, or raw part sums for a row-parallel
// layer), so that y = acc * (s_a * s_w) + bias rounds the same way for a row whatever m is
// (batch invariance, docs/benchmarks.md) and whatever the tensor-parallel size is.
#include <cstdint>

#include "kernels/cpu/w8a8.h"

namespace octet::w8a8_detail {

/// Aborts naming `path` unless w is row-major (only the AVX2 path reads Rows8x32).
void require_row_major(const Fp8WeightView& w, const char* path);

/// Aborts with a message on a negative shape, a null pointer the shape needs, or a k_groups
/// that is not a positive divisor of k.
void check_args(const uint8_t* qa, const Fp8WeightView& w, int64_t m);

/// y_row[j] = acc[j - j0] * (sa * s_w[j]) + (bias ? bias[j] : 0) for j in [j0, j1): two FP32
/// roundings (multiply, then add), never fused into an FMA (the function is compiled apart
/// with contraction off), identical for every path and batch size.
void epilogue(float* y_row, const float* acc, int64_t j0, int64_t j1, float sa,
              const Fp8WeightView& w, const float* bias);

/// out[r] = ((parts[r] + parts[stride + r]) + ...) + parts[(groups - 1) * stride + r] for
/// r < count: the k-group sums added in group order (one function, so the fused path and
/// linear_w8a8_combine add the same way).
void sum_parts(const float* parts, int64_t groups, int64_t stride, int64_t count, float* out);

/// Where the raw sums of one (row, output range) go. Fused (partials == nullptr): the parts
/// summed in order, then the epilogue into y: [m, n]. Partials: acc[g, i, j] = part g,
/// acc: [w.k_groups, m, n].
struct Sink {
  float* y = nullptr;
  const float* a_scale = nullptr;
  ScaleGranularity a_granularity = ScaleGranularity::PerRow;
  const float* bias = nullptr;
  float* partials = nullptr;
  int64_t m = 0;

  /// Row i, outputs [j0, j1): parts[g * part_stride + (j - j0)] is part g of output j.
  void emit(const Fp8WeightView& w, int64_t i, int64_t j0, int64_t j1, const float* parts,
            int64_t part_stride) const;
  /// Fused sink only: row i, outputs [j0, j1) whose parts are already summed in sum_parts'
  /// order (sum[j - j0]); the epilogue into y.
  void emit_sum(const Fp8WeightView& w, int64_t i, int64_t j0, int64_t j1,
                const float* sum) const;
};

/// The activation scale of row i.
inline float row_scale(const float* a_scale, ScaleGranularity g, int64_t i) {
  return g == ScaleGranularity::PerRow ? a_scale[i] : a_scale[0];
}

/// The paths, each writing through a Sink (w8a8_linear.cpp, _avx2.cpp, _avx512.cpp).
void run_scalar(const uint8_t* qa, const Fp8WeightView& w, const Sink& sink, int64_t m);
void run_avx2(const uint8_t* qa, const Fp8WeightView& w, const Sink& sink, int64_t m);
void run_avx512(const uint8_t* qa, const Fp8WeightView& w, const Sink& sink, int64_t m);
/// Small m (1-4) over `count` weights of one input in one parallel loop, each output as
/// run_avx2 gives it; false (nothing run) for a larger m or unless every weight is Rows8x32
/// with the same k and k_groups.
bool run_avx2_gemv_multi(const uint8_t* qa, const Fp8WeightView* ws, const Sink* sinks,
                         int count, int64_t m);

}  // namespace octet::w8a8_detail

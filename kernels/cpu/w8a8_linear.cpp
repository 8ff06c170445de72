// W8A8 linear: the plain reference, the portable scalar path and the run-time choice of path.
// The AVX2 paths live in w8a8_linear_avx2.cpp.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/common/check.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/w8a8.h"
#include "kernels/cpu/w8a8_internal.h"

namespace octet {

namespace {

[[noreturn]] void fail(const char* what) {
  ::octet::detail::check_failed(__FILE__, __LINE__, "linear_w8a8",
                                ::octet::detail::check_message("octet: linear_w8a8: ", what));
}

// All 256 E4M3 codes decoded (exact), for the scalar paths.
const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

}  // namespace

namespace w8a8_detail {

void check_args(const uint8_t* qa, const float* a_scale, const Fp8WeightView& w, float* y,
                int64_t m) {
  if (m < 0 || w.n < 0 || w.k < 0) fail("negative shape");
  if (m > 0 && w.n > 0 && (y == nullptr || a_scale == nullptr || w.scale == nullptr))
    fail("null output or scale");
  if (m > 0 && w.n > 0 && w.k > 0 && (qa == nullptr || w.data == nullptr)) fail("null operand");
}

// Out of line and without contraction: a compiler must not fuse acc * s + bias into an FMA in
// some callers and not in others (see w8a8_internal.h).
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((noinline, optimize("fp-contract=off")))
#else
__attribute__((noinline))
#endif
void epilogue(float* y_row, const float* acc, int64_t j0, int64_t j1, float sa,
              const Fp8WeightView& w, const float* bias) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  for (int64_t j = j0; j < j1; ++j) {
    const float sw = w.granularity == ScaleGranularity::PerRow ? w.scale[j] : w.scale[0];
    y_row[j] = acc[j - j0] * (sa * sw) + (bias ? bias[j] : 0.0f);
  }
}

}  // namespace w8a8_detail

using w8a8_detail::check_args;
using w8a8_detail::row_scale;

namespace ref {

void linear_w8a8(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                 const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  check_args(qa, a_scale, w, y, m);
  const int64_t n = w.n, k = w.k;
  for (int64_t i = 0; i < m; ++i) {
    const float sa = a_granularity == ScaleGranularity::PerRow ? a_scale[i] : a_scale[0];
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t)
        acc += fp8_e4m3_to_float(qa[i * k + t]) * fp8_e4m3_to_float(w.data[j * k + t]);
      const float sw = w.granularity == ScaleGranularity::PerRow ? w.scale[j] : w.scale[0];
      y[i * n + j] = acc * (sa * sw) + (bias ? bias[j] : 0.0f);
    }
  }
}

}  // namespace ref

// Per (row, output): a plain FP32 sum in index order, then the shared epilogue; threads split
// the outputs, so row i's result does not depend on m or the thread count.
void linear_w8a8_scalar(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                        const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  check_args(qa, a_scale, w, y, m);
  const int64_t n = w.n, k = w.k;
  const auto& lut = e4m3_table();
  std::vector<float> a(static_cast<size_t>(m * k));  // activations decoded once
  for (int64_t i = 0; i < m * k; ++i) a[i] = lut[qa[i]];
#pragma omp parallel if (n * k * std::max<int64_t>(m, 1) > 65536)
  {
    std::vector<float> wr(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t t = 0; t < k; ++t) wr[t] = lut[w.data[j * k + t]];  // each row decoded once
      for (int64_t i = 0; i < m; ++i) {
        const float* ar = a.data() + i * k;
        float acc = 0.0f;
        for (int64_t t = 0; t < k; ++t) acc += ar[t] * wr[t];
        w8a8_detail::epilogue(y + i * n, &acc, j, j + 1, row_scale(a_scale, a_granularity, i),
                              w, bias);
      }
    }
  }
}

// The path is chosen once per process by CPU features, never by m: each path is batch
// invariant on its own, two paths are not bit-identical to each other.
void linear_w8a8(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                 const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  if (w8a8_avx512_available()) {
    linear_w8a8_avx512(qa, a_scale, a_granularity, w, bias, y, m);
  } else if (fp8_avx2_available()) {
    linear_w8a8_avx2(qa, a_scale, a_granularity, w, bias, y, m);
  } else {
    linear_w8a8_scalar(qa, a_scale, a_granularity, w, bias, y, m);
  }
}

}  // namespace octet

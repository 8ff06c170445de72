// W8A8 linear: the plain reference, the portable scalar path and the run-time choice of path.
// The AVX2 paths live in w8a8_linear_avx2.cpp.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/check.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/w8a8.h"
#include "kernels/cpu/w8a8_internal.h"
#include "kernels/cpu/thread_team.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

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

void require_row_major(const Fp8WeightView& w, const char* path) {
  if (w.layout != Fp8Layout::RowMajor && w.n > 0 && w.k > 0)
    fail((std::string(path) + " reads row-major weights only (rows8x32: the avx2 path)").c_str());
}

void check_args(const uint8_t* qa, const Fp8WeightView& w, int64_t m) {
  if (m < 0 || w.n < 0 || w.k < 0) fail("negative shape");
  if (w.k_groups < 1 || w.k % w.k_groups != 0) fail("k_groups must divide k");
  if (m > 0 && w.n > 0 && w.k > 0 && (qa == nullptr || w.data == nullptr)) fail("null operand");
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// epilogue's products and sums, 8 outputs at a time: the same IEEE operations in the same order
// (sa * sw, acc times that, + bias or + 0), so the same bits. Compiled for AVX2 without FMA and
// without contraction (a build with -mfma must not fuse the multiply and the add either).
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((noinline, target("avx2"), optimize("fp-contract=off")))
#else
__attribute__((noinline, target("avx2")))
#endif
int64_t epilogue_avx2(float* y_row, const float* acc, int64_t j0, int64_t j1, float sa,
                      const Fp8WeightView& w, const float* bias) {
  const bool per_row = w.granularity == ScaleGranularity::PerRow;
  const __m256 vsa = _mm256_set1_ps(sa), sw0 = _mm256_set1_ps(w.scale[0]);
  int64_t j = j0;
  for (; j + 8 <= j1; j += 8) {
    const __m256 sw = per_row ? _mm256_loadu_ps(w.scale + j) : sw0;
    const __m256 b = bias ? _mm256_loadu_ps(bias + j) : _mm256_setzero_ps();
    _mm256_storeu_ps(y_row + j, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(acc + (j - j0)),
                                                            _mm256_mul_ps(vsa, sw)),
                                              b));
  }
  return j;
}
#endif

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
  int64_t j = j0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool avx2 = fp8_avx2_available();
  if (avx2) j = epilogue_avx2(y_row, acc, j0, j1, sa, w, bias);
#endif
  for (; j < j1; ++j) {
    const float sw = w.granularity == ScaleGranularity::PerRow ? w.scale[j] : w.scale[0];
    y_row[j] = acc[j - j0] * (sa * sw) + (bias ? bias[j] : 0.0f);
  }
}

__attribute__((noinline)) void sum_parts(const float* parts, int64_t groups, int64_t stride,
                                         int64_t count, float* out) {
  for (int64_t r = 0; r < count; ++r) out[r] = parts[r];
  for (int64_t g = 1; g < groups; ++g)
    for (int64_t r = 0; r < count; ++r) out[r] += parts[g * stride + r];
}

void Sink::emit(const Fp8WeightView& w, int64_t i, int64_t j0, int64_t j1, const float* parts,
                int64_t part_stride) const {
  const int64_t n = w.n, groups = w.k_groups;
  if (partials) {
    for (int64_t g = 0; g < groups; ++g)
      std::copy(parts + g * part_stride, parts + g * part_stride + (j1 - j0),
                partials + (g * m + i) * n + j0);
    return;
  }
  if (groups == 1) return emit_sum(w, i, j0, j1, parts);
  constexpr int64_t kChunk = 64;
  float sums[kChunk];
  for (int64_t c = j0; c < j1; c += kChunk) {
    const int64_t e = std::min(j1, c + kChunk);
    sum_parts(parts + (c - j0), groups, part_stride, e - c, sums);
    epilogue(y + i * n, sums, c, e, row_scale(a_scale, a_granularity, i), w, bias);
  }
}

void Sink::emit_sum(const Fp8WeightView& w, int64_t i, int64_t j0, int64_t j1,
                    const float* sum) const {
  epilogue(y + i * w.n, sum, j0, j1, row_scale(a_scale, a_granularity, i), w, bias);
}

// Per (row, output, part): a plain FP32 sum in index order; threads split the outputs, so row
// i's result does not depend on m or the thread count.
void run_scalar(const uint8_t* qa, const Fp8WeightView& w, const Sink& sink, int64_t m) {
  require_row_major(w, "the scalar W8A8 path");
  const int64_t n = w.n, k = w.k, groups = w.k_groups, kg = k / groups;
  const auto& lut = e4m3_table();
  std::vector<float> a(static_cast<size_t>(m * k));  // activations decoded once
  for (int64_t i = 0; i < m * k; ++i) a[i] = lut[qa[i]];
  cpu::parallel_for(0, n, [&](int64_t j_lo, int64_t j_hi) {
    std::vector<float> wr(static_cast<size_t>(k));
    std::vector<float> parts(static_cast<size_t>(groups));
    for (int64_t j = j_lo; j < j_hi; ++j) {
      for (int64_t t = 0; t < k; ++t) wr[t] = lut[w.data[j * k + t]];  // each row decoded once
      for (int64_t i = 0; i < m; ++i) {
        const float* ar = a.data() + i * k;
        for (int64_t g = 0; g < groups; ++g) {
          float acc = 0.0f;
          for (int64_t t = g * kg; t < (g + 1) * kg; ++t) acc += ar[t] * wr[t];
          parts[g] = acc;
        }
        sink.emit(w, i, j, j + 1, parts.data(), 1);
      }
    }
  }, n * k * std::max<int64_t>(m, 1) > 65536);
}

}  // namespace w8a8_detail

using w8a8_detail::Sink;
using w8a8_detail::check_args;

namespace {

void check_fused(const float* a_scale, const Fp8WeightView& w, float* y, int64_t m) {
  if (m > 0 && w.n > 0 && (y == nullptr || a_scale == nullptr || w.scale == nullptr))
    fail("null output or scale");
}

Sink fused_sink(const float* a_scale, ScaleGranularity a_granularity, const float* bias, float* y,
                int64_t m) {
  Sink s;
  s.y = y;
  s.a_scale = a_scale;
  s.a_granularity = a_granularity;
  s.bias = bias;
  s.m = m;
  return s;
}

using RunFn = void (*)(const uint8_t*, const Fp8WeightView&, const Sink&, int64_t);

void run_fused(RunFn run, const uint8_t* qa, const float* a_scale, ScaleGranularity g,
               const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  check_args(qa, w, m);
  check_fused(a_scale, w, y, m);
  if (m == 0 || w.n == 0) return;
  run(qa, w, fused_sink(a_scale, g, bias, y, m), m);
}

// The path is chosen once per process by CPU features, never by m: each path is batch
// invariant on its own, two paths are not bit-identical to each other.
RunFn dispatch(W8A8Path path) {
  switch (path == W8A8Path::Auto ? w8a8_auto_path() : path) {
    case W8A8Path::Avx512: return &w8a8_detail::run_avx512;
    case W8A8Path::Avx2: return &w8a8_detail::run_avx2;
    case W8A8Path::Scalar:
    case W8A8Path::Auto: break;
  }
  return &w8a8_detail::run_scalar;
}

}  // namespace

W8A8Path w8a8_auto_path() {
  static const W8A8Path path = [] {
    const char* env = std::getenv("OCTET_CPU_W8A8_KERNEL");
    const std::string want = env ? env : "";
    if (want.empty() || want == "auto")
      return w8a8_avx512_available() ? W8A8Path::Avx512
             : fp8_avx2_available()  ? W8A8Path::Avx2
                                     : W8A8Path::Scalar;
    const std::string why = "OCTET_CPU_W8A8_KERNEL=" + want;
    if (want == "scalar") return W8A8Path::Scalar;
    if (want == "avx2") {
      if (!fp8_avx2_available())
        throw std::invalid_argument(why + ": this CPU lacks AVX2+FMA+F16C");
      return W8A8Path::Avx2;
    }
    if (want == "avx512") {
      if (!w8a8_avx512_available())
        throw std::invalid_argument(why + ": this CPU lacks AVX-512 F/BW/VBMI/BF16");
      return W8A8Path::Avx512;
    }
    throw std::invalid_argument(why + ": expected auto, avx512, avx2 or scalar");
  }();
  return path;
}

Fp8Layout w8a8_preferred_layout() {
  return w8a8_auto_path() == W8A8Path::Avx2 ? Fp8Layout::Rows8x32 : Fp8Layout::RowMajor;
}

const char* w8a8_kernel_name() {
  switch (w8a8_auto_path()) {
    case W8A8Path::Avx512: return "avx512-bf16 (VPERMI2B decode, VDPBF16PS)";
    case W8A8Path::Avx2: return "avx2 (rows8x32 weights, FP32 FMA)";
    default: return "scalar";
  }
}

namespace ref {

void linear_w8a8(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                 const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  check_args(qa, w, m);
  check_fused(a_scale, w, y, m);
  w8a8_detail::require_row_major(w, "ref::linear_w8a8");
  const int64_t n = w.n, k = w.k, groups = w.k_groups, kg = k / groups;
  for (int64_t i = 0; i < m; ++i) {
    const float sa = a_granularity == ScaleGranularity::PerRow ? a_scale[i] : a_scale[0];
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        float part = 0.0f;
        for (int64_t t = g * kg; t < (g + 1) * kg; ++t)
          part += fp8_e4m3_to_float(qa[i * k + t]) * fp8_e4m3_to_float(w.data[j * k + t]);
        acc = g == 0 ? part : acc + part;
      }
      const float sw = w.granularity == ScaleGranularity::PerRow ? w.scale[j] : w.scale[0];
      y[i * n + j] = acc * (sa * sw) + (bias ? bias[j] : 0.0f);
    }
  }
}

}  // namespace ref

void linear_w8a8_scalar(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                        const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  run_fused(&w8a8_detail::run_scalar, qa, a_scale, a_granularity, w, bias, y, m);
}

void linear_w8a8_avx2(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                      const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  run_fused(&w8a8_detail::run_avx2, qa, a_scale, a_granularity, w, bias, y, m);
}

void linear_w8a8_avx512(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                        const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  run_fused(&w8a8_detail::run_avx512, qa, a_scale, a_granularity, w, bias, y, m);
}

void linear_w8a8(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                 const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  run_fused(dispatch(W8A8Path::Auto), qa, a_scale, a_granularity, w, bias, y, m);
}

void linear_w8a8_multi(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                       const Fp8WeightView* ws, const float* const* biases, float* const* ys,
                       int count, int64_t m) {
  if (count < 0 || (count > 0 && (ws == nullptr || biases == nullptr || ys == nullptr)))
    fail("bad weight list");
  if (m >= 1 && count > 1 && w8a8_auto_path() == W8A8Path::Avx2) {
    std::vector<Sink> sinks;
    bool empty = false;
    for (int i = 0; i < count; ++i) {
      check_args(qa, ws[i], m);
      check_fused(a_scale, ws[i], ys[i], m);
      empty = empty || ws[i].n == 0;
      sinks.push_back(fused_sink(a_scale, a_granularity, biases[i], ys[i], m));
    }
    if (!empty && w8a8_detail::run_avx2_gemv_multi(qa, ws, sinks.data(), count, m)) return;
  }
  for (int i = 0; i < count; ++i)
    linear_w8a8(qa, a_scale, a_granularity, ws[i], biases[i], ys[i], m);
}

void linear_w8a8_partials(const uint8_t* qa, const Fp8WeightView& w, float* acc, int64_t m,
                          W8A8Path path) {
  check_args(qa, w, m);
  if (m == 0 || w.n == 0) return;
  if (acc == nullptr) fail("null part sums");
  Sink s;
  s.partials = acc;
  s.m = m;
  dispatch(path)(qa, w, s, m);
}

void linear_w8a8_combine(const float* acc, int64_t groups, const float* a_scale,
                         ScaleGranularity a_granularity, const Fp8WeightView& w,
                         const float* bias, float* y, int64_t m) {
  if (m < 0 || w.n < 0 || groups < 1) fail("bad shape or group count");
  check_fused(a_scale, w, y, m);
  if (m == 0 || w.n == 0) return;
  if (acc == nullptr) fail("null part sums");
  const int64_t n = w.n;
  constexpr int64_t kChunk = 64;
  float sums[kChunk];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < n; c += kChunk) {
      const int64_t e = std::min(n, c + kChunk);
      w8a8_detail::sum_parts(acc + i * n + c, groups, m * n, e - c, sums);
      w8a8_detail::epilogue(y + i * n, sums, c, e,
                            w8a8_detail::row_scale(a_scale, a_granularity, i), w, bias);
    }
}

}  // namespace octet

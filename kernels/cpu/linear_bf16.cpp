#include "kernels/cpu/linear_bf16.h"

#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define OCTET_X86 1
#endif

namespace octet {

namespace {

inline float widen(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void linear_bf16_scalar(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                        int64_t k) {
#pragma omp parallel for schedule(static) if (n * k > 65536)
  for (int64_t j = 0; j < n; ++j) {
    const uint16_t* wr = w + j * k;
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * k;
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t) acc += xr[t] * widen(wr[t]);
      y[i * n + j] = acc;
    }
  }
}

#ifdef OCTET_X86
__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rows of W are streamed once; up to 4 rows of x reuse each decoded weight vector.
__attribute__((target("avx2,fma"))) void linear_bf16_avx2(const float* x, const uint16_t* w,
                                                           float* y, int64_t m, int64_t n,
                                                           int64_t k) {
  const int64_t k8 = k & ~int64_t{7};
#pragma omp parallel for schedule(static) if (n * k > 65536)
  for (int64_t j = 0; j < n; ++j) {
    const uint16_t* wr = w + j * k;
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      const int64_t rows = m - i0 < 4 ? m - i0 : 4;
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      for (int64_t t = 0; t < k8; t += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + t));
        const __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        for (int64_t r = 0; r < rows; ++r)
          acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + (i0 + r) * k + t), wv, acc[r]);
      }
      for (int64_t r = 0; r < rows; ++r) {
        float s = hsum(acc[r]);
        for (int64_t t = k8; t < k; ++t) s += x[(i0 + r) * k + t] * widen(wr[t]);
        y[(i0 + r) * n + j] = s;
      }
    }
  }
}
#endif

}  // namespace

void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k) {
#ifdef OCTET_X86
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) return linear_bf16_avx2(x, w, y, m, n, k);
#endif
  linear_bf16_scalar(x, w, y, m, n, k);
}

namespace ref {
void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t) acc += x[i * k + t] * widen(w[j * k + t]);
      y[i * n + j] = acc;
    }
}
}  // namespace ref

}  // namespace octet

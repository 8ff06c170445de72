#include "kernels/cpu/linear_bf16.h"

#include <cstdio>
#include <cstdlib>
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

#ifdef OCTET_X86
__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The k % 8 tail of one output, added in order after the vector sum. Out of line and without
// FMA: the same roundings for every row, whatever the caller was compiled for.
__attribute__((noinline)) float add_tail(float s, const float* x, const uint16_t* w,
                                         int64_t count) {
  for (int64_t t = 0; t < count; ++t) s += x[t] * widen(w[t]);
  return s;
}

// Rows of W are streamed once; up to 4 rows of x reuse each decoded weight vector. Each
// (row, output) runs the same FMA chain over k whatever the number of rows sharing it.
__attribute__((target("avx2,fma"))) void linear_bf16_avx2_impl(const float* x,
                                                                const uint16_t* w, float* y,
                                                                int64_t m, int64_t n,
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
        const float s = hsum(acc[r]);
        y[(i0 + r) * n + j] = k8 < k ? add_tail(s, x + (i0 + r) * k + k8, wr + k8, k - k8) : s;
      }
    }
  }
}
#endif

}  // namespace

bool linear_bf16_avx2_available() {
#ifdef OCTET_X86
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
#else
  return false;
#endif
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

void linear_bf16_avx2(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                      int64_t k) {
#ifdef OCTET_X86
  if (linear_bf16_avx2_available()) return linear_bf16_avx2_impl(x, w, y, m, n, k);
#endif
  std::fprintf(stderr, "octet: linear_bf16_avx2 needs AVX2+FMA, which this build/CPU lacks\n");
  std::abort();
}

void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k) {
  if (linear_bf16_avx2_available()) return linear_bf16_avx2(x, w, y, m, n, k);
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

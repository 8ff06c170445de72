#include "kernels/common/check.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/thread_team.h"

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

// y[i * n + r] for i < MR, r < NR: x rows (stride k) . W rows (stride k). Per (i, r): one
// 8-lane FMA chain over the k8 = k & ~7 first elements, hsum, then the k % 8 tail in order
// (add_tail): the same arithmetic whatever MR, NR, so the shape of the tile never changes a
// result. Each widened weight vector serves MR rows.
template <int MR, int NR>
__attribute__((target("avx2,fma"))) inline void tile(const float* x, const uint16_t* w,
                                                     int64_t k, float* y, int64_t n) {
  const int64_t k8 = k & ~int64_t{7};
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_setzero_ps();
  for (int64_t t = 0; t < k8; t += 8) {
    __m256 wv[NR];
    for (int r = 0; r < NR; ++r) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + r * k + t));
      wv[r] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * k + t);
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) {
      const float s = hsum(acc[i][r]);
      y[i * n + r] = k8 < k ? add_tail(s, x + i * k + k8, w + r * k + k8, k - k8) : s;
    }
}

// Outputs [j0, j1) for MR rows, NR outputs per tile, then the rest one by one.
template <int MR, int NR>
__attribute__((target("avx2,fma"))) void block_rows(const float* x, const uint16_t* w,
                                                    int64_t k, float* y, int64_t n, int64_t j0,
                                                    int64_t j1) {
  int64_t j = j0;
  for (; j + NR <= j1; j += NR) tile<MR, NR>(x, w + j * k, k, y + j, n);
  for (; j < j1; ++j) tile<MR, 1>(x, w + j * k, k, y + j, n);
}

// Tiles of MR <= 4 rows over the outputs [j0, j1): one output per tile for small batches (each
// weight row is then read as one sequential stream, which the hardware prefetchers follow;
// interleaved short rows halve a DRAM-bound GEMV), 3 outputs per tile for larger batches
// (compute-bound: 12 accumulators + 3 weights + 1 x fill the 16 ymm registers).
template <int MR>
__attribute__((target("avx2,fma"))) void rows_tile(bool wide, const float* x, const uint16_t* w,
                                                   int64_t k, float* y, int64_t n, int64_t j0,
                                                   int64_t j1) {
  if (wide) {
    block_rows<MR, 3>(x, w, k, y, n, j0, j1);
  } else {
    block_rows<MR, 1>(x, w, k, y, n, j0, j1);
  }
}

// Blocks of output rows over threads; in each, tiles of up to 4 rows of x share every widened
// weight vector, and the block's weights (<= ~55 KB) stay in L2 while the tiles of rows pass.
__attribute__((target("avx2,fma"))) void linear_bf16_avx2_impl(const float* x,
                                                                const uint16_t* w, float* y,
                                                                int64_t m, int64_t n,
                                                                int64_t k) {
  constexpr int64_t kBlock = 48;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool wide = m > 4;
  cpu::parallel_for_each(0, blocks, [&](int64_t b) {
    const int64_t j0 = b * kBlock, j1 = n < j0 + kBlock ? n : j0 + kBlock;
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      const float* xi = x + i0 * k;
      float* yi = y + i0 * n;
      switch (m - i0 < 4 ? m - i0 : 4) {
        case 4: rows_tile<4>(wide, xi, w, k, yi, n, j0, j1); break;
        case 3: rows_tile<3>(wide, xi, w, k, yi, n, j0, j1); break;
        case 2: rows_tile<2>(wide, xi, w, k, yi, n, j0, j1); break;
        default: rows_tile<1>(wide, xi, w, k, yi, n, j0, j1); break;
      }
    }
  }, n * k * m > 65536);
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
  cpu::parallel_for_each(0, n, [&](int64_t j) {
    const uint16_t* wr = w + j * k;
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * k;
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t) acc += xr[t] * widen(wr[t]);
      y[i * n + j] = acc;
    }
  }, n * k > 65536);
}

void linear_bf16_avx2(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                      int64_t k) {
#ifdef OCTET_X86
  if (linear_bf16_avx2_available()) return linear_bf16_avx2_impl(x, w, y, m, n, k);
#endif
  OCTET_CHECK(false, "octet: linear_bf16_avx2 needs AVX2+FMA, which this build/CPU lacks");
}

void linear_bf16_avx512_unavailable() {
  OCTET_CHECK(false, "octet: linear_bf16_avx512 needs AVX-512F, which this build/CPU lacks");
  std::abort();
}

void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k) {
  if (linear_bf16_avx512_available()) return linear_bf16_avx512(x, w, y, m, n, k);
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

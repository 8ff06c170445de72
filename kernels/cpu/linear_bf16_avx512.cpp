// linear_bf16 with AVX-512F: the AVX2 path's arithmetic on 16 lanes (widen bf16 by a shift,
// FP32 FMA), for the batched lm_head, where the AVX2 path is compute-bound (a decode step of
// 16 sequences spent ~28% of its linear-layer time there). Per (row, output): one 16-lane FMA
// chain over the k16 = k & ~15 first elements, the lanes summed in one fixed tree, then the
// k % 16 tail added in order: the same arithmetic whatever the tile, m or thread count.
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/thread_team.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns that the AVX-512 intrinsics' own _mm512_undefined_* sources are uninitialized
// (a false positive inside <immintrin.h>, whatever masked form is used).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define OCTET_BF16_AVX512 1
#define OCTET_TARGET_AVX512 __attribute__((target("avx512f")))
#endif

namespace octet {

#ifdef OCTET_BF16_AVX512
namespace {

inline float widen(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The k % 16 tail, added in order after the vector sum; out of line and without FMA (the same
// roundings whatever the caller was compiled for).
__attribute__((noinline)) float add_tail(float s, const float* x, const uint16_t* w,
                                         int64_t count) {
  for (int64_t t = 0; t < count; ++t) s += x[t] * widen(w[t]);
  return s;
}

// Lane sum in a fixed tree: halves (8 + 8), then 4 + 4, 2 + 2, 1 + 1.
OCTET_TARGET_AVX512 inline float hsum16(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

OCTET_TARGET_AVX512 inline __m512 load_bf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// y[i * n + r] for i < MR, r < NR: x rows (stride k) . W rows (stride k); every widened weight
// vector serves MR rows.
template <int MR, int NR>
OCTET_TARGET_AVX512 inline void tile(const float* x, const uint16_t* w, int64_t k, float* y,
                                     int64_t n) {
  const int64_t k16 = k & ~int64_t{15};
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t t = 0; t < k16; t += 16) {
    __m512 wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = load_bf16(w + r * k + t);
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * k + t);
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) {
      const float s = hsum16(acc[i][r]);
      y[i * n + r] = k16 < k ? add_tail(s, x + i * k + k16, w + r * k + k16, k - k16) : s;
    }
}

// Outputs [j0, j1) for MR rows: NR outputs per tile, then the rest one by one.
template <int MR, int NR>
OCTET_TARGET_AVX512 void block_rows(const float* x, const uint16_t* w, int64_t k, float* y,
                                    int64_t n, int64_t j0, int64_t j1) {
  int64_t j = j0;
  for (; j + NR <= j1; j += NR) tile<MR, NR>(x, w + j * k, k, y + j, n);
  for (; j < j1; ++j) tile<MR, 1>(x, w + j * k, k, y + j, n);
}

// Small batches (m <= 4): one output per tile, so each weight row is one sequential stream
// (DRAM-bound GEMV); larger ones: 4 outputs per tile (16 accumulators, compute-bound).
template <int MR>
OCTET_TARGET_AVX512 void rows_tile(bool wide, const float* x, const uint16_t* w, int64_t k,
                                   float* y, int64_t n, int64_t j0, int64_t j1) {
  if (wide) {
    block_rows<MR, 4>(x, w, k, y, n, j0, j1);
  } else {
    block_rows<MR, 1>(x, w, k, y, n, j0, j1);
  }
}

OCTET_TARGET_AVX512 void impl(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                              int64_t k) {
  constexpr int64_t kBlock = 48;  // outputs per work item: <= ~55 KB of weights at k = 576
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
  }, n * k * m > 65536, wide ? blocks : 0);
}

}  // namespace
#endif

bool linear_bf16_avx512_available() {
#ifdef OCTET_BF16_AVX512
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
#else
  return false;
#endif
}

void linear_bf16_avx512(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                        int64_t k) {
#ifdef OCTET_BF16_AVX512
  if (linear_bf16_avx512_available()) return impl(x, w, y, m, n, k);
#else
  (void)x, (void)w, (void)y, (void)m, (void)n, (void)k;
#endif
  linear_bf16_avx512_unavailable();
}

}  // namespace octet

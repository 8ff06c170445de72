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
#define OCTET_BF16_TARGET __attribute__((target("avx2,fma")))
// 8 FP32 lanes: bf16 widened by a shift (F16C not needed), lanes summed 4 + 4, 2 + 2, 1 + 1.
struct Avx2Lanes {
  using Vec = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kWideOutputs = 3;  // 12 accumulators + 3 weights + 1 x: 16 ymm
  static constexpr int kGemvOutputs = 4;  // m = 1: 4 independent chains
  OCTET_BF16_TARGET static Vec zero() { return _mm256_setzero_ps(); }
  OCTET_BF16_TARGET static Vec load_w(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  OCTET_BF16_TARGET static Vec load_x(const float* p) { return _mm256_loadu_ps(p); }
  OCTET_BF16_TARGET static Vec fma(Vec x, Vec w, Vec acc) { return _mm256_fmadd_ps(x, w, acc); }
  OCTET_BF16_TARGET static float hsum(Vec v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
#include "kernels/cpu/linear_bf16_tiles.h"
#undef OCTET_BF16_TARGET
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
  if (linear_bf16_avx2_available())
    return linear_bf16_tiles<Avx2Lanes>(x, w, y, m, n, k, /*one_block_per_piece=*/false);
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

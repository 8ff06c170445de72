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

#define OCTET_BF16_TARGET OCTET_TARGET_AVX512
// 16 FP32 lanes: bf16 widened by a shift, lanes summed 8 + 8, 4 + 4, 2 + 2, 1 + 1.
struct Avx512Lanes {
  using Vec = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kWideOutputs = 4;  // 16 accumulators, 4 weights, 1 x of 32 zmm
  static constexpr int kGemvOutputs = 1;  // m = 1: one row's stream at a time
  OCTET_BF16_TARGET static Vec zero() { return _mm512_setzero_ps(); }
  OCTET_BF16_TARGET static Vec load_w(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  OCTET_BF16_TARGET static Vec load_x(const float* p) { return _mm512_loadu_ps(p); }
  OCTET_BF16_TARGET static Vec fma(Vec x, Vec w, Vec acc) { return _mm512_fmadd_ps(x, w, acc); }
  OCTET_BF16_TARGET static float hsum(Vec v) {
    const __m256 a = _mm256_add_ps(
        _mm512_castps512_ps256(v),
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
#include "kernels/cpu/linear_bf16_tiles.h"
#undef OCTET_BF16_TARGET

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
  if (linear_bf16_avx512_available())
    return linear_bf16_tiles<Avx512Lanes>(x, w, y, m, n, k, /*one_block_per_piece=*/true);
#else
  (void)x, (void)w, (void)y, (void)m, (void)n, (void)k;
#endif
  linear_bf16_avx512_unavailable();
}

}  // namespace octet

// Internal to kernels/cpu (included by ops_avx2.cpp, w8a8_linear_avx2.cpp and
// paged_attention_avx2.cpp only): the AVX2 FP32 dot-product tile shared by the FP32 linear and
// the W8A8 GEMM, the thread-blocking rule, and the vector exp of softmax and SiLU. Both operands are k-contiguous rows (x: [m, k], w: [n, k]), as nn.Linear stores them.
// Every function is compiled for AVX2+FMA via a target attribute; callers check
// fp8_avx2_available() first.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OCTET_GEMM_AVX2_BUILT 1
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#define OCTET_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace octet::gemm_avx2 {

/// exp(x) for 8 lanes: Cephes expf (range reduction by ln 2 in two parts, degree-5 polynomial,
/// 2^n via the exponent field); <= 2 ulp on [-87.3, 88.4]. Inputs are clamped to that range
/// with the constant as the first operand, so a NaN input stays NaN.
OCTET_AVX2 inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), x);
  x = _mm256_max_ps(_mm256_set1_ps(-87.3365447504f), x);
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 x2 = _mm256_mul_ps(x, x);
  p = _mm256_fmadd_ps(p, x2, _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i pow2n =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n));
}

/// Mask for the last k % 8 lanes of a row (lane i active when i < r), r in [0, 8).
OCTET_AVX2 inline __m256i tail_mask(int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// VHADDPS(a, b) as two shuffles and an add: [a0 + a1, a2 + a3, b0 + b1, b2 + b3, a4 + a5, ...],
/// the same sums (Zen 3: 6% more GEMM tile throughput at 64-input k groups than VHADDPS). The
/// add is pinned in asm with the even element as its first operand, which VHADDPS's NaN results
/// match (x86 keeps the first operand's NaN): a compiler swaps a commutative add's operands at
/// will, and which NaN of two comes out would depend on the call site.
OCTET_AVX2 inline __m256 pair_sums(__m256 a, __m256 b) {
  const __m256 even = _mm256_shuffle_ps(a, b, 0x88), odd = _mm256_shuffle_ps(a, b, 0xDD);
  __m256 sum;
  asm("vaddps %2, %1, %0" : "=x"(sum) : "x"(even), "x"(odd));
  return sum;
}

/// Sums of each of 4 vectors, as one __m128: [sum(v0), sum(v1), sum(v2), sum(v3)], each
/// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) over its lanes l, every add's operands in
/// that order (a NaN result's bits never depend on the call site).
OCTET_AVX2 inline __m128 hsum4(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
  const __m256 h = pair_sums(pair_sums(v0, v1), pair_sums(v2, v3));
  const __m128 lo = _mm256_castps256_ps128(h), hi = _mm256_extractf128_ps(h, 1);
  __m128 sum;
  asm("vaddps %2, %1, %0" : "=x"(sum) : "x"(lo), "x"(hi));
  return sum;
}

/// How a tile writes each sum s: Store (out = s), Scale (out = s * scale) or AddScaled
/// (out = out + s * scale: with a power-of-two scale, as the W8A8 GEMM's 2^16, the product is
/// exact, fused or not, and out accumulates k-group parts in order).
enum class TileOut { Store, Scale, AddScaled };

/// Writes the first NR lanes of s to out[0, NR) as O says.
template <TileOut O, int NR>
OCTET_AVX2 inline void write_sums(float* out, __m128 s, float scale) {
  if constexpr (O != TileOut::Store) s = _mm_mul_ps(s, _mm_set1_ps(scale));
  if constexpr (NR == 4) {
    if constexpr (O == TileOut::AddScaled) s = _mm_add_ps(_mm_loadu_ps(out), s);
    _mm_storeu_ps(out, s);
  } else {
    alignas(16) float tmp[4];
    _mm_store_ps(tmp, s);
    for (int j = 0; j < NR; ++j) out[j] = O == TileOut::AddScaled ? out[j] + tmp[j] : tmp[j];
  }
}

/// How a tile reads 8 values of a row as FP32: float rows as they are (the tail masked), or
/// FP16 bit patterns (uint16_t, widened exactly by VCVTPH2PS: half the bytes to stream; the W8A8
/// GEMM's operands, whose values are FP16-exact). FP16 rows are read 8 values at a time in the
/// tail too, its lanes past k then zeroed: a row must have 8 readable values from its last
/// multiple of 8.
template <class T>
struct TileRow;
template <>
struct TileRow<float> {
  OCTET_AVX2 static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  OCTET_AVX2 static __m256 load_tail(const float* p, __m256i mask) {
    return _mm256_maskload_ps(p, mask);
  }
};
template <>
struct TileRow<uint16_t> {
  OCTET_AVX2 static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  OCTET_AVX2 static __m256 load_tail(const uint16_t* p, __m256i mask) {
    return _mm256_and_ps(load(p), _mm256_castsi256_ps(mask));
  }
};

/// out[i * ldo + j] = sum_t a[i * lda + t] * b[j * ldb + t] for i < MR, j < NR, t < k
/// (rows read as TileRow<A>, TileRow<B> say, out written as O says, write_sums).
/// FP32 FMA accumulation, 8 lanes per row pair, lanes summed at the end. Every (i, j) sum is
/// the same instruction sequence for every MR, NR (hsum4 sums each vector on its own), so a
/// row's result does not depend on how many rows share the tile (batch invariance).
template <int MR, int NR, TileOut O = TileOut::Store, class A = float, class B = float>
OCTET_AVX2 inline void dot_tile(const A* a, int64_t lda, const B* b, int64_t ldb, int64_t k,
                                float* out, int64_t ldo, float scale = 1.0f) {
  static_assert(MR >= 1 && MR <= 3 && NR >= 1 && NR <= 4, "tile fits 16 registers");
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 8 <= k; t += 8) {
    __m256 av[MR];
    for (int i = 0; i < MR; ++i) av[i] = TileRow<A>::load(a + i * lda + t);
    for (int j = 0; j < NR; ++j) {
      const __m256 bv = TileRow<B>::load(b + j * ldb + t);
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(av[i], bv, acc[i][j]);
    }
  }
  if (t < k) {
    const __m256i mask = tail_mask(k - t);
    __m256 av[MR];
    for (int i = 0; i < MR; ++i) av[i] = TileRow<A>::load_tail(a + i * lda + t, mask);
    for (int j = 0; j < NR; ++j) {
      const __m256 bv = TileRow<B>::load_tail(b + j * ldb + t, mask);
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(av[i], bv, acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    const __m256 z = _mm256_setzero_ps();
    const __m128 s = hsum4(acc[i][0], NR > 1 ? acc[i][1 % NR] : z, NR > 2 ? acc[i][2 % NR] : z,
                           NR > 3 ? acc[i][3 % NR] : z);
    write_sums<O, NR>(out + i * ldo, s, scale);
  }
}

/// dot_tile<3, 4, O, A, B> with its 12 accumulators as named values, the same FMAs in the same
/// order: GCC keeps the generic template's acc[3][4] array on the stack outside the k loop (12
/// stores of zero before it, 12 stores and reloads after), which cost as much as the loop
/// itself at 64-input parts (SmolLM2-1.7B's o_proj k groups). Each b row's 8 values are loaded
/// once into a register (the empty asm keeps GCC from folding the load into all three FMAs).
/// Inlined into dot_block's loop (GCC would call it: a call's set-up cost 4% at 64 inputs).
template <TileOut O, class A, class B>
OCTET_AVX2 inline __attribute__((always_inline)) void dot_tile_3x4(const A* a, int64_t lda,
                                                                   const B* b, int64_t ldb,
                                                                   int64_t k, float* out,
                                                                   int64_t ldo, float scale) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
  __m256 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
  __m256 c20 = c00, c21 = c00, c22 = c00, c23 = c00;
  const A *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda;
  const B *b0 = b, *b1 = b + ldb, *b2 = b + 2 * ldb, *b3 = b + 3 * ldb;
  int64_t t = 0;
#define OCTET_TILE34_STEP(LOAD_A, LOAD_B)                                        \
  {                                                                              \
    const __m256 x0 = LOAD_A(a0 + t), x1 = LOAD_A(a1 + t), x2 = LOAD_A(a2 + t);  \
    __m256 w = LOAD_B(b0 + t);                                                   \
    asm("" : "+x"(w));                                                           \
    c00 = _mm256_fmadd_ps(x0, w, c00), c10 = _mm256_fmadd_ps(x1, w, c10);         \
    c20 = _mm256_fmadd_ps(x2, w, c20);                                           \
    w = LOAD_B(b1 + t);                                                          \
    asm("" : "+x"(w));                                                           \
    c01 = _mm256_fmadd_ps(x0, w, c01), c11 = _mm256_fmadd_ps(x1, w, c11);         \
    c21 = _mm256_fmadd_ps(x2, w, c21);                                           \
    w = LOAD_B(b2 + t);                                                          \
    asm("" : "+x"(w));                                                           \
    c02 = _mm256_fmadd_ps(x0, w, c02), c12 = _mm256_fmadd_ps(x1, w, c12);         \
    c22 = _mm256_fmadd_ps(x2, w, c22);                                           \
    w = LOAD_B(b3 + t);                                                          \
    asm("" : "+x"(w));                                                           \
    c03 = _mm256_fmadd_ps(x0, w, c03), c13 = _mm256_fmadd_ps(x1, w, c13);         \
    c23 = _mm256_fmadd_ps(x2, w, c23);                                           \
  }
  for (; t + 8 <= k; t += 8) OCTET_TILE34_STEP(TileRow<A>::load, TileRow<B>::load)
  if (t < k) {
    const __m256i mask = tail_mask(k - t);
    const auto load_a = [mask](const A* p) __attribute__((always_inline, target("avx2,f16c"))) {
      return TileRow<A>::load_tail(p, mask);
    };
    const auto load_b = [mask](const B* p) __attribute__((always_inline, target("avx2,f16c"))) {
      return TileRow<B>::load_tail(p, mask);
    };
    OCTET_TILE34_STEP(load_a, load_b)
  }
#undef OCTET_TILE34_STEP
  write_sums<O, 4>(out, hsum4(c00, c01, c02, c03), scale);
  write_sums<O, 4>(out + ldo, hsum4(c10, c11, c12, c13), scale);
  write_sums<O, 4>(out + 2 * ldo, hsum4(c20, c21, c22, c23), scale);
}

/// Tiles rows [0, m) x cols [0, nb) of out (ldo) with dot_tile (rows read as TileRow<A>,
/// TileRow<B> say, out written as O says): MR = 3, NR = 4 (dot_tile_3x4) and the edges.
template <TileOut O = TileOut::Store, class A = float, class B = float>
OCTET_AVX2 inline void dot_block(const A* a, int64_t lda, int64_t m, const B* b, int64_t ldb,
                                 int64_t nb, int64_t k, float* out, int64_t ldo,
                                 float scale = 1.0f) {
  auto row_block = [&](auto mr_tag, int64_t i) __attribute__((target("avx2,fma,f16c"))) {
    constexpr int MR = decltype(mr_tag)::value;
    const A* ai = a + i * lda;
    float* oi = out + i * ldo;
    int64_t j = 0;
    for (; j + 4 <= nb; j += 4) {
      if constexpr (MR == 3)
        dot_tile_3x4<O, A, B>(ai, lda, b + j * ldb, ldb, k, oi + j, ldo, scale);
      else
        dot_tile<MR, 4, O, A, B>(ai, lda, b + j * ldb, ldb, k, oi + j, ldo, scale);
    }
    switch (nb - j) {
      case 3: dot_tile<MR, 3, O, A, B>(ai, lda, b + j * ldb, ldb, k, oi + j, ldo, scale); break;
      case 2: dot_tile<MR, 2, O, A, B>(ai, lda, b + j * ldb, ldb, k, oi + j, ldo, scale); break;
      case 1: dot_tile<MR, 1, O, A, B>(ai, lda, b + j * ldb, ldb, k, oi + j, ldo, scale); break;
      default: break;
    }
  };
  int64_t i = 0;
  for (; i + 3 <= m; i += 3) row_block(std::integral_constant<int, 3>{}, i);
  if (m - i == 2) row_block(std::integral_constant<int, 2>{}, i);
  if (m - i == 1) row_block(std::integral_constant<int, 1>{}, i);
}

}  // namespace octet::gemm_avx2

#else
#define OCTET_GEMM_AVX2_BUILT 0
#endif

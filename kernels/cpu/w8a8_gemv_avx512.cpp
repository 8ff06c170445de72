// W8A8 GEMV (m == 1, decode) with AVX-512 VBMI + BF16, for CPUs that have them (Zen 4,
// Sapphire Rapids); linear_w8a8 picks it at run time, the AVX2 GEMV remains the baseline.
// Every E4M3 value is exact in bf16 (3 mantissa bits <= 7; 2^-9..448 are normal bf16), so:
//   - 64 weight codes become 64 bf16 with two VPERMI2B lookups (high and low byte of the bf16
//     of codes 0..127; VPERMI2B ignores index bit 7) and the sign bit OR-ed back in;
//   - VDPBF16PS multiplies bf16 pairs and accumulates in FP32. A product of two E4M3 values
//     has at most 8 significant bits, so it is exact in FP32, and every partial sum is a
//     multiple of 2^-18 (0 or >= 2^-18): its DAZ/FTZ never triggers. The result equals FP32
//     FMA accumulation up to summation order, like the AVX2 path.
// Per 64 weights: 1 load, 2 VPERMI2B, 1 VPTERNLOG, 2 unpacks, 2 VDPBF16PS (the AVX2 path needs
// ~40 instructions for the same work), which lets the decode keep up with memory.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/w8a8.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OCTET_AVX512_BUILT 1
#include <immintrin.h>
#define OCTET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16")))
#else
#define OCTET_AVX512_BUILT 0
#endif

namespace octet {

void check_linear_w8a8_args(const uint8_t* qa, const float* a_scale, const Fp8WeightView& w,
                            float* y, int64_t m);  // w8a8_linear.cpp

#if OCTET_AVX512_BUILT

namespace {

// bf16 bits of the E4M3 magnitudes 0..127 (0x7F is NaN), split into high and low bytes.
struct Bf16Tables {
  alignas(64) uint8_t hi[128];
  alignas(64) uint8_t lo[128];
  Bf16Tables() {
    for (int c = 0; c < 128; ++c) {
      const float v = fp8_e4m3_to_float(static_cast<uint8_t>(c));
      uint32_t u;
      std::memcpy(&u, &v, 4);
      const uint16_t b = static_cast<uint16_t>(u >> 16);  // exact: no rounding needed
      hi[c] = static_cast<uint8_t>(b >> 8);
      lo[c] = static_cast<uint8_t>(b);
    }
  }
};
const Bf16Tables& tables() {
  static const Bf16Tables t;
  return t;
}

// The activation in bf16, laid out as the weight words come out of the unpacks: for each
// 64-code block, 32 words of "low halves" (bytes 0-7 of every 16-byte lane) then 32 of "high
// halves" (bytes 8-15). x: [k] codes -> out: [k64] words, zero-padded.
void activation_words(const uint8_t* qa, int64_t k, int64_t k64, std::vector<uint16_t>& out) {
  out.assign(static_cast<size_t>(k64), 0);
  const Bf16Tables& t = tables();
  for (int64_t b = 0; b < k64; b += 64)
    for (int lane = 0; lane < 4; ++lane)
      for (int i = 0; i < 16; ++i) {
        const int64_t src = b + lane * 16 + i;
        if (src >= k) continue;
        const uint8_t c = qa[src];
        const uint16_t w = static_cast<uint16_t>(((t.hi[c & 0x7F] | (c & 0x80)) << 8) |
                                                 t.lo[c & 0x7F]);
        const int64_t dst = b + (i < 8 ? 0 : 32) + lane * 8 + (i % 8);
        out[dst] = w;
      }
}

OCTET_AVX512 inline void decode64(__m512i codes, __m512i thi0, __m512i thi1, __m512i tlo0,
                                  __m512i tlo1, __m512i* words_lo, __m512i* words_hi) {
  __m512i hi = _mm512_permutex2var_epi8(thi0, codes, thi1);
  const __m512i lo = _mm512_permutex2var_epi8(tlo0, codes, tlo1);
  hi = _mm512_ternarylogic_epi32(hi, codes, _mm512_set1_epi8(static_cast<char>(0x80)),
                                 0xF8);  // hi | (codes & 0x80)
  *words_lo = _mm512_unpacklo_epi8(lo, hi);
  *words_hi = _mm512_unpackhi_epi8(lo, hi);
}

constexpr int64_t kPrefetchRows = 16;

// out[r] = sum_t x[t] * w[r * k + t], r < NR. Prefetches rows NR..NR+15 ahead (a prefetch past
// the end of the matrix is harmless: it never faults).
template <int NR>
OCTET_AVX512 inline void rows(const uint8_t* w, int64_t k, const uint16_t* xw, int64_t k64,
                              float* out) {
  const Bf16Tables& t = tables();
  const __m512i thi0 = _mm512_load_si512(t.hi), thi1 = _mm512_load_si512(t.hi + 64);
  const __m512i tlo0 = _mm512_load_si512(t.lo), tlo1 = _mm512_load_si512(t.lo + 64);
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k64; b += 64) {
    const int64_t left = k - b;
    const __mmask64 mask = left >= 64 ? ~__mmask64{0} : ((__mmask64{1} << left) - 1);
    const __m512i xlo = _mm512_loadu_si512(xw + b), xhi = _mm512_loadu_si512(xw + b + 32);
    for (int r = 0; r < NR; ++r) {
      // Rows are short (k bytes): the hardware prefetchers see 4 interleaved short streams and
      // stay behind, so fetch the same chunk 16 rows ahead (~9 KB at k = 576) ourselves.
      _mm_prefetch(reinterpret_cast<const char*>(w + (r + kPrefetchRows) * k + b), _MM_HINT_T0);
      const __m512i codes = _mm512_maskz_loadu_epi8(mask, w + r * k + b);
      __m512i wlo, whi;
      decode64(codes, thi0, thi1, tlo0, tlo1, &wlo, &whi);
      acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)wlo, (__m512bh)xlo);
      acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)whi, (__m512bh)xhi);
    }
  }
  for (int r = 0; r < NR; ++r) {
    alignas(64) float lanes[16];  // (GCC 12's _mm512_reduce_add_ps warns maybe-uninitialized)
    _mm512_store_ps(lanes, acc[r]);
    float sum = 0.0f;
    for (float l : lanes) sum += l;
    out[r] = sum;
  }
}

}  // namespace

bool w8a8_avx512_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vbmi") &&
                         __builtin_cpu_supports("avx512bf16");
  return ok;
}

OCTET_AVX512 void linear_w8a8_gemv_avx512(const uint8_t* qa, float sa, const Fp8WeightView& w,
                                          const float* bias, float* y) {
  const int64_t n = w.n, k = w.k, k64 = (k + 63) / 64 * 64;
  std::vector<uint16_t> xw;
  activation_words(qa, k, k64, xw);
  constexpr int64_t kRowsPerBlock = 16;
  const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
#pragma omp parallel for schedule(static) if (n * k >= 131072)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kRowsPerBlock, j1 = std::min(n, j0 + kRowsPerBlock);
    float acc[kRowsPerBlock];
    int64_t j = j0;
    for (; j + 4 <= j1; j += 4) rows<4>(w.data + j * k, k, xw.data(), k64, acc + (j - j0));
    for (; j < j1; ++j) rows<1>(w.data + j * k, k, xw.data(), k64, acc + (j - j0));
    for (j = j0; j < j1; ++j) {
      const float sw = w.granularity == ScaleGranularity::PerRow ? w.scale[j] : w.scale[0];
      y[j] = acc[j - j0] * (sa * sw) + (bias ? bias[j] : 0.0f);
    }
  }
}

void linear_w8a8_avx512(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                        const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  check_linear_w8a8_args(qa, a_scale, w, y, m);
  for (int64_t i = 0; i < m; ++i) {
    const float sa = a_granularity == ScaleGranularity::PerRow ? a_scale[i] : a_scale[0];
    linear_w8a8_gemv_avx512(qa + i * w.k, sa, w, bias, y + i * w.n);
  }
}

#else

bool w8a8_avx512_available() { return false; }
void linear_w8a8_avx512(const uint8_t*, const float*, ScaleGranularity, const Fp8WeightView&,
                        const float*, float*, int64_t) {
  std::abort();
}

#endif

}  // namespace octet

// W8A8 linear with AVX-512 VBMI + BF16, for CPUs that have them (Zen 4, Sapphire Rapids);
// linear_w8a8 picks it at run time for every m, the AVX2 path remains the baseline.
// Every E4M3 value is exact in bf16 (3 mantissa bits <= 7; 2^-9..448 are normal bf16), so:
//   - 64 weight codes become 64 bf16 with two VPERMI2B lookups (high and low byte of the bf16
//     of codes 0..127; VPERMI2B ignores index bit 7) and the sign bit OR-ed back in;
//   - VDPBF16PS multiplies bf16 pairs and accumulates in FP32. A product of two E4M3 values
//     has at most 8 significant bits, so it is exact in FP32, and every partial sum is a
//     multiple of 2^-18 (0 or >= 2^-18): its DAZ/FTZ never triggers. The result equals FP32
//     FMA accumulation up to summation order, like the AVX2 path.
// Per 64 weights: 1 load, 2 VPERMI2B, 1 VPTERNLOG, 2 unpacks, then 2 VDPBF16PS per activation
// row (the AVX2 path needs ~40 instructions for the same work), which lets the decode keep up
// with memory.
//
// Batch invariance: every (row i, output j) accumulator does the same instruction sequence
// whatever m is: acc = 0; for each 64-code chunk c of k (zero-padded): acc = VDPBF16PS(acc,
// w_lo[c], x_lo[c]); acc = VDPBF16PS(acc, w_hi[c], x_hi[c]); then the 16 lanes summed in lane
// order, then the shared epilogue. A tile of MR rows x NR outputs only shares the decoded
// weights (and, m == 1, is the GEMV); threads split the outputs, never k.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/w8a8.h"
#include "kernels/cpu/w8a8_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OCTET_AVX512_BUILT 1
#include <immintrin.h>
#define OCTET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16")))
#else
#define OCTET_AVX512_BUILT 0
#endif

namespace octet {

#if OCTET_AVX512_BUILT

namespace {

using w8a8_detail::row_scale;

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

// One activation row in bf16, laid out as the weight words come out of the unpacks: for each
// 64-code chunk, 32 words of "low halves" (bytes 0-7 of every 16-byte lane) then 32 of "high
// halves" (bytes 8-15). qa: [k] codes -> out: [k64] words, zero-padded.
void activation_words(const uint8_t* qa, int64_t k, int64_t k64, uint16_t* out) {
  std::fill(out, out + k64, uint16_t{0});
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

// out[i * ldo + r] = sum_t x_i[t] * w[r * k + t] for i < MR, r < NR; x_i is the activation
// words row xw + i * k64. Each 64-code weight chunk is decoded once and used by the MR rows.
// Prefetches weight rows NR..NR+15 ahead (a prefetch past the end of the matrix is harmless:
// it never faults).
template <int MR, int NR>
OCTET_AVX512 inline void tile(const uint8_t* w, int64_t k, const uint16_t* xw, int64_t k64,
                              float* out, int64_t ldo) {
  const Bf16Tables& t = tables();
  const __m512i thi0 = _mm512_load_si512(t.hi), thi1 = _mm512_load_si512(t.hi + 64);
  const __m512i tlo0 = _mm512_load_si512(t.lo), tlo1 = _mm512_load_si512(t.lo + 64);
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k64; b += 64) {
    const int64_t left = k - b;
    const __mmask64 mask = left >= 64 ? ~__mmask64{0} : ((__mmask64{1} << left) - 1);
    for (int r = 0; r < NR; ++r) {
      // Rows are short (k bytes): the hardware prefetchers see 4 interleaved short streams and
      // stay behind, so fetch the same chunk 16 rows ahead (~9 KB at k = 576) ourselves.
      _mm_prefetch(reinterpret_cast<const char*>(w + (r + kPrefetchRows) * k + b), _MM_HINT_T0);
      const __m512i codes = _mm512_maskz_loadu_epi8(mask, w + r * k + b);
      __m512i wlo, whi;
      decode64(codes, thi0, thi1, tlo0, tlo1, &wlo, &whi);
      for (int i = 0; i < MR; ++i) {
        const uint16_t* x = xw + i * k64 + b;
        acc[i][r] = _mm512_dpbf16_ps(acc[i][r], (__m512bh)wlo, (__m512bh)_mm512_loadu_si512(x));
        acc[i][r] =
            _mm512_dpbf16_ps(acc[i][r], (__m512bh)whi, (__m512bh)_mm512_loadu_si512(x + 32));
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) {
      alignas(64) float lanes[16];  // (GCC 12's _mm512_reduce_add_ps warns maybe-uninitialized)
      _mm512_store_ps(lanes, acc[i][r]);
      float sum = 0.0f;
      for (float l : lanes) sum += l;  // lane order, the same for every tile shape
      out[i * ldo + r] = sum;
    }
}

constexpr int64_t kRowsPerBlock = 16;  // outputs per block (and per thread work item)
constexpr int kTileRows = 4;           // activation rows sharing one weight decode

// acc[i * kRowsPerBlock + (j - j0)] for MR rows (at xw) and the outputs [j0, j1).
template <int MR>
OCTET_AVX512 void block_rows(const Fp8WeightView& w, int64_t j0, int64_t j1, const uint16_t* xw,
                             int64_t k64, float* acc) {
  const int64_t k = w.k;
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4)
    tile<MR, 4>(w.data + j * k, k, xw, k64, acc + (j - j0), kRowsPerBlock);
  for (; j < j1; ++j) tile<MR, 1>(w.data + j * k, k, xw, k64, acc + (j - j0), kRowsPerBlock);
}

}  // namespace

bool w8a8_avx512_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vbmi") &&
                         __builtin_cpu_supports("avx512bf16");
  return ok;
}

void linear_w8a8_avx512(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                        const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  if (!w8a8_avx512_available()) {
    std::fprintf(stderr, "octet: linear_w8a8_avx512 needs AVX-512 F/BW/VBMI/BF16\n");
    std::abort();
  }
  w8a8_detail::check_args(qa, a_scale, w, y, m);
  const int64_t n = w.n, k = w.k, k64 = (k + 63) / 64 * 64;
  if (m == 0 || n == 0) return;
  std::vector<uint16_t> xw(static_cast<size_t>(m * k64));  // [m, k64] activation words
  for (int64_t i = 0; i < m; ++i) activation_words(qa + i * k, k, k64, xw.data() + i * k64);
  const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
#pragma omp parallel for schedule(static) if (n * k * m >= 131072)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kRowsPerBlock, j1 = std::min(n, j0 + kRowsPerBlock);
    float acc[kTileRows * kRowsPerBlock];
    for (int64_t i0 = 0; i0 < m; i0 += kTileRows) {
      const uint16_t* x = xw.data() + i0 * k64;
      const int64_t rows = std::min<int64_t>(kTileRows, m - i0);
      switch (rows) {
        case 4: block_rows<4>(w, j0, j1, x, k64, acc); break;
        case 3: block_rows<3>(w, j0, j1, x, k64, acc); break;
        case 2: block_rows<2>(w, j0, j1, x, k64, acc); break;
        default: block_rows<1>(w, j0, j1, x, k64, acc); break;
      }
      for (int64_t i = 0; i < rows; ++i)
        w8a8_detail::epilogue(y + (i0 + i) * n, acc + i * kRowsPerBlock, j0, j1,
                              row_scale(a_scale, a_granularity, i0 + i), w, bias);
    }
  }
}

#else

bool w8a8_avx512_available() { return false; }
void linear_w8a8_avx512(const uint8_t*, const float*, ScaleGranularity, const Fp8WeightView&,
                        const float*, float*, int64_t) {
  std::fprintf(stderr, "octet: linear_w8a8_avx512 is not built for this compiler/CPU\n");
  std::abort();
}

#endif

}  // namespace octet

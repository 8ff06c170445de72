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
// w_lo[c], x_lo[c]); acc = VDPBF16PS(acc, w_hi[c], x_hi[c]); then the 16 lanes summed in one
// fixed tree (reduce16), then the shared epilogue. A tile of MR rows x NR outputs only shares
// the decoded weights (m == 1 is the decode GEMV; m >= 8 decodes each block of weights once
// into a buffer); threads split the outputs, never k.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/w8a8.h"
#include "kernels/cpu/w8a8_internal.h"
#include "kernels/cpu/thread_team.h"

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
constexpr int64_t kBlock = 16;  // outputs per block (one thread's work item)
constexpr int kTileRows = 4;    // activation rows sharing each weight chunk

// Raw accumulators of one block: acc[i][r] for tile row i and output j0 + r.
struct alignas(64) BlockAcc {
  __m512 v[kTileRows][kBlock];
};

// acc[i][r] for i < MR, r < NR: x_i (activation words at xw + i * ldx, k64 of them) . weight
// row r (k codes at w + r * ldw), one VDPBF16PS pair per 64-code chunk. Each chunk is decoded
// once and used by the MR rows. Prefetches weight rows NR..NR+15 ahead (a prefetch past the end
// of the matrix is harmless: it never faults).
template <int MR, int NR>
OCTET_AVX512 inline void tile_codes(const uint8_t* w, int64_t ldw, int64_t k, const uint16_t* xw,
                                    int64_t ldx, int64_t k64, __m512 (*out)[kBlock]) {
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
      _mm_prefetch(reinterpret_cast<const char*>(w + (r + kPrefetchRows) * ldw + b),
                   _MM_HINT_T0);
      const __m512i codes = _mm512_maskz_loadu_epi8(mask, w + r * ldw + b);
      __m512i wlo, whi;
      decode64(codes, thi0, thi1, tlo0, tlo1, &wlo, &whi);
      for (int i = 0; i < MR; ++i) {
        const uint16_t* x = xw + i * ldx + b;
        acc[i][r] = _mm512_dpbf16_ps(acc[i][r], (__m512bh)wlo, (__m512bh)_mm512_loadu_si512(x));
        acc[i][r] =
            _mm512_dpbf16_ps(acc[i][r], (__m512bh)whi, (__m512bh)_mm512_loadu_si512(x + 32));
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) out[i][r] = acc[i][r];
}

// rows weight rows (k codes each, row stride ldw) -> words: rows x k64 (row stride ldo), each
// 64-code chunk as the decode64 pair (32 low-half words, then 32 high-half words), zero-padded.
// Prefetches the same rows `ahead` x rows further on.
OCTET_AVX512 void decode_rows(const uint8_t* w, int64_t ldw, int64_t k, int64_t rows, int64_t k64,
                              uint16_t* words, int64_t ldo, int64_t ahead) {
  const Bf16Tables& t = tables();
  const __m512i thi0 = _mm512_load_si512(t.hi), thi1 = _mm512_load_si512(t.hi + 64);
  const __m512i tlo0 = _mm512_load_si512(t.lo), tlo1 = _mm512_load_si512(t.lo + 64);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < k64; b += 64) {
      const int64_t left = k - b;
      const __mmask64 mask = left >= 64 ? ~__mmask64{0} : ((__mmask64{1} << left) - 1);
      // The block `ahead` blocks on (this thread's next work item, usually): its codes arrive
      // from DRAM while this block is multiplied. Harmless past the end (never faults).
      _mm_prefetch(reinterpret_cast<const char*>(w + (r + ahead * rows) * ldw + b), _MM_HINT_T0);
      __m512i wlo, whi;
      decode64(_mm512_maskz_loadu_epi8(mask, w + r * ldw + b), thi0, thi1, tlo0, tlo1, &wlo,
               &whi);
      _mm512_storeu_si512(words + r * ldo + b, wlo);
      _mm512_storeu_si512(words + r * ldo + b + 32, whi);
    }
}

// Activation rows in bf16 words, laid out as the weight words come out of decode64 (each
// 64-code chunk: 32 words of the low halves of its 16-byte lanes, then 32 of the high halves),
// zero-padded: qa: [m, k] codes (part g of a row at g * kg) -> xw: [m, p.kp] words, part g at
// g * kg64. The same decode as the weights' (decode_rows), so it costs one pass at memory speed.
OCTET_AVX512 void activation_words(const uint8_t* qa, int64_t m, int64_t k, int64_t groups,
                                   int64_t kg, int64_t kg64, int64_t kp, uint16_t* xw) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g < groups; ++g)
      decode_rows(qa + i * k + g * kg, k, kg, 1, kg64, xw + i * kp + g * kg64, kp, 1);
}

// One level of reduce16 at distance d: in every aligned block of 2d lanes, x's block sums its
// halves into the lower d lanes (x_l + x_{l+d}) and y's into the upper d (y_{l+d} + y_l); the
// in-place addend comes from a blend (any port), the other from one VPERMT2PS.
OCTET_AVX512 inline __m512 level(__m512 x, __m512 y, __mmask16 upper, __m512i idx) {
  return _mm512_add_ps(_mm512_mask_blend_ps(upper, x, y), _mm512_permutex2var_ps(x, idx, y));
}

// The lane sums of 16 accumulators, in one fixed tree per vector: a_l = v_l + v_{l+8},
// b_l = a_l + a_{l+4}, c_l = b_l + b_{l+2}, sum = c_0 + c_1 (each output's sum depends only on
// its own vector, so zero vectors beside it change nothing; IEEE addition commutes, so which
// addend is in place does not matter). out[r] = sum of v[r]. 15 levels (one shuffle each) leave
// sum(v[r]) in lane bitrev4(r); one VPERMPS puts them in order.
OCTET_AVX512 inline void reduce16(const __m512* v, float* out) {
  const __m512i i8 = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23);
  const __m512i i4 = _mm512_setr_epi32(4, 5, 6, 7, 16, 17, 18, 19, 12, 13, 14, 15, 24, 25, 26, 27);
  const __m512i i2 = _mm512_setr_epi32(2, 3, 16, 17, 6, 7, 20, 21, 10, 11, 24, 25, 14, 15, 28, 29);
  const __m512i i1 = _mm512_setr_epi32(1, 16, 3, 18, 5, 20, 7, 22, 9, 24, 11, 26, 13, 28, 15, 30);
  const __m512i bitrev = _mm512_setr_epi32(0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15);
  __m512 a[8], b[4], c[2];
  for (int p = 0; p < 8; ++p) a[p] = level(v[2 * p], v[2 * p + 1], 0xFF00, i8);
  for (int p = 0; p < 4; ++p) b[p] = level(a[2 * p], a[2 * p + 1], 0xF0F0, i4);
  for (int p = 0; p < 2; ++p) c[p] = level(b[2 * p], b[2 * p + 1], 0xCCCC, i2);
  // maskz: GCC 12 warns on the undefined source of the unmasked form (a false positive).
  const __m512 sums = level(c[0], c[1], 0xAAAA, i1);
  _mm512_storeu_ps(out, _mm512_maskz_permutexvar_ps(0xFFFF, bitrev, sums));
}

// tile_codes on pre-decoded weight words (decode_rows; NR rows at wt, row stride ldw): the
// same VDPBF16PS sequence per accumulator, for batches large enough to amortise one decode.
// The MR x NR accumulators are summed at once, in registers, by one reduce16 (the same tree
// per accumulator as every other path): sums[i * lds + r] = the sum of row i, output r.
template <int MR, int NR>
OCTET_AVX512 inline void tile_words(const uint16_t* wt, int64_t ldw, const uint16_t* xw,
                                    int64_t ldx, int64_t k64, float* sums, int64_t lds) {
  static_assert(MR * NR <= 16);
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k64; b += 64) {
    __m512i xlo[MR], xhi[MR];
    for (int i = 0; i < MR; ++i) {
      xlo[i] = _mm512_load_si512(xw + i * ldx + b);
      xhi[i] = _mm512_load_si512(xw + i * ldx + b + 32);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const __m512i wlo = _mm512_load_si512(wt + r * ldw + b);
      const __m512i whi = _mm512_load_si512(wt + r * ldw + b + 32);
      for (int i = 0; i < MR; ++i) {
        acc[i][r] = _mm512_dpbf16_ps(acc[i][r], (__m512bh)wlo, (__m512bh)xlo[i]);
        acc[i][r] = _mm512_dpbf16_ps(acc[i][r], (__m512bh)whi, (__m512bh)xhi[i]);
      }
    }
  }
  __m512 v[16];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) v[i * NR + r] = acc[i][r];
  for (int q = MR * NR; q < 16; ++q) v[q] = _mm512_setzero_ps();
  alignas(64) float s[16];
  reduce16(v, s);
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) sums[i * lds + r] = s[i * NR + r];
}

// The shape of one call: k split in `groups` parts of kg codes; each part's words are padded to
// kg64, so an activation or pre-decoded weight row is kp = groups * kg64 words, part g at
// g * kg64. One group (k_groups 1) is the unsplit layout.
struct Parts {
  int64_t groups, kg, kg64, kp;
};

// MR rows (words at xw, row stride p.kp) x outputs [j0, j1). The parts of each 4-row step run
// back to back, so the weight rows stream in order. pre-decoded (wt holds the block's weight
// rows, decode_rows): the lane sums go to parts[(g * kTileRows + i) * kBlock + j - j0]; else
// codes are decoded here and the raw accumulators go to acc[g] (outputs past j1 zero).
template <int MR>
OCTET_AVX512 void block_rows(const Fp8WeightView& w, const Parts& p, int64_t j0, int64_t j1,
                             const uint16_t* xw, const uint16_t* wt, BlockAcc* acc,
                             float* parts) {
  const int64_t k = w.k;
  const auto step = [&]<int NR>(int64_t j) {
    for (int64_t g = 0; g < p.groups; ++g) {
      const uint16_t* xg = xw + g * p.kg64;
      if (wt) {
        tile_words<MR, NR>(wt + (j - j0) * p.kp + g * p.kg64, p.kp, xg, p.kp, p.kg64,
                           parts + g * kTileRows * kBlock + (j - j0), kBlock);
      } else {
        __m512 (*out)[kBlock] = reinterpret_cast<__m512 (*)[kBlock]>(&acc[g].v[0][j - j0]);
        tile_codes<MR, NR>(w.data + j * k + g * p.kg, k, p.kg, xg, p.kp, p.kg64, out);
      }
    }
  };
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) step.template operator()<4>(j);
  for (; j < j1; ++j) step.template operator()<1>(j);
  if (wt) return;
  for (int64_t g = 0; g < p.groups; ++g)
    for (int i = 0; i < MR; ++i)
      for (int64_t r = j1 - j0; r < kBlock; ++r) acc[g].v[i][r] = _mm512_setzero_ps();
}

// count words of buf, 64-byte aligned (rows of kp words then start on cache lines: no 512-bit
// load of the inner loops splits a line).
uint16_t* aligned_words(std::vector<uint16_t>& buf, int64_t count) {
  buf.resize(static_cast<size_t>(count + 32));
  const auto addr = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + ((64 - addr % 64) % 64) / sizeof(uint16_t);
}

// Activation words kept per thread between calls (8 MiB): SmolLM2's largest prefill chunk
// (2048 x 1536) fits; larger ones are allocated per call.
constexpr int64_t kKeptScratchWords = int64_t{4} << 20;

// Batches of at least this many rows decode each block of weights once into words and reuse
// them for every tile of rows; smaller ones decode in registers (the result is the same).
constexpr int64_t kPredecodeRows = 8;

OCTET_AVX512 void linear_impl(const uint8_t* qa, const Fp8WeightView& w,
                              const w8a8_detail::Sink& sink, int64_t m) {
  const int64_t n = w.n, k = w.k, groups = w.k_groups, kg = k / groups;
  const Parts p{groups, kg, (kg + 63) / 64 * 64, groups * ((kg + 63) / 64 * 64)};
  // Scratch reused across calls (a fresh vector of this size is an mmap and page faults), up to
  // kKeptScratchWords; a larger batch (a long prefill of a big model) gets its own, freed after.
  thread_local std::vector<uint16_t> xw_kept;
  std::vector<uint16_t> xw_once;
  uint16_t* xw = aligned_words(m * p.kp <= kKeptScratchWords ? xw_kept : xw_once,
                               m * p.kp);  // [m, kp] activation words
  activation_words(qa, m, k, groups, kg, p.kg64, p.kp, xw);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool predecode = m >= kPredecodeRows;
  // Compute-bound batches: one block per piece, so the threads finish within a block of each
  // other (4 pieces per thread left one idle for up to a quarter of its share).
  // DRAM-bound batches (m < kPredecodeRows): 2 contiguous pieces per thread, each a stream of
  // rows that tile_codes prefetches ahead (4 per thread: more cold starts, decode ~10% slower).
  const int64_t width = cpu::parallel_width();
  const int64_t pieces = predecode ? blocks : 2 * width;
  // The threads claim the pieces in turn, so a thread's next block is usually `width` blocks
  // on: its weights are prefetched while this one is decoded (measured: 1 block ahead, i.e.
  // another thread's, gained less at m = 16; contiguous runs of blocks lost more at the tail).
  const int64_t ahead = width;
  cpu::parallel_for(0, blocks, [&](int64_t blk_lo, int64_t blk_hi) {
    thread_local std::vector<uint16_t> wt;
    // [groups][kTileRows][kBlock]: each part's lane sums, then emitted per row
    thread_local std::vector<float> parts;
    thread_local std::vector<BlockAcc> acc;
    uint16_t* wt_words = predecode ? aligned_words(wt, kBlock * p.kp) : nullptr;
    parts.resize(static_cast<size_t>(groups * kTileRows * kBlock));
    acc.resize(static_cast<size_t>(groups));
    if (!predecode) {
      // The first two blocks of the piece: no earlier prefetch covered them, and their rows,
      // requested at once, arrive in parallel instead of one demand miss after another.
      const uint8_t* first = w.data + blk_lo * kBlock * k;
      const int64_t bytes = std::min<int64_t>(n - blk_lo * kBlock, 2 * kBlock) * k;
      for (int64_t off = 0; off < bytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(first + off), _MM_HINT_T0);
    }
    for (int64_t blk = blk_lo; blk < blk_hi; ++blk) {
      const int64_t j0 = blk * kBlock, j1 = std::min(n, j0 + kBlock);
      if (predecode)
        for (int64_t g = 0; g < groups; ++g)
          decode_rows(w.data + j0 * k + g * kg, k, kg, j1 - j0, p.kg64, wt_words + g * p.kg64,
                      p.kp, ahead);
      const uint16_t* wt_block = wt_words;
      for (int64_t i0 = 0; i0 < m; i0 += kTileRows) {
        const uint16_t* x = xw + i0 * p.kp;
        const int64_t rows = std::min<int64_t>(kTileRows, m - i0);
        float* pt = parts.data();
        switch (rows) {
          case 4: block_rows<4>(w, p, j0, j1, x, wt_block, acc.data(), pt); break;
          case 3: block_rows<3>(w, p, j0, j1, x, wt_block, acc.data(), pt); break;
          case 2: block_rows<2>(w, p, j0, j1, x, wt_block, acc.data(), pt); break;
          default: block_rows<1>(w, p, j0, j1, x, wt_block, acc.data(), pt); break;
        }
        if (!wt_block)
          for (int64_t g = 0; g < groups; ++g)
            for (int64_t i = 0; i < rows; ++i)
              reduce16(acc[g].v[i], pt + (g * kTileRows + i) * kBlock);
        for (int64_t i = 0; i < rows; ++i)
          sink.emit(w, i0 + i, j0, j1, parts.data() + i * kBlock, kTileRows * kBlock);
      }
    }
  }, n * k * m >= 131072, pieces);
}

}  // namespace

bool w8a8_avx512_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vbmi") &&
                         __builtin_cpu_supports("avx512bf16");
  return ok;
}

void w8a8_detail::run_avx512(const uint8_t* qa, const Fp8WeightView& w,
                             const w8a8_detail::Sink& sink, int64_t m) {
  if (!w8a8_avx512_available()) {
    std::fprintf(stderr, "octet: linear_w8a8_avx512 needs AVX-512 F/BW/VBMI/BF16\n");
    std::abort();
  }
  w8a8_detail::require_row_major(w, "the avx512 W8A8 path");
  linear_impl(qa, w, sink, m);
}

#else

bool w8a8_avx512_available() { return false; }
void w8a8_detail::run_avx512(const uint8_t*, const Fp8WeightView&, const w8a8_detail::Sink&,
                             int64_t) {
  std::fprintf(stderr, "octet: linear_w8a8_avx512 is not built for this compiler/CPU\n");
  std::abort();
}

#endif

}  // namespace octet

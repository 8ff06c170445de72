// W8A8 linear and per-token quantization with AVX2+FMA+F16C (target attributes; the library
// itself needs no -mavx2). Weights are decoded to FP32 in registers: an E4M3 code sign-extended
// to 16 bits, shifted left by 7 and masked with 0xBF80 is the fp16 of value * 2^-8 (exponent
// bias 15 vs 7, subnormals included), and VCVTPH2PS widens it exactly. Products with the exact
// FP32 activations are exact; the 2^-8 comes back as an exact * 256 on the sum.
// Batch invariance: every (row i, output j) is the same sum whatever m is: one 8-lane FP32
// accumulator, acc = FMA(x[t..t+8), w[t..t+8), acc) for t = 0, 8, 16, ... (the last chunk
// zero-padded or masked, which adds exact zeros), the lanes summed by hsum4, * 256, then the
// shared epilogue. Two shapes of work compute it:
//  * GEMV (m == 1, decode; m <= 4 on Rows8x32 weights, batched decode): memory bound. Each
//    weight byte is read once and decoded in registers; 4 (row-major) or 8 (Rows8x32) weight
//    rows share each activation load, and up to 4 activation rows each widened code.
//  * GEMM (m > 1, prefill and batched decode): activations decoded once and each block of
//    weight rows decoded once into a per-thread tile, both as FP16 bits of value * 2^-8 (exact),
//    the tile reused for all m rows (3 x 4 register tile, ops_gemm_avx2.h, widening with
//    VCVTPH2PS and accumulating in the same order; every product and sum is the GEMV's times
//    2^-8, exactly). Blocks of output columns are spread over threads; k is never split.
// A weight in the Rows8x32 layout takes the same sums from one sequential stream (the section
// of that name below). NaN codes (0x7F/0xFF) are not supported in the weights here: the decode
// reads them as 480.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>


#include "kernels/common/check.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/ops_gemm_avx2.h"
#include "kernels/cpu/w8a8.h"
#include "kernels/cpu/w8a8_internal.h"
#include "kernels/cpu/thread_team.h"

namespace octet {

namespace {

[[noreturn]] void die_without_avx2(const char* function) {
  ::octet::detail::check_failed(__FILE__, __LINE__, "avx2 available",
                                ::octet::detail::check_message(
                                    "octet: ", function, " needs AVX2+FMA+F16C on x86-64,",
                                    " which this build/CPU lacks"));
}

}  // namespace

#if OCTET_GEMM_AVX2_BUILT

namespace {

using gemm_avx2::hsum4;

// 16 E4M3 codes -> 16 fp16 bit patterns of value * 2^-8 (see the file comment).
OCTET_AVX2 inline __m256i e4m3x16_to_scaled_half(__m128i codes) {
  const __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(codes), 7);
  return _mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0xBF80)));
}

// acc[r] = FMA(decoded(w row r, 16 codes), x, acc[r]): lanes 0-7 (with x0), then 8-15 (x1).
template <int NR>
OCTET_AVX2 inline void gemv_step(const __m128i* codes, __m256 x0, __m256 x1, __m256* acc) {
  for (int r = 0; r < NR; ++r) {
    const __m256i h = e4m3x16_to_scaled_half(codes[r]);
    acc[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), x0, acc[r]);
    acc[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), x1, acc[r]);
  }
}

// out[r] = sum_t x[t] * decode(w[r * ldw + t]) for r < NR, t < k; x is zero-padded to a
// multiple of 16.
template <int NR>
OCTET_AVX2 inline void gemv_rows(const uint8_t* w, int64_t ldw, int64_t k, const float* x,
                                 float* out) {
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  __m128i codes[NR];
  int64_t t = 0;
  for (; t + 16 <= k; t += 16) {
    for (int r = 0; r < NR; ++r)
      codes[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + r * ldw + t));
    gemv_step<NR>(codes, _mm256_loadu_ps(x + t), _mm256_loadu_ps(x + t + 8), acc);
  }
  if (t < k) {  // 1..15 codes left per row: zero-padded copies (x is zero there too)
    alignas(16) uint8_t tail[NR][16] = {};
    for (int r = 0; r < NR; ++r) {
      std::memcpy(tail[r], w + r * ldw + t, static_cast<size_t>(k - t));
      codes[r] = _mm_load_si128(reinterpret_cast<const __m128i*>(tail[r]));
    }
    gemv_step<NR>(codes, _mm256_loadu_ps(x + t), _mm256_loadu_ps(x + t + 8), acc);
  }
  const __m256 z = _mm256_setzero_ps();
  alignas(16) float tmp[4];
  _mm_store_ps(tmp, _mm_mul_ps(hsum4(acc[0], NR > 1 ? acc[1 % NR] : z, NR > 2 ? acc[2 % NR] : z,
                                     NR > 3 ? acc[3 % NR] : z),
                               _mm_set1_ps(256.0f)));
  for (int r = 0; r < NR; ++r) out[r] = tmp[r];
}

// m == 1. Each k-group g of the row is its own zero-padded stretch of x (x + g * kg16), so a
// part's sum is the same instruction sequence whatever the group count.
OCTET_AVX2 void gemv(const uint8_t* qa, const Fp8WeightView& w, const w8a8_detail::Sink& sink) {
  const int64_t n = w.n, k = w.k, groups = w.k_groups, kg = k / groups;
  const int64_t kg16 = (kg + 15) / 16 * 16;
  std::vector<float> x(static_cast<size_t>(groups * kg16), 0.0f);
  for (int64_t g = 0; g < groups; ++g)
    fp8_decode_avx2(DType::FP8_E4M3, qa + g * kg, x.data() + g * kg16, static_cast<size_t>(kg));
  // Blocks of 16 rows (4 x 4-row steps): enough blocks to balance threads on small layers.
  constexpr int64_t kRowsPerBlock = 16;
  const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  cpu::parallel_for(0, blocks, [&](int64_t b_lo, int64_t b_hi) {
    std::vector<float> parts(static_cast<size_t>(groups * kRowsPerBlock));
    for (int64_t b = b_lo; b < b_hi; ++b) {
      const int64_t j0 = b * kRowsPerBlock, j1 = std::min(n, j0 + kRowsPerBlock);
      for (int64_t g = 0; g < groups; ++g) {
        const uint8_t* wg = w.data + g * kg;
        const float* xg = x.data() + g * kg16;
        float* acc = parts.data() + g * kRowsPerBlock;
        int64_t j = j0;
        for (; j + 4 <= j1; j += 4) gemv_rows<4>(wg + j * k, k, kg, xg, acc + (j - j0));
        for (; j < j1; ++j) gemv_rows<1>(wg + j * k, k, kg, xg, acc + (j - j0));
      }
      sink.emit(w, 0, j0, j1, parts.data(), kRowsPerBlock);
    }
  }, n * k >= 131072);
}

// 16 codes -> dst[0..16): FP16 bits of value * 2^-8 (the values gemv_step multiplies by);
// with KeepNaN, NaN codes (0x7F / 0xFF) give NaN (0x7E00 with the code's sign), as the GEMV's
// activation decode keeps them (weights have no NaN codes: read as 480).
template <bool KeepNaN>
OCTET_AVX2 inline void store_scaled16(__m128i codes, uint16_t* dst) {
  __m256i h = e4m3x16_to_scaled_half(codes);
  if constexpr (KeepNaN) {
    const __m128i low7 = _mm_set1_epi8(0x7F);
    const __m256i nan = _mm256_cvtepi8_epi16(_mm_cmpeq_epi8(_mm_and_si128(codes, low7), low7));
    const __m256i signed_nan = _mm256_or_si256(
        _mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000))),
        _mm256_set1_epi16(0x7E00));
    h = _mm256_blendv_epi8(h, signed_nan, nan);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h);
}

// rows x k codes (row stride ldw) -> tile: rows (stride ldt) of FP16 bits of value * 2^-8,
// zero-padded to a multiple of 16 (store_scaled16<KeepNaN>).
template <bool KeepNaN = false>
OCTET_AVX2 void decode_scaled_tile(const uint8_t* w, int64_t ldw, int64_t k, int64_t rows,
                                   int64_t ldt, uint16_t* tile) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = w + r * ldw;
    uint16_t* dst = tile + r * ldt;
    int64_t t = 0;
    for (; t + 16 <= k; t += 16)
      store_scaled16<KeepNaN>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + t)),
                              dst + t);
    if (t < k) {
      alignas(16) uint8_t tail[16] = {};
      std::memcpy(tail, src + t, static_cast<size_t>(k - t));
      store_scaled16<KeepNaN>(_mm_load_si128(reinterpret_cast<const __m128i*>(tail)), dst + t);
    }
  }
}

// FP32 subnormals in flight (Rows8x32's widened codes): DAZ, which -ffast-math start-up code
// and some libraries set, would read them as zero, so it is cleared for a kernel's span on its
// thread.
class DazOff {
 public:
  DazOff() : saved_(_mm_getcsr()) {
    if (saved_ & kDaz) _mm_setcsr(saved_ & ~kDaz);
  }
  ~DazOff() {
    if (saved_ & kDaz) _mm_setcsr(saved_);
  }
  DazOff(const DazOff&) = delete;
  DazOff& operator=(const DazOff&) = delete;

 private:
  static constexpr unsigned kDaz = 0x40u;
  unsigned saved_;
};

// m > 1. Per block of weight rows and k-group g: the group's codes decoded into the tile by
// decode(g, j0, rows, tile, ldt) (FP16 bits of value * 2^-8, exact: every E4M3 value times
// 2^-8 is an FP16 value, subnormals included; row stride ldt, zero-padded to ld; widened to
// FP32 by the GEMM tile, half the bytes of an FP32 tile to stream from L2),
// part g of (i, j) = dot_block over the group's kg inputs of the activations (FP16 bits of
// value * 2^-8 as well), * 2^16 (exact: gemv_rows' sum, bit for bit).
// Blocks are multiples of `align` rows (the layout's row group).
template <class DecodeTile>
OCTET_AVX2 void gemm_tiles(const uint8_t* qa, const Fp8WeightView& w,
                           const w8a8_detail::Sink& sink, int64_t m, int64_t ld, int64_t align,
                           const DecodeTile& decode) {
  const int64_t n = w.n, k = w.k, groups = w.k_groups, kg = k / groups;
  // Row strides of the decoded activations and tile one cache line past the inputs: the 3 + 4
  // rows a dot_tile streams do not all map to the same L1 sets when k is 2^n lines long
  // (SmolLM2-1.7B's shapes at m = 128-512, Zen 3: +1-4%). Strides never change a sum.
  // The activations as FP16 bits of value * 2^-8 too (NaN kept): each product is
  // then gemv_step's x * (w * 2^-8) times 2^-8, and so is every partial sum and lane sum, all
  // exactly (every one is 0 or a normal FP32 >= 2^-34, so scaling by 2^-8 rounds nothing):
  // * 2^16 on the sum gives the GEMV's bits.
  const int64_t lda = k + 32, ldt = ld + 32;
  std::vector<uint16_t> a(static_cast<size_t>(m * lda));
  cpu::parallel_for_each(0, m, [&](int64_t i) {
    decode_scaled_tile</*KeepNaN=*/true>(qa + i * k, k, k, 1, lda, a.data() + i * lda);
  }, m * k >= 65536);
  // Weight rows per block: the decoded tile (nb x kg FP16) stays in L2 (<= ~64 KiB) while all
  // m activation rows stream past it; at least 2 blocks per thread for balance. (The block size
  // only decides which thread computes an output, never how.)
  const int threads = cpu::parallel_width();
  int64_t nb = std::max<int64_t>(align, (32768 / std::max<int64_t>(ld, 1)) / align * align);
  nb = std::min(nb, std::max<int64_t>(align, (n / (2 * threads) + align - 1) / align * align));
  const int64_t blocks = (n + nb - 1) / nb;
  cpu::parallel_for(0, blocks, [&](int64_t b_lo, int64_t b_hi) {
    DazOff daz_off;
    std::vector<uint16_t> tile(static_cast<size_t>(nb * ldt));
    // Fused: one running sum [m][nb], ((p0 + p1) + p2) + ... (sum_parts' order), each part
    // added by its tiles as it is computed; partials: every part [groups][m][nb].
    const bool fused = sink.partials == nullptr;
    std::vector<float> parts(static_cast<size_t>((fused ? 1 : groups) * m * nb));
    for (int64_t b = b_lo; b < b_hi; ++b) {
      const int64_t j0 = b * nb, rows = std::min(nb, n - j0);
      for (int64_t g = 0; g < groups; ++g) {
        decode(g, j0, rows, tile.data(), ldt);
        const uint16_t* ag = a.data() + g * kg;
        if (fused && g > 0)
          gemm_avx2::dot_block<gemm_avx2::TileOut::AddScaled>(ag, lda, m, tile.data(), ldt, rows,
                                                              kg, parts.data(), nb, 65536.0f);
        else
          gemm_avx2::dot_block<gemm_avx2::TileOut::Scale>(ag, lda, m, tile.data(), ldt, rows, kg,
                                                          parts.data() + g * m * nb, nb,
                                                          65536.0f);
      }
      for (int64_t i = 0; i < m; ++i) {
        if (fused)
          sink.emit_sum(w, i, j0, j0 + rows, parts.data() + i * nb);
        else
          sink.emit(w, i, j0, j0 + rows, parts.data() + i * nb, m * nb);
      }
    }
  }, m * n * k >= 262144);
}

// m > 1, row-major: blocks of 4 rows, the tile decoded by decode_scaled_tile.
OCTET_AVX2 void gemm(const uint8_t* qa, const Fp8WeightView& w, const w8a8_detail::Sink& sink,
                     int64_t m) {
  const int64_t k = w.k, kg = k / w.k_groups, kg16 = (kg + 15) / 16 * 16;
  gemm_tiles(qa, w, sink, m, kg16, 4,
             [&](int64_t g, int64_t j0, int64_t rows, uint16_t* tile, int64_t ldt) {
               decode_scaled_tile(w.data + j0 * k + g * kg, k, kg, rows, ldt, tile);
             });
}

// --- Rows8x32 (fp8_layout.h): the same sums, read as one sequential stream ---------------
// A 32-code chunk of a row is widened without fp16: each code goes to the top byte of a 16-bit
// lane, an arithmetic shift by 4 and the mask 0x87F0 leave sign at bit 15 and exponent and
// mantissa at bits 10..4, and that 16-bit pattern as the top half of an FP32 is value * 2^-120
// (E4M3 subnormals become FP32 subnormals, exactly). Multiplied by x * 2^112 (exact: |x| <=
// 448), every product equals (value * 2^-8) * x, gemv_step's, and each output takes gemv_rows'
// FMA sequence: the same bits as the row-major path, with 9 integer ops per 32 codes where the
// fp16 route takes 12 and 4 conversions, and 8 rows' codes in one run of bytes (the hardware
// prefetcher follows one stream; docs/benchmarks.md "Decode on AVX2" has the figures).
constexpr int64_t kPackRows = 8, kPackChunk = 32, kPackBlock = kPackRows * kPackChunk;
constexpr float kTwoPow112 = 5192296858534827628530496329220096.0f;  // 2^112

// Chunk codes c -> v[q] = FP32 of (value * 2^-120) of elements [8 q, 8 q + 8) (the byte order
// of Rows8x32 puts element 8 q + l at byte 4 l + {0, 2, 1, 3}[q]).
OCTET_AVX2 inline void widen_chunk(__m256i c, __m256* v) {
  const __m256i mask = _mm256_set1_epi16(static_cast<short>(0x87F0));
  const __m256i top = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256i odd = _mm256_and_si256(_mm256_srai_epi16(c, 4), mask);  // bytes 4 l + 1, 4 l + 3
  const __m256i even = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(c, 8), 4), mask);
  v[0] = _mm256_castsi256_ps(_mm256_slli_epi32(even, 16));
  v[1] = _mm256_castsi256_ps(_mm256_and_si256(even, top));
  v[2] = _mm256_castsi256_ps(_mm256_slli_epi32(odd, 16));
  v[3] = _mm256_castsi256_ps(_mm256_and_si256(odd, top));
}

// x: [groups, kg32] = one row of qa's groups decoded, * 2^112, zero-padded per group (x zeroed
// by the caller).
OCTET_AVX2 void scaled_activation(const uint8_t* qa, int64_t groups, int64_t kg, int64_t kg32,
                                  float* x) {
  for (int64_t g = 0; g < groups; ++g) {
    float* xg = x + g * kg32;
    fp8_decode_avx2(DType::FP8_E4M3, qa + g * kg, xg, static_cast<size_t>(kg));
    for (int64_t t = 0; t < kg; ++t) xg[t] *= kTwoPow112;
  }
}

// A GEMV's software prefetch: 8 chunks (2 KiB) ahead in the block's stream (8 rows x 32
// codes each); past the block's end it reads the next block, which this thread computes next.
// (Zen 3, SmolLM2-135M's linears from DRAM: 4 chunks 21-27 GB/s, 8 chunks 27-30, 16 26-31.)
constexpr int64_t kPrefetch = 8 * kPackBlock;

// out[i * 8 + r] = the sum of gemv_rows<1> for input row i (x: MR rows, stride ldx) and the
// block's weight row r over one part (chunks of 32 codes). The 8 weight rows in passes of RG
// (MR x RG chains in registers; passes after the first read the block's codes from L1); each
// chain is the same for every MR and RG.
template <int MR, int RG>
OCTET_AVX2 inline void gemv_block8_rows(const uint8_t* codes, int64_t chunks, const float* x,
                                        int64_t ldx, float* out) {
  const __m128 s256 = _mm_set1_ps(256.0f);
  const __m256 z = _mm256_setzero_ps();
  for (int r0 = 0; r0 < kPackRows; r0 += RG) {
    __m256 acc[MR][RG];
    for (int i = 0; i < MR; ++i)
      for (int r = 0; r < RG; ++r) acc[i][r] = z;
    const uint8_t* cp = codes;
    for (int64_t c = 0; c < chunks; ++c, cp += kPackBlock) {
      if (r0 == 0)
        for (int64_t p = 0; p < kPackBlock; p += 64)
          _mm_prefetch(reinterpret_cast<const char*>(cp + kPrefetch + p), _MM_HINT_T0);
      for (int r = 0; r < RG; ++r) {
        __m256 v[4];
        widen_chunk(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cp + (r0 + r) * kPackChunk)), v);
        for (int i = 0; i < MR; ++i)
          for (int q = 0; q < 4; ++q)
            acc[i][r] = _mm256_fmadd_ps(
                v[q], _mm256_loadu_ps(x + i * ldx + c * kPackChunk + 8 * q), acc[i][r]);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int r = 0; r < RG; r += 4) {
        alignas(16) float s[4];
        _mm_store_ps(s, _mm_mul_ps(hsum4(acc[i][r], RG > 1 ? acc[i][(r + 1) % RG] : z,
                                         RG > 2 ? acc[i][(r + 2) % RG] : z,
                                         RG > 3 ? acc[i][(r + 3) % RG] : z),
                                   s256));
        for (int q = 0; q < 4 && r + q < RG; ++q) out[i * kPackRows + r0 + r + q] = s[q];
      }
  }
}

// One part's sums of one block for m <= 4 rows (x: the part's inputs of row 0, rows ldx
// apart): parts[i * 8 + r].
OCTET_AVX2 inline void gemv_block(const uint8_t* codes, int64_t chunks, const float* x,
                                  int64_t ldx, int64_t m, float* parts) {
  switch (m) {
    case 1: gemv_block8_rows<1, 8>(codes, chunks, x, ldx, parts); break;
    case 2: gemv_block8_rows<2, 4>(codes, chunks, x, ldx, parts); break;
    case 3: gemv_block8_rows<3, 2>(codes, chunks, x, ldx, parts); break;
    default: gemv_block8_rows<4, 2>(codes, chunks, x, ldx, parts); break;
  }
}

// The largest m that reads weights as a GEMV stream (m rows per pass over each block's codes)
// instead of the GEMM's decoded tiles.
constexpr int64_t kGemvMaxRows = 4;

// m <= kGemvMaxRows rows for `count` weights of the same input (k and k parts equal): their
// blocks of 8 rows in one parallel loop (one thread-team hand-off), each computed as
// gemv_rows8x32 alone would.
OCTET_AVX2 void gemv_rows8x32_multi(const uint8_t* qa, const Fp8WeightView* ws,
                                    const w8a8_detail::Sink* sinks, int count, int64_t m) {
  const int64_t k = ws[0].k, groups = ws[0].k_groups, kg = k / groups;
  const int64_t chunks = (kg + kPackChunk - 1) / kPackChunk, kg32 = chunks * kPackChunk;
  const int64_t ldx = groups * kg32;
  std::vector<float> x(static_cast<size_t>(m * ldx), 0.0f);  // [m][groups][kg32]
  for (int64_t i = 0; i < m; ++i)
    scaled_activation(qa + i * k, groups, kg, kg32, x.data() + i * ldx);
  std::vector<int64_t> first(static_cast<size_t>(count) + 1, 0);  // first block of weight i
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) {
    first[i + 1] = first[i] + (ws[i].n + kPackRows - 1) / kPackRows;
    rows += ws[i].n;
  }
  cpu::parallel_for(0, first[count], [&](int64_t b_lo, int64_t b_hi) {
    DazOff daz_off;
    // [groups][m][8]: part g of row i's 8 outputs.
    std::vector<float> parts(static_cast<size_t>(groups * m * kPackRows));
    // The weight holding block b_lo: the last i with first[i] <= b_lo.
    int i = static_cast<int>(std::upper_bound(first.begin(), first.end(), b_lo) - first.begin());
    --i;
    for (int64_t gb = b_lo; gb < b_hi; ++gb) {
      while (gb >= first[i + 1]) ++i;
      const Fp8WeightView& w = ws[i];
      const int64_t b = gb - first[i];
      for (int64_t g = 0; g < groups; ++g)
        gemv_block(w.data + (b * groups + g) * chunks * kPackBlock, chunks, x.data() + g * kg32,
                   ldx, m, parts.data() + g * m * kPackRows);
      const int64_t j0 = b * kPackRows;
      for (int64_t r = 0; r < m; ++r)
        sinks[i].emit(w, r, j0, std::min(w.n, j0 + kPackRows), parts.data() + r * kPackRows,
                      m * kPackRows);
    }
  }, m * rows * k >= 131072);
}

OCTET_AVX2 void gemv_rows8x32(const uint8_t* qa, const Fp8WeightView& w,
                              const w8a8_detail::Sink& sink, int64_t m) {
  gemv_rows8x32_multi(qa, &w, &sink, 1, m);
}

// Rows [j0, j0 + rows) (j0 a multiple of 8) of part g -> tile: FP16 bits of value * 2^-8, row
// stride ldt >= the part rounded up to 32 inputs (zero past the part's end up to that rounding,
// and in padding rows), as decode_scaled_tile writes. A chunk's 32 codes are put in element
// order by one byte shuffle (per 128-bit half: elements 8 q + l of its 4 l's at bytes
// 4 l + {0, 2, 1, 3}[q] -> dword q) and one dword permute, then widened as the row-major tile.
OCTET_AVX2 void decode_rows8x32_tile(const Fp8WeightView& w, int64_t g, int64_t chunks,
                                     int64_t j0, int64_t rows, uint16_t* tile, int64_t ldt) {
  const __m256i by_q = _mm256_setr_epi8(0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15,
                                        0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15);
  const __m256i halves = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const int64_t groups = w.k_groups;
  for (int64_t b = j0 / kPackRows; b * kPackRows < j0 + rows; ++b) {
    const uint8_t* codes = w.data + (b * groups + g) * chunks * kPackBlock;
    uint16_t* dst = tile + (b * kPackRows - j0) * ldt;
    for (int64_t c = 0; c < chunks; ++c, codes += kPackBlock)
      for (int r = 0; r < kPackRows; ++r) {
        const __m256i ordered = _mm256_permutevar8x32_epi32(
            _mm256_shuffle_epi8(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + r * kPackChunk)),
                by_q),
            halves);
        uint16_t* d = dst + r * ldt + c * kPackChunk;
        store_scaled16<false>(_mm256_castsi256_si128(ordered), d);
        store_scaled16<false>(_mm256_extracti128_si256(ordered, 1), d + 16);
      }
  }
}

// m > 1 on Rows8x32: gemm's sums, blocks of 8 rows, the tile widened from the stream.
OCTET_AVX2 void gemm_rows8x32(const uint8_t* qa, const Fp8WeightView& w,
                              const w8a8_detail::Sink& sink, int64_t m) {
  const int64_t kg = w.k / w.k_groups, chunks = (kg + kPackChunk - 1) / kPackChunk;
  gemm_tiles(qa, w, sink, m, chunks * kPackChunk, kPackRows,
             [&](int64_t g, int64_t j0, int64_t rows, uint16_t* tile, int64_t ldt) {
               decode_rows8x32_tile(w, g, chunks, j0, rows, tile, ldt);
             });
}

// Per-token quantization of rows [0, m): amax (NaN ignored: MAXPS returns its second operand,
// the running max, when the element is NaN), s = max(amax / 448, min), then x / s (DIVPS,
// IEEE-exact like the scalar path) through the saturating AVX2 encoder.
// amax: [m] given row maxima (tensor parallelism: the whole row's, all-reduced), or null.
OCTET_AVX2 void per_token_rows(const float* x, int64_t m, int64_t k, const float* given_amax,
                               uint8_t* q, float* scale) {
  std::vector<float> tmp(static_cast<size_t>(k));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    int64_t i = 0;
    float amax = 0.0f;
    if (given_amax) {
      amax = given_amax[r];
    } else {
      __m256 vmax = _mm256_setzero_ps();
      for (; i + 8 <= k; i += 8)
        vmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xr + i), abs_mask), vmax);
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, vmax);
      for (float v : lanes) amax = std::max(amax, v);
      for (; i < k; ++i) {
        const float a = std::fabs(xr[i]);
        amax = a > amax ? a : amax;  // NaN compares false: ignored
      }
    }
    const float s = std::fmax(amax / 448.0f, kActivationScaleMin);
    scale[r] = s;
    const __m256 vs = _mm256_set1_ps(s);
    i = 0;
    for (; i + 8 <= k; i += 8)
      _mm256_storeu_ps(tmp.data() + i, _mm256_div_ps(_mm256_loadu_ps(xr + i), vs));
    for (; i < k; ++i) tmp[i] = xr[i] / s;
    fp8_encode_avx2(DType::FP8_E4M3, tmp.data(), q + r * k, static_cast<size_t>(k));
  }
}

}  // namespace

void w8a8_detail::run_avx2(const uint8_t* qa, const Fp8WeightView& w,
                           const w8a8_detail::Sink& sink, int64_t m) {
  if (!fp8_avx2_available()) die_without_avx2("linear_w8a8_avx2");
  const bool packed = w.layout == Fp8Layout::Rows8x32;
  if (packed && m <= kGemvMaxRows) {
    gemv_rows8x32(qa, w, sink, m);
  } else if (m == 1) {
    gemv(qa, w, sink);
  } else {
    packed ? gemm_rows8x32(qa, w, sink, m) : gemm(qa, w, sink, m);
  }
}

bool w8a8_detail::run_avx2_gemv_multi(const uint8_t* qa, const Fp8WeightView* ws,
                                       const w8a8_detail::Sink* sinks, int count, int64_t m) {
  if (!fp8_avx2_available()) die_without_avx2("linear_w8a8_multi");
  if (m < 1 || m > kGemvMaxRows) return false;
  for (int i = 0; i < count; ++i)
    if (ws[i].layout != Fp8Layout::Rows8x32 || ws[i].k != ws[0].k ||
        ws[i].k_groups != ws[0].k_groups)
      return false;
  gemv_rows8x32_multi(qa, ws, sinks, count, m);
  return true;
}

void quantize_per_token_e4m3_avx2(const float* x, int64_t m, int64_t k, const float* amax,
                                  uint8_t* q, float* scale) {
  if (!fp8_avx2_available()) die_without_avx2(__func__);
  per_token_rows(x, m, k, amax, q, scale);
}

#else  // not x86-64

void w8a8_detail::run_avx2(const uint8_t*, const Fp8WeightView&, const w8a8_detail::Sink&,
                           int64_t) {
  die_without_avx2("linear_w8a8_avx2");
}
bool w8a8_detail::run_avx2_gemv_multi(const uint8_t*, const Fp8WeightView*,
                                       const w8a8_detail::Sink*, int, int64_t) {
  die_without_avx2("linear_w8a8_multi");
}
void quantize_per_token_e4m3_avx2(const float*, int64_t, int64_t, const float*, uint8_t*,
                                  float*) {
  die_without_avx2(__func__);
}

#endif

}  // namespace octet

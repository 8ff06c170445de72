// W8A8 linear and per-token quantization with AVX2+FMA+F16C (target attributes; the library
// itself needs no -mavx2). Two shapes of work:
//  * GEMV (m == 1, decode): memory bound. Each weight byte is read once and decoded in
//    registers: an E4M3 code sign-extended to 16 bits, shifted left by 7 and masked with 0xBF80
//    is the fp16 of value * 2^-8 (exponent bias 15 vs 7, subnormals included), and VCVTPH2PS
//    widens it exactly. Products with the exact FP32 activations are exact; the 2^-8 comes back
//    as an exact * 256 on the sum. 4 weight rows share each activation load.
//  * GEMM (m > 1, prefill): activations decoded once to FP32, each block of weight rows decoded
//    once into a per-thread FP32 tile and reused for all m rows (3 x 4 register tile,
//    ops_gemm_avx2.h). Blocks of output columns are spread over OpenMP threads.
// NaN codes (0x7F/0xFF) are not supported in the weights here: the GEMV decode reads them as 480.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <omp.h>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/ops_gemm_avx2.h"
#include "kernels/cpu/w8a8.h"

namespace octet {

void check_linear_w8a8_args(const uint8_t* qa, const float* a_scale, const Fp8WeightView& w,
                            float* y, int64_t m);  // w8a8_linear.cpp

namespace {

[[noreturn]] void die_without_avx2(const char* function) {
  std::fprintf(stderr, "octet: %s needs AVX2+FMA+F16C on x86-64, which this build/CPU lacks\n",
               function);
  std::abort();
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

// acc[r] += decoded(w row r, 16 codes at wp[r]) * x (x0: lanes 0-7, x1: lanes 8-15).
template <int NR>
OCTET_AVX2 inline void gemv_step(const __m128i* codes, __m256 x0, __m256 x1, __m256* acc0,
                                 __m256* acc1) {
  for (int r = 0; r < NR; ++r) {
    const __m256i h = e4m3x16_to_scaled_half(codes[r]);
    acc0[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), x0, acc0[r]);
    acc1[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), x1, acc1[r]);
  }
}

// out[r] = sum_t x[t] * decode(w[r * k + t]) for r < NR; x is zero-padded to a multiple of 16.
template <int NR>
OCTET_AVX2 inline void gemv_rows(const uint8_t* w, int64_t k, const float* x, float* out) {
  __m256 acc0[NR], acc1[NR];
  for (int r = 0; r < NR; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  __m128i codes[NR];
  int64_t t = 0;
  for (; t + 16 <= k; t += 16) {
    for (int r = 0; r < NR; ++r)
      codes[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + r * k + t));
    gemv_step<NR>(codes, _mm256_loadu_ps(x + t), _mm256_loadu_ps(x + t + 8), acc0, acc1);
  }
  if (t < k) {  // 1..15 codes left per row: zero-padded copies (x is zero there too)
    alignas(16) uint8_t tail[NR][16] = {};
    for (int r = 0; r < NR; ++r) {
      std::memcpy(tail[r], w + r * k + t, static_cast<size_t>(k - t));
      codes[r] = _mm_load_si128(reinterpret_cast<const __m128i*>(tail[r]));
    }
    gemv_step<NR>(codes, _mm256_loadu_ps(x + t), _mm256_loadu_ps(x + t + 8), acc0, acc1);
  }
  __m256 sums[4];
  for (int r = 0; r < 4; ++r)
    sums[r] = r < NR ? _mm256_add_ps(acc0[r % NR], acc1[r % NR]) : _mm256_setzero_ps();
  alignas(16) float tmp[4];
  _mm_store_ps(tmp, _mm_mul_ps(hsum4(sums[0], sums[1], sums[2], sums[3]), _mm_set1_ps(256.0f)));
  for (int r = 0; r < NR; ++r) out[r] = tmp[r];
}

// y[j] = acc * (s_a * s_w[j]) + bias[j] for j in [j0, j1).
inline void epilogue(float* y_row, const float* acc, int64_t j0, int64_t j1, float sa,
                     const Fp8WeightView& w, const float* bias) {
  for (int64_t j = j0; j < j1; ++j) {
    const float sw = w.granularity == ScaleGranularity::PerRow ? w.scale[j] : w.scale[0];
    y_row[j] = acc[j - j0] * (sa * sw) + (bias ? bias[j] : 0.0f);
  }
}

OCTET_AVX2 void gemv(const uint8_t* qa, float sa, const Fp8WeightView& w, const float* bias,
                     float* y) {
  const int64_t n = w.n, k = w.k;
  const int64_t k16 = (k + 15) / 16 * 16;
  std::vector<float> x(static_cast<size_t>(k16), 0.0f);
  fp8_decode_avx2(Fp8Format::E4M3, qa, x.data(), static_cast<size_t>(k));
  // Blocks of 16 rows (4 x 4-row steps): enough blocks to balance threads on small layers.
  constexpr int64_t kRowsPerBlock = 16;
  const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
#pragma omp parallel for schedule(static) if (n * k >= 131072)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * kRowsPerBlock, j1 = std::min(n, j0 + kRowsPerBlock);
    float acc[kRowsPerBlock];
    int64_t j = j0;
    for (; j + 4 <= j1; j += 4) gemv_rows<4>(w.data + j * k, k, x.data(), acc + (j - j0));
    for (; j < j1; ++j) gemv_rows<1>(w.data + j * k, k, x.data(), acc + (j - j0));
    epilogue(y, acc, j0, j1, sa, w, bias);
  }
}

OCTET_AVX2 void gemm(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                     const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  const int64_t n = w.n, k = w.k;
  std::vector<float> a(static_cast<size_t>(m * k));
#pragma omp parallel for schedule(static) if (m * k >= 65536)
  for (int64_t i = 0; i < m; ++i)
    fp8_decode_avx2(Fp8Format::E4M3, qa + i * k, a.data() + i * k, static_cast<size_t>(k));
  // Weight rows per block: the decoded tile (nb x k FP32) stays in L2 (<= ~128 KiB) while all m
  // activation rows stream past it; at least 2 blocks per thread for balance.
  const int threads = omp_get_max_threads();
  int64_t nb = std::max<int64_t>(4, (32768 / std::max<int64_t>(k, 1)) / 4 * 4);
  nb = std::min(nb, std::max<int64_t>(4, (n / (2 * threads) + 3) / 4 * 4));
  const int64_t blocks = (n + nb - 1) / nb;
#pragma omp parallel if (m * n * k >= 262144)
  {
    std::vector<float> tile(static_cast<size_t>(nb * k));
    std::vector<float> acc(static_cast<size_t>(m * nb));
#pragma omp for schedule(dynamic)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t j0 = b * nb, rows = std::min(nb, n - j0);
      fp8_decode_avx2(Fp8Format::E4M3, w.data + j0 * k, tile.data(),
                      static_cast<size_t>(rows * k));
      gemm_avx2::dot_block(a.data(), k, m, tile.data(), k, rows, k, acc.data(), nb);
      for (int64_t i = 0; i < m; ++i) {
        const float sa = a_granularity == ScaleGranularity::PerRow ? a_scale[i] : a_scale[0];
        epilogue(y + i * n, acc.data() + i * nb, j0, j0 + rows, sa, w, bias);
      }
    }
  }
}

// Per-token quantization of rows [0, m): amax (NaN ignored: MAXPS returns its second operand,
// the running max, when the element is NaN), s = max(amax / 448, min), then x / s (DIVPS,
// IEEE-exact like the scalar path) through the saturating AVX2 encoder.
OCTET_AVX2 void per_token_rows(const float* x, int64_t m, int64_t k, uint8_t* q, float* scale) {
  std::vector<float> tmp(static_cast<size_t>(k));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    __m256 vmax = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
      vmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xr + i), abs_mask), vmax);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float amax = 0.0f;
    for (float v : lanes) amax = std::max(amax, v);
    for (; i < k; ++i) {
      const float a = std::fabs(xr[i]);
      amax = a > amax ? a : amax;  // NaN compares false: ignored
    }
    const float s = std::max(amax / 448.0f, kActivationScaleMin);
    scale[r] = s;
    const __m256 vs = _mm256_set1_ps(s);
    i = 0;
    for (; i + 8 <= k; i += 8) _mm256_storeu_ps(tmp.data() + i, _mm256_div_ps(_mm256_loadu_ps(xr + i), vs));
    for (; i < k; ++i) tmp[i] = xr[i] / s;
    fp8_encode_avx2(Fp8Format::E4M3, tmp.data(), q + r * k, static_cast<size_t>(k));
  }
}

}  // namespace

void linear_w8a8_avx2(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                      const Fp8WeightView& w, const float* bias, float* y, int64_t m) {
  if (!fp8_avx2_available()) die_without_avx2(__func__);
  check_linear_w8a8_args(qa, a_scale, w, y, m);
  if (m == 0 || w.n == 0) return;
  if (m == 1) {
    gemv(qa, a_scale[0], w, bias, y);
  } else {
    gemm(qa, a_scale, a_granularity, w, bias, y, m);
  }
}

void quantize_per_token_e4m3_avx2(const float* x, int64_t m, int64_t k, uint8_t* q,
                                  float* scale) {
  if (!fp8_avx2_available()) die_without_avx2(__func__);
  per_token_rows(x, m, k, q, scale);
}

#else  // not x86-64

void linear_w8a8_avx2(const uint8_t*, const float*, ScaleGranularity, const Fp8WeightView&,
                      const float*, float*, int64_t) {
  die_without_avx2(__func__);
}
void quantize_per_token_e4m3_avx2(const float*, int64_t, int64_t, uint8_t*, float*) {
  die_without_avx2(__func__);
}

#endif

}  // namespace octet

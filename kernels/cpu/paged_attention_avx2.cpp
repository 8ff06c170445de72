// AVX2+FMA+F16C kernel of paged attention (contract in paged_attention_kernel.h), for CPUs
// without AVX-512 VBMI. Each cached row is decoded to FP32 in L1, exactly:
//   bf16: widen and shift left 16;  fp16: VCVTPH2PS;
//   E5M2: the code is the top byte of an fp16 (code << 8), VCVTPH2PS;
//   E4M3: fp16 bits ((c & 0x7F) << 7) | ((c & 0x80) << 8) are the value times 2^-8 (normal and
//         subnormal codes alike), so VCVTPH2PS and * 256; the NaN codes (0x7F, 0xFF) are OR-ed
//         to all-ones (a NaN).
// then FMA dot products (scores) and FMA axpy (weighted sum of V) in natural lane order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/paged_attention_kernel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OCTET_PA_AVX2_BUILT 1
#include <immintrin.h>
#define OCTET_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define OCTET_PA_AVX2_BUILT 0
#endif

namespace octet::paged_detail {

#if OCTET_PA_AVX2_BUILT

namespace {

// exp(x) for 8 lanes: Cephes expf (as ops_avx2.cpp), <= 2 ulp on [-87.3, 88.4]; inputs are
// clamped to that range with the constant first, so a NaN input stays NaN.
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

OCTET_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

OCTET_AVX2 inline __m256 e4m3x8(__m128i codes8) {  // codes in the low 8 bytes
  const __m128i w = _mm_cvtepu8_epi16(codes8);
  const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7F));
  const __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7),
                                 _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8));
  const __m256 f = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
  const __m256i nan = _mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F)));
  return _mm256_or_ps(f, _mm256_castsi256_ps(nan));
}

OCTET_AVX2 void decode_row(KVCacheDType dtype, const uint8_t* p, int64_t n, float* out) {
  int64_t i = 0;
  switch (dtype) {
    case KVCacheDType::BF16:
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(
                                      _mm256_cvtepu16_epi32(_mm_loadu_si128(
                                          reinterpret_cast<const __m128i*>(p + 2 * i))),
                                      16)));
      for (uint16_t h; i < n; ++i) out[i] = (std::memcpy(&h, p + 2 * i, 2), bf16_to_float(h));
      break;
    case KVCacheDType::FP16:
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                      reinterpret_cast<const __m128i*>(p + 2 * i))));
      for (uint16_t h; i < n; ++i) out[i] = (std::memcpy(&h, p + 2 * i, 2), fp16_to_float(h));
      break;
    case KVCacheDType::FP8_E4M3:
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i,
                         e4m3x8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i))));
      for (; i < n; ++i) out[i] = fp8_e4m3_to_float(p[i]);
      break;
    case KVCacheDType::FP8_E5M2:
      for (; i + 8 <= n; i += 8) {
        const __m128i w =
            _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i)));
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_slli_epi16(w, 8)));
      }
      for (; i < n; ++i) out[i] = fp8_e5m2_to_float(p[i]);
      break;
  }
}

OCTET_AVX2 inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float r = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) r = std::fma(a[i], b[i], r);
  return r;
}

OCTET_AVX2 inline void axpy(float p, const float* x, float* y, int64_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(p, x[i], y[i]);
}

OCTET_AVX2 void partial_avx2(const PartialArgs& a, float* scratch, float* m, float* l,
                             float* acc) {
  const int64_t hd = a.head_dim, hdp = padded_head_dim(hd), G = a.num_q_heads;
  const int64_t n = a.end - a.begin;
  float* scores = scratch;  // [G, kPartitionTokens]
  auto* offsets = reinterpret_cast<int64_t*>(scratch + G * (kPartitionTokens + 256));
  float* row = scratch + G * (kPartitionTokens + 256) + 2 * (kPartitionTokens + 32);
  int64_t bi = a.begin / a.block_size, off = a.begin % a.block_size;
  for (int64_t t = 0; t < n; ++t) {
    offsets[t] = (a.block_table[bi] * a.block_size + off) * a.slot_stride;
    if (++off == a.block_size) off = 0, ++bi;
  }
  const int64_t ahead = 8;
  for (int64_t t = 0; t < n; ++t) {
    if (t + ahead < n) _mm_prefetch(reinterpret_cast<const char*>(a.k + offsets[t + ahead]), _MM_HINT_T0);
    decode_row(a.dtype, a.k + offsets[t], hd, row);
    for (int64_t g = 0; g < G; ++g) scores[g * kPartitionTokens + t] = dot(a.q + g * hdp, row, hd);
  }
  const int64_t n8 = n / 8 * 8;
  for (int64_t g = 0; g < G; ++g) {
    float* sg = scores + g * kPartitionTokens;
    float mx = *std::max_element(sg, sg + n);
    const __m256 mv = _mm256_set1_ps(mx);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t t = 0; t < n8; t += 8) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sg + t), mv));
      _mm256_storeu_ps(sg + t, e);
      sum = _mm256_add_ps(sum, e);
    }
    float s = hsum(sum);
    if (n8 < n) {  // the tail through the same exp8, lanes past n left out of the sum
      alignas(32) float tail[8] = {};
      std::copy(sg + n8, sg + n, tail);
      _mm256_store_ps(tail, exp8(_mm256_sub_ps(_mm256_load_ps(tail), mv)));
      for (int64_t t = n8; t < n; ++t) s += (sg[t] = tail[t - n8]);
    }
    m[g] = mx;
    l[g] = s;
  }
  std::fill(acc, acc + G * hdp, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    if (t + ahead < n) _mm_prefetch(reinterpret_cast<const char*>(a.v + offsets[t + ahead]), _MM_HINT_T0);
    decode_row(a.dtype, a.v + offsets[t], hd, row);
    for (int64_t g = 0; g < G; ++g) axpy(scores[g * kPartitionTokens + t], row, acc + g * hdp, hd);
  }
}

}  // namespace

bool avx2_kernel_available() { return fp8_avx2_available(); }  // AVX2 + FMA + F16C
Kernel avx2_kernel() { return {partial_avx2, natural_lane_order, INT64_MAX, "avx2"}; }

#else

bool avx2_kernel_available() { return false; }
Kernel avx2_kernel() { return scalar_kernel(); }

#endif

}  // namespace octet::paged_detail

// AVX2+FMA+F16C kernel of paged attention (contract in paged_attention_kernel.h), for CPUs
// without AVX-512 VBMI. Cached values are decoded to FP32 exactly:
//   bf16: widen and shift left 16;  fp16: VCVTPH2PS;
//   E5M2: the code is the top byte of an fp16 (code << 8), VCVTPH2PS;
//   E4M3: fp16 bits ((c & 0x7F) << 7) | ((c & 0x80) << 8) are the value times 2^-8 (normal and
//         subnormal codes alike), so VCVTPH2PS and * 256; the NaN codes (0x7F, 0xFF) are OR-ed
//         to all-ones (a NaN).
// Scores: K rows decoded straight to registers (a row decoded to L1 when head_dim % 8 != 0),
// FMA dot products with up to 4 query heads for 2-4 tokens side by side, 8-lane partial sums
// reduced 8 tokens at a time by one HADD tree. Weighted sum of V: up to 64 elements at a time
// for one head (32 for two, 16 for 3-4), decoded straight to registers, 8 chains side by side.
// Every sum's order is fixed by the element and token indices alone. Natural lane order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/common/check.h"
#include "kernels/cpu/fp8.h"
#include "kernels/common/half.h"
#include "kernels/cpu/ops_gemm_avx2.h"
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

// The cache's dtype is a template argument throughout: no per-row or per-vector dispatch.
template <DType dtype>
OCTET_AVX2 inline void decode_row(const uint8_t* p, int64_t n, float* out) {
  int64_t i = 0;
  switch (dtype) {
    case DType::F32: std::memcpy(out, p, 4 * n); break;
    case DType::BF16:
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(
                                      _mm256_cvtepu16_epi32(_mm_loadu_si128(
                                          reinterpret_cast<const __m128i*>(p + 2 * i))),
                                      16)));
      for (uint16_t h; i < n; ++i) out[i] = (std::memcpy(&h, p + 2 * i, 2), bf16_to_float(h));
      break;
    case DType::F16:
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                      reinterpret_cast<const __m128i*>(p + 2 * i))));
      for (uint16_t h; i < n; ++i) out[i] = (std::memcpy(&h, p + 2 * i, 2), fp16_to_float(h));
      break;
    case DType::FP8_E4M3:
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i,
                         e4m3x8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i))));
      for (; i < n; ++i) out[i] = fp8_e4m3_to_float(p[i]);
      break;
    case DType::FP8_E5M2:
      for (; i + 8 <= n; i += 8) {
        const __m128i w =
            _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i)));
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_slli_epi16(w, 8)));
      }
      for (; i < n; ++i) out[i] = fp8_e5m2_to_float(p[i]);
      break;
  }
}

// 8 vectors of 8 (v[0], v[8], ...; one per token) -> lane i = sum of the lanes of vector i.
OCTET_AVX2 inline __m256 hsum8x8(const float* v) {
  const __m256 h01 = _mm256_hadd_ps(_mm256_loadu_ps(v), _mm256_loadu_ps(v + 8));
  const __m256 h23 = _mm256_hadd_ps(_mm256_loadu_ps(v + 16), _mm256_loadu_ps(v + 24));
  const __m256 h45 = _mm256_hadd_ps(_mm256_loadu_ps(v + 32), _mm256_loadu_ps(v + 40));
  const __m256 h67 = _mm256_hadd_ps(_mm256_loadu_ps(v + 48), _mm256_loadu_ps(v + 56));
  const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                       _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

// 8 cached values at p, exact.
template <DType dtype>
OCTET_AVX2 inline __m256 decode8(const uint8_t* p) {
  switch (dtype) {
    case DType::F32: return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    case DType::BF16:
      return _mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
    case DType::F16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    case DType::FP8_E4M3:
      return e4m3x8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    case DType::FP8_E5M2:
      return _mm256_cvtph_ps(_mm_slli_epi16(
          _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))), 8));
  }
  return _mm256_setzero_ps();
}

// Tokens ahead that the kernel prefetches (the offsets array holds kPartitionTokens + 32).
constexpr int64_t kAhead = 32;

// Every cache line of a row of `bytes` bytes at p (a K or V head row: 128 bytes for BF16 at
// head_dim 64, two or three lines). Locality as __builtin_prefetch's: 3 = T0, 2 = T1.
template <int Locality>
OCTET_AVX2 inline void prefetch_row(const uint8_t* p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, Locality);
  __builtin_prefetch(p + bytes - 1, 0, Locality);
}

// 16 cached values from element e of a row (fewer than 16 left: zero-padded), exact.
template <DType dtype>
OCTET_AVX2 inline void decode16(const uint8_t* row, int64_t e, int64_t hd, __m256* f) {
  const int64_t bytes = dtype_bytes(dtype);
  if (e + 16 <= hd) {
    f[0] = decode8<dtype>(row + e * bytes);
    f[1] = decode8<dtype>(row + (e + 8) * bytes);
    return;
  }
  alignas(32) float tmp[16] = {};
  decode_row<dtype>(row + e * bytes, hd - e, tmp);
  f[0] = _mm256_load_ps(tmp);
  f[1] = _mm256_load_ps(tmp + 8);
}

// acc[g][e .. e + 8 NV) = sum_t p[g][t] v_t[e .. e + 8 NV) for GB heads (p, acc at the first),
// each element's sum in token order. GB x NV chains side by side: one chain per element pair
// would wait on the FMA's latency every token.
// Tokens [t0, t1): from zero (cont false) or on from the sums in acc (cont true: the same
// chains as one pass over [0, t1)).
template <DType D, int GB, int NV>
OCTET_AVX2 void v_chunk(const uint8_t* v, int64_t hd, const int64_t* offsets, int64_t t0,
                        int64_t t1, int64_t e, const float* p, int64_t hdp, float* acc,
                        bool cont) {
  static_assert(NV % 2 == 0 && GB * NV <= 8);
  __m256 s[GB][NV];
  for (int g = 0; g < GB; ++g)
    for (int j = 0; j < NV; ++j)
      s[g][j] = cont ? _mm256_loadu_ps(acc + g * hdp + e + 8 * j) : _mm256_setzero_ps();
  constexpr int64_t bytes = dtype_bytes(D);
  for (int64_t t = t0; t < t1; ++t) {
    prefetch_row<3>(v + offsets[t + kAhead] + e * bytes, 8 * NV * bytes);
    __m256 f[NV];
    for (int j = 0; j < NV; j += 2) decode16<D>(v + offsets[t], e + 8 * j, hd, f + j);
    for (int g = 0; g < GB; ++g) {
      const __m256 pg = _mm256_broadcast_ss(p + g * kPartitionTokens + t);
      for (int j = 0; j < NV; ++j) s[g][j] = _mm256_fmadd_ps(pg, f[j], s[g][j]);
    }
  }
  for (int g = 0; g < GB; ++g)
    for (int j = 0; j < NV; ++j) _mm256_storeu_ps(acc + g * hdp + e + 8 * j, s[g][j]);
}

// The V chunk from element e (< head_dim) for heads [g0, g0 + gb) over tokens [t0, t1)
// (v_chunk's cont): 8 accumulators' worth of elements, at most up to head_dim rounded up to 16.
// Returns the chunk's width.
template <DType D>
OCTET_AVX2 int64_t v_chunks(const uint8_t* v, int64_t hd, const int64_t* offsets, int64_t t0,
                            int64_t t1, int64_t e, int64_t gb, const float* p, int64_t hdp,
                            float* acc, bool cont = false) {
  const int64_t pairs = std::min<int64_t>(4 / gb, (hd - e + 15) / 16);  // gb * 2 pairs <= 8
#define OCTET_V_CHUNK(GB, NV) v_chunk<D, GB, NV>(v, hd, offsets, t0, t1, e, p, hdp, acc, cont)
  switch (gb * 8 + pairs) {
    case 8 + 4: OCTET_V_CHUNK(1, 8); break;
    case 8 + 3: OCTET_V_CHUNK(1, 6); break;
    case 8 + 2: OCTET_V_CHUNK(1, 4); break;
    case 8 + 1: OCTET_V_CHUNK(1, 2); break;
    case 16 + 2: OCTET_V_CHUNK(2, 4); break;
    case 16 + 1: OCTET_V_CHUNK(2, 2); break;
    case 24 + 1: OCTET_V_CHUNK(3, 2); break;
    default: OCTET_V_CHUNK(4, 2); break;
  }
#undef OCTET_V_CHUNK
  return 16 * pairs;
}

// Scores of TB tokens (rows at k + offs[i]) for GB heads, the K rows decoded straight to
// registers (head_dim % 8 == 0): red[(g * 8 + i) * 8 + lane] = the lane's partial sum of
// q_g . k_i, the chain q[0..8) * k[0..8), then FMA for d = 8, 16, ... TB tokens' chains side by
// side (one token's chain alone waits on the FMA latency at every step).
template <DType D, int TB, int GB>
OCTET_AVX2 inline void k_dots(const uint8_t* k, const int64_t* offs, int64_t hd, const float* q,
                              int64_t hdp, float* red) {
  constexpr int64_t bytes = dtype_bytes(D);
  __m256 acc[GB][TB];
  for (int i = 0; i < TB; ++i) {
    const __m256 kv = decode8<D>(k + offs[i]);
    for (int g = 0; g < GB; ++g) acc[g][i] = _mm256_mul_ps(_mm256_loadu_ps(q + g * hdp), kv);
  }
  for (int64_t d = 8; d < hd; d += 8)
    for (int i = 0; i < TB; ++i) {
      const __m256 kv = decode8<D>(k + offs[i] + d * bytes);
      for (int g = 0; g < GB; ++g)
        acc[g][i] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * hdp + d), kv, acc[g][i]);
    }
  for (int g = 0; g < GB; ++g)
    for (int i = 0; i < TB; ++i) _mm256_storeu_ps(red + (g * 8 + i) * 8, acc[g][i]);
}

// k_dots over cnt <= 8 tokens for GB heads.
template <DType D, int GB>
OCTET_AVX2 void k_dots_run(const uint8_t* k, const int64_t* offs, int64_t cnt, int64_t hd,
                           const float* q, int64_t hdp, float* red) {
  constexpr int TB = GB <= 2 ? 4 : 2;
  int64_t i = 0;
  for (; i + TB <= cnt; i += TB) k_dots<D, TB, GB>(k, offs + i, hd, q, hdp, red + i * 8);
  for (; i < cnt; ++i) k_dots<D, 1, GB>(k, offs + i, hd, q, hdp, red + i * 8);
}

// offsets[t] = the byte offset of position begin + t's cache slot, t < n (n >= 1), then kAhead
// copies of the last (prefetched past the end).
inline void slot_offsets(const PartialArgs& a, int64_t n, int64_t* offsets) {
  int64_t bi = a.begin / a.block_size, off = a.begin % a.block_size;
  for (int64_t t = 0; t < n; ++t) {
    offsets[t] = (a.block_table[bi] * a.block_size + off) * a.slot_stride;
    if (++off == a.block_size) off = 0, ++bi;
  }
  for (int64_t t = n; t < n + kAhead; ++t) offsets[t] = offsets[n - 1];
}

// Scores s[0, n) of one query head -> exp(s[t] - m) in place, m = their max, l = the sum of
// the exps (8-lane sums in token order, their lanes summed, then the tail in order).
OCTET_AVX2 inline void softmax_numerators(float* sg, int64_t n, float* m, float* l) {
  const int64_t n8 = n / 8 * 8;
  const float mx = *std::max_element(sg, sg + n);
  const __m256 mv = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t t = 0; t < n8; t += 8) {
    const __m256 e = gemm_avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(sg + t), mv));
    _mm256_storeu_ps(sg + t, e);
    sum = _mm256_add_ps(sum, e);
  }
  float s = hsum(sum);
  if (n8 < n) {  // the tail through the same exp8
    alignas(32) float tail[8] = {};
    std::copy(sg + n8, sg + n, tail);
    _mm256_store_ps(tail, gemm_avx2::exp8(_mm256_sub_ps(_mm256_load_ps(tail), mv)));
    for (int64_t t = n8; t < n; ++t) s += (sg[t] = tail[t - n8]);
  }
  *m = mx;
  *l = s;
}

// V bytes of a chunk of heads' partition kept in L2 between the score and the V pass.
constexpr int64_t kHeadChunkBytes = 192 * 1024;

template <DType D>
OCTET_AVX2 void partial_t(const PartialArgs& a, float* scratch, float* m, float* l,
                          float* acc) {
  const int64_t hd = a.head_dim, hdp = padded_head_dim(hd), G = a.num_q_heads;
  const int64_t H = a.num_kv_heads_run, GH = G * H;
  const int64_t hd8 = (hd + 7) / 8 * 8;
  const int64_t n = a.end - a.begin;
  float* scores = scratch;                      // [H * G, kPartitionTokens]
  float* red = scratch + GH * kPartitionTokens;  // [H * G, 8 tokens, 8 lanes]
  auto* offsets = reinterpret_cast<int64_t*>(scratch + GH * (kPartitionTokens + 256));
  // One decoded row; lanes hd .. hd8 zeroed here (only hd are written below; the row's place
  // moves with the call's head count, so earlier calls may have left scores or offsets there).
  float* row = scratch + GH * (kPartitionTokens + 256) + 2 * (kPartitionTokens + 32);
  std::fill(row + hd, row + hd8, 0.0f);
  slot_offsets(a, n, offsets);
  const int64_t row_bytes = hd * dtype_bytes(D);
  // Heads side by side in a slot: a chunk of them is read as one run of bytes per position
  // (one head's rows alone are a slot apart), small enough that its V rows wait in L2.
  const int64_t chunk = std::clamp<int64_t>(kHeadChunkBytes / std::max<int64_t>(1, n * row_bytes),
                                            1, H);
  for (int64_t h0 = 0; h0 < H; h0 += chunk) {
    const int64_t h1 = std::min(H, h0 + chunk), run_bytes = (h1 - h0) * row_bytes;
    const uint8_t* k0 = a.k + h0 * row_bytes;
    const uint8_t* v0 = a.v + h0 * row_bytes;

    // Scores: q . k per token and head, 8-lane partial sums reduced 8 tokens at a time.
    for (int64_t t0 = 0; t0 < n; t0 += 8) {
      const int64_t cnt = std::min<int64_t>(8, n - t0);
      for (int64_t i = 0; i < cnt; ++i) {
        prefetch_row<3>(k0 + offsets[t0 + i + kAhead], run_bytes);  // T0
        prefetch_row<2>(v0 + offsets[t0 + i + kAhead], run_bytes);  // T1
      }
      for (int64_t h = h0; h < h1; ++h) {
        const uint8_t* kh = a.k + h * row_bytes;
        const float* qh = a.q + h * G * hdp;
        float* rh = red + h * G * 64;
        if (hd % 8 == 0) {
          for (int64_t g0 = 0; g0 < G; g0 += 4) {
            const float* qg = qh + g0 * hdp;
            float* rg = rh + g0 * 64;
            switch (std::min<int64_t>(4, G - g0)) {
              case 1: k_dots_run<D, 1>(kh, offsets + t0, cnt, hd, qg, hdp, rg); break;
              case 2: k_dots_run<D, 2>(kh, offsets + t0, cnt, hd, qg, hdp, rg); break;
              case 3: k_dots_run<D, 3>(kh, offsets + t0, cnt, hd, qg, hdp, rg); break;
              default: k_dots_run<D, 4>(kh, offsets + t0, cnt, hd, qg, hdp, rg); break;
            }
          }
        } else {  // the row decoded to L1, zero-padded to a multiple of 8
          for (int64_t i = 0; i < cnt; ++i) {
            decode_row<D>(kh + offsets[t0 + i], hd, row);
            for (int64_t g = 0; g < G; ++g) {
              const float* qg = qh + g * hdp;
              __m256 acc0 = _mm256_mul_ps(_mm256_loadu_ps(qg), _mm256_loadu_ps(row));
              for (int64_t d = 8; d < hd8; d += 8)
                acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + d), _mm256_loadu_ps(row + d), acc0);
              _mm256_storeu_ps(rh + (g * 8 + i) * 8, acc0);
            }
          }
        }
      }
      for (int64_t g = h0 * G; g < h1 * G; ++g)
        _mm256_storeu_ps(scores + g * kPartitionTokens + t0, hsum8x8(red + g * 64));
    }

    // Softmax numerators in place, m and l per head; lanes past n never enter the sum.
    for (int64_t g = h0 * G; g < h1 * G; ++g)
      softmax_numerators(scores + g * kPartitionTokens, n, m + g, l + g);

    // Weighted sum of V: chunks of up to 64 elements for up to 4 heads, 8 accumulators each.
    const int64_t hd16 = (hd + 15) / 16 * 16;
    for (int64_t h = h0; h < h1; ++h) {
      const uint8_t* vh = a.v + h * row_bytes;
      for (int64_t g0 = 0; g0 < G; g0 += 4) {
        const int64_t gb = std::min<int64_t>(4, G - g0);
        const float* p = scores + (h * G + g0) * kPartitionTokens;
        float* ag = acc + (h * G + g0) * hdp;
        for (int64_t e = 0; e < hd;) e += v_chunks<D>(vh, hd, offsets, 0, n, e, gb, p, hdp, ag);
        for (int64_t g = 0; g < gb; ++g) std::fill(ag + g * hdp + hd16, ag + g * hdp + hdp, 0.0f);
      }
    }
  }
}

// a.num_rows query rows of one sequence (row i over positions [begin, row_ends[i])), one KV
// head, num_rows * num_q_heads <= 4 query vectors, head_dim % 8 == 0: each K and V row is read
// once for all of them (prefill rows of a sequence share their positions). Every row's m, l and
// acc are partial_t's for that row alone: k_dots and v_chunk keep one chain per query vector and
// token or element whatever GB is, softmax_numerators runs on each row's own n, and the V
// chains of a row's tokens past the shortest row's go on from where the shared pass left them.
template <DType D>
OCTET_AVX2 void partial_rows_t(const PartialArgs& a, float* scratch, float* m, float* l,
                               float* acc) {
  const int64_t hd = a.head_dim, hdp = padded_head_dim(hd), G = a.num_q_heads;
  const int64_t Q = a.num_rows * G, n = a.end - a.begin;
  float* scores = scratch;                      // [Q, kPartitionTokens]
  float* red = scratch + Q * kPartitionTokens;  // [Q, 8 tokens, 8 lanes]
  auto* offsets = reinterpret_cast<int64_t*>(scratch + Q * (kPartitionTokens + 256));
  slot_offsets(a, n, offsets);
  const int64_t row_bytes = hd * dtype_bytes(D);
  for (int64_t t0 = 0; t0 < n; t0 += 8) {
    const int64_t cnt = std::min<int64_t>(8, n - t0);
    for (int64_t i = 0; i < cnt; ++i) {
      prefetch_row<3>(a.k + offsets[t0 + i + kAhead], row_bytes);
      prefetch_row<2>(a.v + offsets[t0 + i + kAhead], row_bytes);
    }
    switch (Q) {
      case 1: k_dots_run<D, 1>(a.k, offsets + t0, cnt, hd, a.q, hdp, red); break;
      case 2: k_dots_run<D, 2>(a.k, offsets + t0, cnt, hd, a.q, hdp, red); break;
      case 3: k_dots_run<D, 3>(a.k, offsets + t0, cnt, hd, a.q, hdp, red); break;
      default: k_dots_run<D, 4>(a.k, offsets + t0, cnt, hd, a.q, hdp, red); break;
    }
    for (int64_t g = 0; g < Q; ++g)
      _mm256_storeu_ps(scores + g * kPartitionTokens + t0, hsum8x8(red + g * 64));
  }
  int64_t shortest = n;
  for (int64_t r = 0; r < a.num_rows; ++r) {
    const int64_t nr = a.row_ends[r] - a.begin;
    shortest = std::min(shortest, nr);
    for (int64_t g = r * G; g < (r + 1) * G; ++g)
      softmax_numerators(scores + g * kPartitionTokens, nr, m + g, l + g);
  }
  for (int64_t e = 0; e < hd;)
    e += v_chunks<D>(a.v, hd, offsets, 0, shortest, e, Q, scores, hdp, acc);
  for (int64_t r = 0; r < a.num_rows; ++r) {
    const int64_t nr = a.row_ends[r] - a.begin;
    if (nr == shortest) continue;
    for (int64_t g0 = r * G; g0 < (r + 1) * G; g0 += 4) {
      const int64_t gb = std::min<int64_t>(4, (r + 1) * G - g0);
      for (int64_t e = 0; e < hd;)
        e += v_chunks<D>(a.v, hd, offsets, shortest, nr, e, gb, scores + g0 * kPartitionTokens,
                         hdp, acc + g0 * hdp, /*cont=*/true);
    }
  }
  const int64_t hd16 = (hd + 15) / 16 * 16;
  for (int64_t g = 0; g < Q; ++g) std::fill(acc + g * hdp + hd16, acc + g * hdp + hdp, 0.0f);
}

// a.num_rows > 1: partial_rows_t where it applies, else each row on its own.
template <DType D>
OCTET_AVX2 void rows_t(const PartialArgs& a, float* scratch, float* m, float* l, float* acc) {
  if (a.num_rows * a.num_q_heads <= 4 && a.num_kv_heads_run == 1 && a.head_dim % 8 == 0)
    return partial_rows_t<D>(a, scratch, m, l, acc);
  const int64_t per_row = a.num_q_heads * a.num_kv_heads_run;
  const int64_t hdp = padded_head_dim(a.head_dim);
  for (int64_t r = 0; r < a.num_rows; ++r) {
    PartialArgs one = a;
    one.num_rows = 1;
    one.q = a.q + r * per_row * hdp;
    one.end = a.row_ends[r];
    partial_t<D>(one, scratch, m + r * per_row, l + r * per_row, acc + r * per_row * hdp);
  }
}

// One call: of several rows (rows_t) or of one (partial_t).
template <DType D>
OCTET_AVX2 void partial_d(const PartialArgs& a, float* scratch, float* m, float* l, float* acc) {
  if (a.num_rows > 1) return rows_t<D>(a, scratch, m, l, acc);
  partial_t<D>(a, scratch, m, l, acc);
}

void partial_avx2(const PartialArgs& a, float* scratch, float* m, float* l, float* acc) {
  switch (a.dtype) {
    case DType::F32: return partial_d<DType::F32>(a, scratch, m, l, acc);
    case DType::BF16: return partial_d<DType::BF16>(a, scratch, m, l, acc);
    case DType::F16: return partial_d<DType::F16>(a, scratch, m, l, acc);
    case DType::FP8_E4M3: return partial_d<DType::FP8_E4M3>(a, scratch, m, l, acc);
    case DType::FP8_E5M2: return partial_d<DType::FP8_E5M2>(a, scratch, m, l, acc);
    default: OCTET_CHECK(false, "paged attention: cache dtype ", dtype_name(a.dtype));
  }
}

}  // namespace

bool avx2_kernel_available() { return fp8_avx2_available(); }  // AVX2 + FMA + F16C
Kernel avx2_kernel() {
  return {partial_avx2, natural_lane_order, INT64_MAX, "avx2", /*max_kv_heads=*/16,
          /*max_query_vectors=*/4};
}

#else

bool avx2_kernel_available() { return false; }
Kernel avx2_kernel() { return scalar_kernel(); }

#endif

}  // namespace octet::paged_detail

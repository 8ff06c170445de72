// AVX-512 kernel of paged attention (contract in paged_attention_kernel.h), for CPUs with
// AVX-512 F/BW/VL/VBMI (Zen 4, Ice Lake and later). A head row is decoded 64 elements at a time
// straight into 4 FP32 registers, exactly:
//   FP8 (E4M3 or E5M2): every value is a normal bf16 (or inf/NaN), so two VPERMI2B lookups
//     give the high and low bytes of the bf16 of the 128 magnitudes, the sign is OR-ed back
//     (as w8a8_gemv_avx512.cpp), a byte interleave makes bf16 words and a shift or a mask of
//     each dword makes FP32;
//   BF16: interleave the words with zero words;  FP16: VCVTPH2PS.
// The interleaves permute the 64 lanes; the driver stores q in that lane order
// (lane_order()) and puts the sums back, so no shuffle is spent per row.
// Scores: per token and head, 16-lane FMA partial sums, reduced 16 tokens at a time by one
// transpose-and-add tree (each token's sum is its own fixed sequence of adds). Softmax with a
// vector exp. Weighted sum of V: per 64-element group, up to 4 heads x 4 registers of FP32
// accumulators, so V is read once for up to 4 heads of a KV group.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/common/check.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/paged_attention_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OCTET_PA_AVX512_BUILT 1
#include <immintrin.h>
// GCC 12's intrinsics start from _mm512_undefined_*() (a self-initialised variable), which
// -Wmaybe-uninitialized reports once per inlined use; nothing here reads an undefined value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define OCTET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,fma,f16c")))
#else
#define OCTET_PA_AVX512_BUILT 0
#endif

namespace octet::paged_detail {

#if OCTET_PA_AVX512_BUILT

namespace {

constexpr int64_t kAhead = 24;  // rows prefetched ahead (offsets are padded by 32)

// bf16 bits of the FP8 magnitudes 0..127, high and low bytes.
struct Bf16Table {
  alignas(64) uint8_t hi[128];
  alignas(64) uint8_t lo[128];
  explicit Bf16Table(DType format) {
    for (int c = 0; c < 128; ++c) {
      const float v = fp8_to_float(format, static_cast<uint8_t>(c));
      uint32_t u;
      std::memcpy(&u, &v, 4);
      const uint16_t b = static_cast<uint16_t>(u >> 16);  // exact: 2 or 3 mantissa bits
      hi[c] = static_cast<uint8_t>(b >> 8);
      lo[c] = static_cast<uint8_t>(b);
    }
  }
};

// Each decoder: operator()(group pointer, element mask, f[4]) and kBytes per element.
struct DecodeFp8 {
  static constexpr int64_t kBytes = 1;
  __m512i thi0, thi1, tlo0, tlo1;
  OCTET_AVX512 explicit DecodeFp8(const Bf16Table& t)
      : thi0(_mm512_load_si512(t.hi)), thi1(_mm512_load_si512(t.hi + 64)),
        tlo0(_mm512_load_si512(t.lo)), tlo1(_mm512_load_si512(t.lo + 64)) {}
  // lane (c * 16 + L * 4 + j) holds element L * 16 + 4 c + j
  OCTET_AVX512 inline void operator()(const uint8_t* p, __mmask64 mask, __m512* f) const {
    const __m512i codes = _mm512_maskz_loadu_epi8(mask, p);
    __m512i hi = _mm512_permutex2var_epi8(thi0, codes, thi1);  // index bit 7 ignored
    const __m512i lo = _mm512_permutex2var_epi8(tlo0, codes, tlo1);
    hi = _mm512_ternarylogic_epi32(hi, codes, _mm512_set1_epi8(static_cast<char>(0x80)),
                                   0xF8);  // hi | (codes & 0x80)
    const __m512i wlo = _mm512_unpacklo_epi8(lo, hi), whi = _mm512_unpackhi_epi8(lo, hi);
    // Each dword holds two bf16 words: the low one shifted up, the high one masked, is FP32.
    const __m512i upper = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    f[0] = _mm512_castsi512_ps(_mm512_slli_epi32(wlo, 16));
    f[1] = _mm512_castsi512_ps(_mm512_and_si512(wlo, upper));
    f[2] = _mm512_castsi512_ps(_mm512_slli_epi32(whi, 16));
    f[3] = _mm512_castsi512_ps(_mm512_and_si512(whi, upper));
  }
  static int order(int lane) {
    const int c = lane / 16, L = (lane % 16) / 4, j = lane % 4;
    return L * 16 + (c / 2) * 8 + 2 * j + c % 2;
  }
};

struct DecodeBf16 {
  static constexpr int64_t kBytes = 2;
  // lane (c * 16 + L * 4 + j) holds element (c / 2) * 32 + L * 8 + (c % 2) * 4 + j
  OCTET_AVX512 inline void operator()(const uint8_t* p, __mmask64 mask, __m512* f) const {
    const __m512i w0 = _mm512_maskz_loadu_epi16(static_cast<__mmask32>(mask), p);
    const __m512i w1 = _mm512_maskz_loadu_epi16(static_cast<__mmask32>(mask >> 32), p + 64);
    const __m512i z = _mm512_setzero_si512();
    f[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, w0));
    f[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, w0));
    f[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, w1));
    f[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, w1));
  }
  static int order(int lane) {
    const int c = lane / 16, L = (lane % 16) / 4, j = lane % 4;
    return (c / 2) * 32 + L * 8 + (c % 2) * 4 + j;
  }
};

struct DecodeFp16 {
  static constexpr int64_t kBytes = 2;
  OCTET_AVX512 inline void operator()(const uint8_t* p, __mmask64 mask, __m512* f) const {
    for (int c = 0; c < 4; ++c)
      f[c] = _mm512_cvtph_ps(
          _mm256_maskz_loadu_epi16(static_cast<__mmask16>(mask >> (16 * c)), p + 32 * c));
  }
  static int order(int lane) { return lane; }
};

template <typename D>
const uint8_t* order_table() {
  static const auto table = [] {
    std::array<uint8_t, kGroupLanes> o{};
    for (int j = 0; j < kGroupLanes; ++j) o[j] = static_cast<uint8_t>(D::order(j));
    return o;
  }();
  return table.data();
}

const uint8_t* lane_order_avx512(DType dtype) {
  switch (dtype) {
    case DType::BF16: return order_table<DecodeBf16>();
    case DType::F16: return order_table<DecodeFp16>();
    default: return order_table<DecodeFp8>();
  }
}

// exp(x) for 16 lanes: Cephes expf, <= 2 ulp on [-87.3, 88.4]; clamped with the constant
// first, so a NaN input stays NaN.
OCTET_AVX512 inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.3762626647949f), x);
  x = _mm512_max_ps(_mm512_set1_ps(-87.3365447504f), x);
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 x2 = _mm512_mul_ps(x, x);
  p = _mm512_fmadd_ps(p, x2, _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  const __m512i pow2n =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(pow2n));
}

// v: 16 vectors at v[0], v[16], ... (one per token) -> lane i = sum of the lanes of v[i].
OCTET_AVX512 inline __m512 hsum16(const float* v) {
  __m512 x[8], z[4];
  for (int i = 0; i < 8; ++i) {
    const __m512 a = _mm512_loadu_ps(v + 32 * i), b = _mm512_loadu_ps(v + 32 * i + 16);
    x[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(x[2 * i]), b = _mm512_castps_pd(x[2 * i + 1]);
    z[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(z[2], z[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(z[2], z[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
}

OCTET_AVX512 inline void prefetch_row(const uint8_t* p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(p + b), _MM_HINT_T0);
}
OCTET_AVX512 inline void prefetch_row_l2(const uint8_t* p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(p + b), _MM_HINT_T1);
}

// Scores of GB heads from g0 for n rows (offsets: byte offsets of the rows), ND groups of 64
// elements; the queries stay in registers. Each (token, head) sum is the same sequence of
// operations whatever GB, g0 and the neighbouring tokens are.
template <typename D, int ND, int GB>
OCTET_AVX512 void scores_block(const D& dec, const PartialArgs& a, const int64_t* offsets,
                               int64_t n, const __mmask64* masks, int64_t g0, float* red,
                               float* scores) {
  constexpr int kChunks = 4 * ND;
  const int64_t hdp = ND * kGroupLanes;
  const int64_t row_bytes = a.head_dim * D::kBytes;
  __m512 qr[GB][kChunks];
  for (int g = 0; g < GB; ++g)
    for (int c = 0; c < kChunks; ++c) qr[g][c] = _mm512_loadu_ps(a.q + (g0 + g) * hdp + 16 * c);
  // The first block of heads prefetches the K rows ahead and the V rows (to L2) for the V pass.
  if (g0 == 0)
    for (int64_t t = 0; t < std::min(n, kAhead); ++t) {
      prefetch_row(a.k + offsets[t], row_bytes);
      prefetch_row_l2(a.v + offsets[t], row_bytes);
    }
  for (int64_t t0 = 0; t0 < n; t0 += 16) {
    const int64_t cnt = std::min<int64_t>(16, n - t0);
    for (int64_t i = 0; i < cnt; ++i) {
      const int64_t t = t0 + i;
      if (g0 == 0) {
        prefetch_row(a.k + offsets[t + kAhead], row_bytes);
        prefetch_row_l2(a.v + offsets[t + kAhead], row_bytes);
      }
      const uint8_t* row = a.k + offsets[t];
      __m512 kf[kChunks];
      for (int d = 0; d < ND; ++d) dec(row + d * kGroupLanes * D::kBytes, masks[d], kf + 4 * d);
      for (int g = 0; g < GB; ++g) {
        __m512 acc = _mm512_mul_ps(kf[0], qr[g][0]);
        for (int c = 1; c < kChunks; ++c) acc = _mm512_fmadd_ps(kf[c], qr[g][c], acc);
        _mm512_storeu_ps(red + (g * 16 + i) * 16, acc);
      }
    }
    for (int g = 0; g < GB; ++g)
      _mm512_storeu_ps(scores + (g0 + g) * kPartitionTokens + t0, hsum16(red + g * 256));
  }
}

template <typename D, int ND>
OCTET_AVX512 void scores_pass(const D& dec, const PartialArgs& a, const int64_t* offsets,
                              int64_t n, const __mmask64* masks, float* red, float* scores) {
  constexpr int kMaxGB = ND == 1 ? 4 : ND == 2 ? 2 : 1;  // queries + row fit in 32 registers
  const int64_t G = a.num_q_heads;
  for (int64_t g0 = 0; g0 < G; g0 += kMaxGB) {
    const int64_t gb = std::min<int64_t>(kMaxGB, G - g0);
    if constexpr (kMaxGB == 4) {
      if (gb == 4) { scores_block<D, ND, 4>(dec, a, offsets, n, masks, g0, red, scores); continue; }
      if (gb == 3) { scores_block<D, ND, 3>(dec, a, offsets, n, masks, g0, red, scores); continue; }
    }
    if constexpr (kMaxGB >= 2)
      if (gb == 2) { scores_block<D, ND, 2>(dec, a, offsets, n, masks, g0, red, scores); continue; }
    scores_block<D, ND, 1>(dec, a, offsets, n, masks, g0, red, scores);
  }
}

// Four FP32 registers: 64 accumulators of one head. (Named members, not an array of arrays:
// GCC 12 keeps a [4][4] array of __m512 in memory and stores it back every iteration.)
struct Acc64 {
  __m512 c0, c1, c2, c3;
};

OCTET_AVX512 inline void fma64(Acc64& s, __m512 p, const __m512* f) {
  s.c0 = _mm512_fmadd_ps(p, f[0], s.c0);
  s.c1 = _mm512_fmadd_ps(p, f[1], s.c1);
  s.c2 = _mm512_fmadd_ps(p, f[2], s.c2);
  s.c3 = _mm512_fmadd_ps(p, f[3], s.c3);
}

OCTET_AVX512 inline void store64(const Acc64& s, float* out) {
  _mm512_storeu_ps(out, s.c0);
  _mm512_storeu_ps(out + 16, s.c1);
  _mm512_storeu_ps(out + 32, s.c2);
  _mm512_storeu_ps(out + 48, s.c3);
}

// acc[g][group d] = sum_t p[g][t] * v_t for GB heads (p, acc start at the first of them), over
// the 64-element group d: V is decoded once for the GB heads.
template <typename D, int GB>
OCTET_AVX512 void v_block(const D& dec, const PartialArgs& a, const int64_t* offsets, int64_t n,
                          int64_t d, __mmask64 mask, const float* p, int64_t hdp, float* acc) {
  const uint8_t* v = a.v + d * kGroupLanes * D::kBytes;
  constexpr int64_t kGroupBytes = kGroupLanes * D::kBytes;
  const __m512 z = _mm512_setzero_ps();
  Acc64 s0{z, z, z, z}, s1{z, z, z, z}, s2{z, z, z, z}, s3{z, z, z, z};
  for (int64_t t = 0; t < std::min(n, kAhead); ++t) prefetch_row(v + offsets[t], kGroupBytes);
  for (int64_t t = 0; t < n; ++t) {
    prefetch_row(v + offsets[t + kAhead], kGroupBytes);
    __m512 f[4];
    dec(v + offsets[t], mask, f);
    fma64(s0, _mm512_set1_ps(p[t]), f);
    if constexpr (GB > 1) fma64(s1, _mm512_set1_ps(p[kPartitionTokens + t]), f);
    if constexpr (GB > 2) fma64(s2, _mm512_set1_ps(p[2 * kPartitionTokens + t]), f);
    if constexpr (GB > 3) fma64(s3, _mm512_set1_ps(p[3 * kPartitionTokens + t]), f);
  }
  float* out = acc + d * kGroupLanes;
  store64(s0, out);
  if constexpr (GB > 1) store64(s1, out + hdp);
  if constexpr (GB > 2) store64(s2, out + 2 * hdp);
  if constexpr (GB > 3) store64(s3, out + 3 * hdp);
}

template <typename D, int ND>
OCTET_AVX512 void partial_impl(const D& dec, const PartialArgs& a, float* scratch, float* m,
                               float* l, float* acc) {
  const int64_t G = a.num_q_heads, hdp = ND * kGroupLanes;
  const int64_t n = a.end - a.begin;
  float* scores = scratch;                     // [G, kPartitionTokens]
  float* red = scratch + G * kPartitionTokens;  // [G, 16 tokens, 16 lanes]
  auto* offsets = reinterpret_cast<int64_t*>(scratch + G * (kPartitionTokens + 256));
  {  // byte offset of each position's row, block by block
    const int64_t bs = a.block_size, stride = a.slot_stride;
    const int32_t* table = a.block_table;
    int64_t t = 0;
    for (int64_t pos = a.begin; pos < a.end;) {
      const int64_t block_end = std::min(a.end, (pos / bs + 1) * bs);
      int64_t o = (table[pos / bs] * bs + pos % bs) * stride;
      for (; pos < block_end; ++pos, o += stride) offsets[t++] = o;
    }
  }
  for (int64_t t = n; t < n + kAhead; ++t) offsets[t] = offsets[n - 1];  // prefetched past the end
  __mmask64 masks[ND];
  for (int d = 0; d < ND; ++d) {
    const int64_t left = a.head_dim - d * kGroupLanes;
    masks[d] = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
  }

  scores_pass<D, ND>(dec, a, offsets, n, masks, red, scores);

  // Softmax numerators in place; m, l per head. Lanes past n never enter a sum.
  const __mmask16 tail = static_cast<__mmask16>((1u << (n % 16)) - 1);
  const int64_t n16 = n / 16 * 16;
  for (int64_t g = 0; g < G; ++g) {
    float* sg = scores + g * kPartitionTokens;
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t t = 0; t < n16; t += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(sg + t));
    if (tail) mx = _mm512_mask_max_ps(mx, tail, mx, _mm512_loadu_ps(sg + n16));
    const float mxs = _mm512_reduce_max_ps(mx);
    const __m512 mv = _mm512_set1_ps(mxs);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t t = 0; t < n16; t += 16) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(sg + t), mv));
      _mm512_storeu_ps(sg + t, e);
      sum = _mm512_add_ps(sum, e);
    }
    if (tail) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(sg + n16), mv));
      _mm512_storeu_ps(sg + n16, e);
      sum = _mm512_mask_add_ps(sum, tail, sum, e);
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    float s = 0.0f;
    for (float x : lanes) s += x;
    m[g] = mxs;
    l[g] = s;
  }

  for (int d = 0; d < ND; ++d)
    for (int64_t g0 = 0; g0 < G; g0 += 4) {
      const float* p = scores + g0 * kPartitionTokens;
      float* ag = acc + g0 * hdp;
      switch (std::min<int64_t>(4, G - g0)) {
        case 1: v_block<D, 1>(dec, a, offsets, n, d, masks[d], p, hdp, ag); break;
        case 2: v_block<D, 2>(dec, a, offsets, n, d, masks[d], p, hdp, ag); break;
        case 3: v_block<D, 3>(dec, a, offsets, n, d, masks[d], p, hdp, ag); break;
        default: v_block<D, 4>(dec, a, offsets, n, d, masks[d], p, hdp, ag); break;
      }
    }
}

template <typename D>
OCTET_AVX512 void partial_nd(const D& dec, const PartialArgs& a, float* scratch, float* m,
                             float* l, float* acc) {
  switch (padded_head_dim(a.head_dim) / kGroupLanes) {
    case 1: partial_impl<D, 1>(dec, a, scratch, m, l, acc); break;
    case 2: partial_impl<D, 2>(dec, a, scratch, m, l, acc); break;
    case 3: partial_impl<D, 3>(dec, a, scratch, m, l, acc); break;
    case 4: partial_impl<D, 4>(dec, a, scratch, m, l, acc); break;
    default: std::abort();  // avx512 partial is chosen only for head_dim <= 256
  }
}

OCTET_AVX512 void partial_avx512(const PartialArgs& a, float* scratch, float* m, float* l,
                                 float* acc) {
  static const Bf16Table e4m3(DType::FP8_E4M3), e5m2(DType::FP8_E5M2);
  switch (a.dtype) {
    case DType::F32: OCTET_CHECK(false, "F32 caches take the scalar kernel"); break;
    case DType::BF16: partial_nd(DecodeBf16{}, a, scratch, m, l, acc); break;
    case DType::F16: partial_nd(DecodeFp16{}, a, scratch, m, l, acc); break;
    case DType::FP8_E4M3: partial_nd(DecodeFp8(e4m3), a, scratch, m, l, acc); break;
    case DType::FP8_E5M2: partial_nd(DecodeFp8(e5m2), a, scratch, m, l, acc); break;
  }
}

}  // namespace

bool avx512_kernel_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("fma") &&
                         avx2_kernel_available();  // F16C
  return ok;
}
Kernel avx512_kernel() { return {partial_avx512, lane_order_avx512, 4 * kGroupLanes, "avx512"}; }

#else

bool avx512_kernel_available() { return false; }
Kernel avx512_kernel() { return scalar_kernel(); }

#endif

}  // namespace octet::paged_detail

// FP8 array conversions with AVX2: 8 fp32 lanes of integer bit manipulation per __m256i.
// Same algorithm as the scalar fp8_detail::encode_bits (fp8.h), lane by lane, so results match
// it exactly; nothing depends on MXCSR (rounding mode, FTZ, DAZ).
// Built with function-level target attributes, so the library itself needs no -mavx2 and runs
// on any x86-64; fp8.cpp only calls in here after fp8_avx2_available() said yes.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/fp8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OCTET_FP8_AVX2_BUILT 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define OCTET_FP8_AVX2_BUILT 0
#endif

namespace octet {

namespace {

[[noreturn]] void die_without_avx2(const char* function) {
  std::fprintf(stderr, "octet: %s needs AVX2+FMA+F16C on x86-64, which this build/CPU lacks\n",
               function);
  std::abort();
}

#if OCTET_FP8_AVX2_BUILT
#define OCTET_AVX2 __attribute__((target("avx2,fma,f16c")))

using fp8_detail::E4M3Traits;
using fp8_detail::E5M2Traits;
using fp8_detail::kE4M3MaxBits;
using fp8_detail::kE5M2MaxBits;

// u: 8 fp32 bit patterns -> 8 fp8 codes, one per int32 lane (0..255).
template <typename Traits, uint32_t kMaxBits>
OCTET_AVX2 inline __m256i encode8(__m256i u) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
  a = _mm256_min_epi32(a, _mm256_set1_epi32(static_cast<int>(kMaxBits)));  // saturate, inf too

  // Normal fp8: round away kShift mantissa bits (ties to even), then rebias the exponent.
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, Traits::kShift), one);
  __m256i normal = _mm256_add_epi32(a, _mm256_set1_epi32((1 << (Traits::kShift - 1)) - 1));
  normal = _mm256_srli_epi32(_mm256_add_epi32(normal, lsb), Traits::kShift);
  normal = _mm256_sub_epi32(
      normal, _mm256_set1_epi32(static_cast<int>(Traits::kRebias << (23 - Traits::kShift))));

  // Subnormal fp8: m >> shift in whole units, shift = base - e clamped to 25 (unsigned min, so
  // the lanes that are normal get 25 too instead of a negative count).
  const __m256i shift = _mm256_min_epu32(
      _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(Traits::kSubnormalShiftBase)),
                       _mm256_srli_epi32(a, 23)),
      _mm256_set1_epi32(25));
  const __m256i m = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0x7FFFFF)),
                                    _mm256_set1_epi32(0x800000));
  const __m256i half_minus_one =
      _mm256_sub_epi32(_mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one)), one);
  const __m256i sub_lsb = _mm256_and_si256(_mm256_srlv_epi32(m, shift), one);
  const __m256i subnormal =
      _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(m, half_minus_one), sub_lsb), shift);

  const __m256i is_normal =
      _mm256_cmpgt_epi32(a, _mm256_set1_epi32(static_cast<int>(Traits::kMinNormalBits - 1)));
  const __m256i magnitude = _mm256_blendv_epi8(subnormal, normal, is_normal);
  return _mm256_blendv_epi8(_mm256_or_si256(magnitude, sign), _mm256_set1_epi32(0x7F), is_nan);
}

// codes: 8 fp8 codes, one per int32 lane -> 8 fp32 values (exact).
template <typename Traits, bool kIsE5M2>
OCTET_AVX2 inline __m256 decode8(__m256i codes) {
  constexpr int kMantissaBits = 23 - Traits::kShift;
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(codes, _mm256_set1_epi32(0x80)), 24);
  const __m256i a = _mm256_and_si256(codes, _mm256_set1_epi32(0x7F));
  const __m256i normal =
      _mm256_add_epi32(_mm256_slli_epi32(a, Traits::kShift),
                       _mm256_set1_epi32(static_cast<int>(Traits::kRebias << 23)));
  // Subnormal: mantissa * 2^unit_exponent; the product is a normal fp32, so no FTZ/DAZ effect.
  const __m256i mantissa = _mm256_and_si256(a, _mm256_set1_epi32((1 << kMantissaBits) - 1));
  constexpr float kUnit = static_cast<float>(1.0 / (1ull << -Traits::kSubnormalUnitExponent));
  const __m256i subnormal =
      _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mantissa), _mm256_set1_ps(kUnit)));
  const __m256i is_subnormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(1 << kMantissaBits), a);
  __m256i bits = _mm256_or_si256(_mm256_blendv_epi8(normal, subnormal, is_subnormal), sign);
  const __m256i nan = _mm256_set1_epi32(static_cast<int>(kFp8CanonicalNanBits));
  if constexpr (kIsE5M2) {
    const __m256i is_inf = _mm256_cmpeq_epi32(a, _mm256_set1_epi32(0x7C));
    bits = _mm256_blendv_epi8(bits, _mm256_or_si256(sign, _mm256_set1_epi32(0x7F800000)), is_inf);
    bits = _mm256_blendv_epi8(bits, nan, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7C)));
  } else {
    bits = _mm256_blendv_epi8(bits, nan, _mm256_cmpeq_epi32(a, _mm256_set1_epi32(0x7F)));
  }
  return _mm256_castsi256_ps(bits);
}

// Loaders: 8 source elements -> 8 exact fp32 bit patterns.
struct LoadF32 {
  using Src = float;
  OCTET_AVX2 static __m256i load(const float* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
};
struct LoadBf16 {
  using Src = uint16_t;
  OCTET_AVX2 static __m256i load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
  }
};
struct LoadFp16 {
  using Src = uint16_t;
  // VCVTPH2PS is exact for every fp16 (subnormals become normal fp32; NaN stays NaN).
  OCTET_AVX2 static __m256i load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castps_si256(_mm256_cvtph_ps(h));
  }
};

// 8 codes in int32 lanes (0..255) -> 8 bytes at dst.
OCTET_AVX2 inline void store8(uint8_t* dst, __m256i codes) {
  __m256i packed = _mm256_packs_epi32(codes, codes);  // per 128-bit half: c0..3 twice, int16
  packed = _mm256_packus_epi16(packed, packed);       // dword 0 = c0..3, dword 4 = c4..7
  const __m128i both =
      _mm_unpacklo_epi32(_mm256_castsi256_si128(packed), _mm256_extracti128_si256(packed, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), both);
}

template <typename Traits, uint32_t kMaxBits, typename Loader>
OCTET_AVX2 void encode_array(const typename Loader::Src* src, uint8_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i c0 = encode8<Traits, kMaxBits>(Loader::load(src + i));
    const __m256i c1 = encode8<Traits, kMaxBits>(Loader::load(src + i + 8));
    const __m256i c2 = encode8<Traits, kMaxBits>(Loader::load(src + i + 16));
    const __m256i c3 = encode8<Traits, kMaxBits>(Loader::load(src + i + 24));
    // packs: [c0 0-3, c1 0-3 | c0 4-7, c1 4-7]; packus interleaves 128-bit halves of p01, p23.
    const __m256i p01 = _mm256_packs_epi32(c0, c1);
    const __m256i p23 = _mm256_packs_epi32(c2, c3);
    const __m256i bytes = _mm256_packus_epi16(p01, p23);  // dwords: c0a c1a c2a c3a c0b c1b ...
    const __m256i ordered =
        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), ordered);
  }
  for (; i + 8 <= n; i += 8) store8(dst + i, encode8<Traits, kMaxBits>(Loader::load(src + i)));
  if (i < n) {  // tail of 1..7 through the same vector code, via zero-padded copies
    typename Loader::Src in[8] = {};
    uint8_t out[8];
    std::memcpy(in, src + i, (n - i) * sizeof(in[0]));
    store8(out, encode8<Traits, kMaxBits>(Loader::load(in)));
    std::memcpy(dst + i, out, n - i);
  }
}

template <typename Traits, bool kIsE5M2>
OCTET_AVX2 void decode_array(const uint8_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m128i lo = _mm256_castsi256_si128(bytes);
    const __m128i hi = _mm256_extracti128_si256(bytes, 1);
    _mm256_storeu_ps(dst + i, decode8<Traits, kIsE5M2>(_mm256_cvtepu8_epi32(lo)));
    _mm256_storeu_ps(dst + i + 8,
                     decode8<Traits, kIsE5M2>(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))));
    _mm256_storeu_ps(dst + i + 16, decode8<Traits, kIsE5M2>(_mm256_cvtepu8_epi32(hi)));
    _mm256_storeu_ps(dst + i + 24,
                     decode8<Traits, kIsE5M2>(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))));
  }
  for (; i + 8 <= n; i += 8) {
    const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, decode8<Traits, kIsE5M2>(_mm256_cvtepu8_epi32(codes)));
  }
  if (i < n) {
    uint8_t in[8] = {};
    float out[8];
    std::memcpy(in, src + i, n - i);
    const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in));
    _mm256_storeu_ps(out, decode8<Traits, kIsE5M2>(_mm256_cvtepu8_epi32(codes)));
    std::memcpy(dst + i, out, (n - i) * sizeof(float));
  }
}

template <typename Loader>
void encode_dispatch(DType format, const typename Loader::Src* src, uint8_t* dst, size_t n,
                     const char* function) {
  if (!fp8_avx2_available()) die_without_avx2(function);
  if (format == DType::FP8_E4M3) {
    encode_array<E4M3Traits, kE4M3MaxBits, Loader>(src, dst, n);
  } else {
    encode_array<E5M2Traits, kE5M2MaxBits, Loader>(src, dst, n);
  }
}
#endif  // OCTET_FP8_AVX2_BUILT

}  // namespace

bool fp8_avx2_available() {
#if OCTET_FP8_AVX2_BUILT
  static const bool available = [] {
    __builtin_cpu_init();
    // "avx2" also checks that the OS saves YMM state. F16C is read from CPUID leaf 1 (ECX bit
    // 29) because older clang's __builtin_cpu_supports does not know "f16c".
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }();
  return available;
#else
  return false;
#endif
}

#if OCTET_FP8_AVX2_BUILT

void fp8_encode_avx2(DType format, const float* src, uint8_t* dst, size_t n) {
  encode_dispatch<LoadF32>(format, src, dst, n, __func__);
}

void fp8_encode_bf16_avx2(DType format, const uint16_t* src, uint8_t* dst, size_t n) {
  encode_dispatch<LoadBf16>(format, src, dst, n, __func__);
}

void fp8_encode_fp16_avx2(DType format, const uint16_t* src, uint8_t* dst, size_t n) {
  encode_dispatch<LoadFp16>(format, src, dst, n, __func__);
}

void fp8_decode_avx2(DType format, const uint8_t* src, float* dst, size_t n) {
  if (!fp8_avx2_available()) die_without_avx2(__func__);
  if (format == DType::FP8_E4M3) {
    decode_array<E4M3Traits, false>(src, dst, n);
  } else {
    decode_array<E5M2Traits, true>(src, dst, n);
  }
}

#else  // not x86-64: the explicit AVX2 entry points exist but refuse to run

void fp8_encode_avx2(DType, const float*, uint8_t*, size_t) { die_without_avx2(__func__); }
void fp8_encode_bf16_avx2(DType, const uint16_t*, uint8_t*, size_t) {
  die_without_avx2(__func__);
}
void fp8_encode_fp16_avx2(DType, const uint16_t*, uint8_t*, size_t) {
  die_without_avx2(__func__);
}
void fp8_decode_avx2(DType, const uint8_t*, float*, size_t) { die_without_avx2(__func__); }

#endif  // OCTET_FP8_AVX2_BUILT

}  // namespace octet

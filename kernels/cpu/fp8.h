// FP8 number formats (OCP E4M3 "e4m3fn" and E5M2): encode from fp32/bf16/fp16, decode to fp32.
//
// Encoding follows cuda_fp8.h with __NV_SATFINITE bit for bit (the tests check the header's
// host conversion on every build machine):
//   - round to nearest, ties to even;
//   - finite values beyond the largest finite code, and +-inf, saturate to +-max
//     (E4M3: 448 = 0x7E/0xFE; E5M2: 57344 = 0x7B/0xFB);
//   - every NaN (either sign, any payload) becomes 0x7F, the positive NaN code of both formats;
//   - -0 keeps its sign (0x80), and so do negative values that round to zero.
// Decoding is exact. NaN codes decode to the canonical fp32 NaN 0x7FFFFFFF (the sign is dropped,
// as __nv_cvt_fp8_to_halfraw does); E5M2 0x7C/0xFC decode to +-inf.
// All of it is done in integer arithmetic: independent of rounding mode and FTZ/DAZ.
//
// Formats (source: OCP 8-bit Floating Point Specification (OFP8) rev 1.0):
//   E4M3: bias 7, no inf, NaN = S.1111.111, max normal 448, min normal 2^-6, min subnormal 2^-9.
//   E5M2: bias 15, inf = S.11111.00, NaN = S.11111.{01,10,11}, max normal 57344, min normal
//         2^-14, min subnormal 2^-16.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/cpu/half.h"

namespace octet {

namespace fp8_detail {

// Parameters of one format, everything derived from (mantissa bits, bias).
template <int kMantissaBits, int kBias>
struct Fp8Traits {
  static constexpr int kShift = 23 - kMantissaBits;  // fp32 mantissa bits dropped
  static constexpr uint32_t kRebias = static_cast<uint32_t>(127 - kBias);
  static constexpr uint32_t kMinNormalBits = (kRebias + 1) << 23;  // fp32 bits of 2^(1-bias)
  // Subnormal fp8 = m * 2^(1 - bias - mantissa_bits); an fp32 m * 2^(e - 150) holds
  // m >> (kSubnormalShiftBase - e) such units.
  static constexpr uint32_t kSubnormalShiftBase =
      static_cast<uint32_t>(151 - kBias - kMantissaBits);
  static constexpr int kSubnormalUnitExponent = 1 - kBias - kMantissaBits;  // -9 or -16
};
using E4M3Traits = Fp8Traits<3, 7>;
using E5M2Traits = Fp8Traits<2, 15>;
inline constexpr uint32_t kE4M3MaxBits = 0x43E00000u;  // fp32 bits of 448
inline constexpr uint32_t kE5M2MaxBits = 0x47600000u;  // fp32 bits of 57344

// fp32 bits -> fp8 code, saturating, round to nearest even (see the file comment).
template <typename Traits, uint32_t kMaxBits>
constexpr uint8_t encode_bits(uint32_t u) {
  const uint32_t sign = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;  // NaN
  if (a > kMaxBits) a = kMaxBits;    // saturate; everything in (max, inf] ends on max
  if (a >= Traits::kMinNormalBits) {
    a += (1u << (Traits::kShift - 1)) - 1u + ((a >> Traits::kShift) & 1u);
    return static_cast<uint8_t>(
        sign | ((a >> Traits::kShift) - (Traits::kRebias << (23 - Traits::kShift))));
  }
  // fp8 subnormal (or zero): round m * 2^(e-150) to a whole number of subnormal units.
  uint32_t shift = Traits::kSubnormalShiftBase - (a >> 23);
  if (shift > 25) shift = 25;  // m < 2^24, so 25 already rounds to 0; also covers fp32 subnormals
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t units = (m + (1u << (shift - 1)) - 1u + ((m >> shift) & 1u)) >> shift;
  return static_cast<uint8_t>(sign | units);  // units == 2^mantissa_bits is the min normal code
}

template <typename Traits>
constexpr uint32_t decode_finite_magnitude_bits(uint32_t magnitude_code) {
  constexpr int kMantissaBits = 23 - Traits::kShift;
  const uint32_t mantissa = magnitude_code & ((1u << kMantissaBits) - 1u);
  if ((magnitude_code >> kMantissaBits) == 0) {  // subnormal: mantissa units, exact
    constexpr float kUnit = static_cast<float>(1.0 / (1ull << -Traits::kSubnormalUnitExponent));
    return std::bit_cast<uint32_t>(static_cast<float>(mantissa) * kUnit);
  }
  return (magnitude_code << Traits::kShift) + (Traits::kRebias << 23);
}

}  // namespace fp8_detail

inline constexpr uint32_t kFp8CanonicalNanBits = 0x7FFFFFFFu;  // what NaN codes decode to

/// fp32 -> E4M3 code (saturating, RNE; NaN -> 0x7F). Equals __nv_cvt_float_to_fp8(x,
/// __NV_SATFINITE, __NV_E4M3).
constexpr uint8_t fp8_e4m3_from_float(float x) {
  return fp8_detail::encode_bits<fp8_detail::E4M3Traits, fp8_detail::kE4M3MaxBits>(
      std::bit_cast<uint32_t>(x));
}
/// fp32 -> E5M2 code (saturating, RNE; NaN -> 0x7F, +-inf -> +-57344). Equals
/// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2).
constexpr uint8_t fp8_e5m2_from_float(float x) {
  return fp8_detail::encode_bits<fp8_detail::E5M2Traits, fp8_detail::kE5M2MaxBits>(
      std::bit_cast<uint32_t>(x));
}

/// bf16 bits -> E4M3 code. bf16 widens to fp32 exactly, so this is fp8_e4m3_from_float of the
/// same value; equals __nv_cvt_bfloat16raw_to_fp8(.., __NV_SATFINITE, __NV_E4M3).
constexpr uint8_t fp8_e4m3_from_bf16(uint16_t bits) {
  return fp8_detail::encode_bits<fp8_detail::E4M3Traits, fp8_detail::kE4M3MaxBits>(
      static_cast<uint32_t>(bits) << 16);
}
/// bf16 bits -> E5M2 code; equals __nv_cvt_bfloat16raw_to_fp8(.., __NV_SATFINITE, __NV_E5M2).
constexpr uint8_t fp8_e5m2_from_bf16(uint16_t bits) {
  return fp8_detail::encode_bits<fp8_detail::E5M2Traits, fp8_detail::kE5M2MaxBits>(
      static_cast<uint32_t>(bits) << 16);
}

/// fp16 bits -> E4M3 code. fp16 widens to fp32 exactly; equals
/// __nv_cvt_halfraw_to_fp8(.., __NV_SATFINITE, __NV_E4M3).
inline uint8_t fp8_e4m3_from_fp16(uint16_t bits) {
  return fp8_e4m3_from_float(fp16_to_float(bits));
}
/// fp16 bits -> E5M2 code; equals __nv_cvt_halfraw_to_fp8(.., __NV_SATFINITE, __NV_E5M2).
inline uint8_t fp8_e5m2_from_fp16(uint16_t bits) {
  return fp8_e5m2_from_float(fp16_to_float(bits));
}

/// E4M3 code -> fp32, exact. 0x7F/0xFF (NaN) -> 0x7FFFFFFF.
constexpr float fp8_e4m3_to_float(uint8_t code) {
  const uint32_t magnitude = code & 0x7Fu;
  if (magnitude == 0x7F) return std::bit_cast<float>(kFp8CanonicalNanBits);
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  return std::bit_cast<float>(
      sign | fp8_detail::decode_finite_magnitude_bits<fp8_detail::E4M3Traits>(magnitude));
}
/// E5M2 code -> fp32, exact. 0x7C/0xFC -> +-inf; 0x7D..0x7F, 0xFD..0xFF (NaN) -> 0x7FFFFFFF.
constexpr float fp8_e5m2_to_float(uint8_t code) {
  const uint32_t magnitude = code & 0x7Fu;
  if (magnitude > 0x7C) return std::bit_cast<float>(kFp8CanonicalNanBits);
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  if (magnitude == 0x7C) return std::bit_cast<float>(sign | 0x7F800000u);
  return std::bit_cast<float>(
      sign | fp8_detail::decode_finite_magnitude_bits<fp8_detail::E5M2Traits>(magnitude));
}

/// Format chosen at run time; same results as the functions above.
constexpr uint8_t fp8_from_float(DType format, float x) {
  return format == DType::FP8_E4M3 ? fp8_e4m3_from_float(x) : fp8_e5m2_from_float(x);
}
constexpr float fp8_to_float(DType format, uint8_t code) {
  return format == DType::FP8_E4M3 ? fp8_e4m3_to_float(code) : fp8_e5m2_to_float(code);
}

// --- Arrays ---------------------------------------------------------------------------------
// src: [n], dst: [n]; any alignment; src and dst must not overlap. Results equal the scalar
// functions element by element. These pick the AVX2 path at run time when the CPU has
// AVX2+FMA+F16C (x86-64 only), else the portable scalar loop.

/// fp32 [n] -> fp8 codes [n].
void fp8_encode(DType format, const float* src, uint8_t* dst, size_t n);
/// bf16 bits [n] -> fp8 codes [n].
void fp8_encode_bf16(DType format, const uint16_t* src, uint8_t* dst, size_t n);
/// fp16 bits [n] -> fp8 codes [n].
void fp8_encode_fp16(DType format, const uint16_t* src, uint8_t* dst, size_t n);
/// fp8 codes [n] -> fp32 [n].
void fp8_decode(DType format, const uint8_t* src, float* dst, size_t n);

// Explicit paths, for tests and benchmarks. The _avx2 ones abort with a message when
// fp8_avx2_available() is false (no AVX2/FMA/F16C, or not an x86-64 build).
/// True when this build has the AVX2 code and this CPU can run it.
bool fp8_avx2_available();
void fp8_encode_scalar(DType format, const float* src, uint8_t* dst, size_t n);
void fp8_encode_bf16_scalar(DType format, const uint16_t* src, uint8_t* dst, size_t n);
void fp8_encode_fp16_scalar(DType format, const uint16_t* src, uint8_t* dst, size_t n);
void fp8_decode_scalar(DType format, const uint8_t* src, float* dst, size_t n);
void fp8_encode_avx2(DType format, const float* src, uint8_t* dst, size_t n);
void fp8_encode_bf16_avx2(DType format, const uint16_t* src, uint8_t* dst, size_t n);
void fp8_encode_fp16_avx2(DType format, const uint16_t* src, uint8_t* dst, size_t n);
void fp8_decode_avx2(DType format, const uint8_t* src, float* dst, size_t n);

}  // namespace octet

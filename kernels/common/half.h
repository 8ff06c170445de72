// 16-bit floats as raw bits: bf16 (1.8.7) and IEEE fp16 (1.5.10) to and from fp32.
// Scalar, header-only, no CUDA. Rounding is round-to-nearest-even, done in integers, so the
// result does not depend on the MXCSR rounding mode or on FTZ/DAZ.
// NaN from fp32 becomes the canonical 0x7FFF, as cuda_bf16.h / cuda_fp16.h do on the host.
#pragma once

#include <bit>
#include <cstdint>

namespace octet {

/// bf16 bits -> fp32, exact (bf16 is the top half of an fp32; a NaN keeps its sign and payload).
inline float bf16_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

/// fp32 -> bf16 bits, round to nearest even. Finite values past the bf16 range round to +-inf
/// (IEEE, no saturation); NaN -> 0x7FFF. Matches __float2bfloat16_rn bit for bit.
inline uint16_t float_to_bf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  u += 0x7FFFu + ((u >> 16) & 1u);  // carries into the exponent when rounding up, as it should
  return static_cast<uint16_t>(u >> 16);
}

/// fp16 bits -> fp32, exact (subnormals included). A NaN keeps its sign and payload and is
/// made quiet, as the F16C instruction VCVTPH2PS does.
inline float fp16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) {  // inf or NaN
    const uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
    return std::bit_cast<float>(sign | 0x7F800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, a normal fp32 (or zero)
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13));
}

/// fp32 -> fp16 bits, round to nearest even, subnormals included. |x| >= 65520 rounds to +-inf
/// (IEEE, no saturation); NaN -> 0x7FFF. Matches __float2half_rn bit for bit.
inline uint16_t float_to_fp16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFF;
  if (a >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 2^16, or inf
  if (a >= 0x38800000u) {  // fp16 normal range, [2^-14, 2^16): drop 13 mantissa bits
    a += 0x0FFFu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((a - ((127u - 15u) << 23)) >> 13));
  }
  // Subnormal: count units of 2^-24. value = m * 2^(e-150), so units = m >> (126 - e).
  const uint32_t e = a >> 23;
  if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  const uint32_t shift = 126 - e;                   // 14..24
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t units = (m + (1u << (shift - 1)) - 1u + ((m >> shift) & 1u)) >> shift;
  return static_cast<uint16_t>(sign | units);  // units == 0x400 is the smallest normal: correct
}

}  // namespace octet

// The scalar math of the CUDA kernels as __host__ __device__ functions, so that the host tests
// (tests/kernels/test_cuda_device_math.cpp, host compiler, no GPU) run exactly the code the
// kernels run: FP8 / BF16 / FP16 conversions, vLLM's activation-scale rules, the W8A8 epilogue,
// the online-softmax update and the split-KV merge.
// Plain C++17 with no CUDA include: under nvcc OCTET_HD is __host__ __device__, elsewhere empty.
// Roundings are explicit (mul_rn, add_rn, div_rn: __fmul_rn etc. on the device, which nvcc never
// contracts into FMAs; plain IEEE operations on the host), so host and device give the same bits
// wherever the operations themselves are correctly rounded; expf is the one exception (device
// expf: <= 2 ulp; the host's libm: its own <= 1 ulp), which the tests bound.
// Numerics: DESIGN.md "Numerics conventions"; FP8 formats: OCP OFP8 rev 1.0.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "kernels/common/rounded_math.h"

namespace octet::cuda_math {

// ---- Bits and correctly rounded operations (kernels/common/rounded_math.h) --------------------

using rounded::add_rn;
using rounded::bits_float;
using rounded::div_rn;
using rounded::float_bits;
using rounded::mul_rn;

OCTET_HD inline float max_ignore_nan(float a, float b) { return fmaxf(a, b); }

// ---- FP8 (OCP E4M3 "e4m3fn", E5M2) ----------------------------------------------------------
// Encoding as cuda_fp8.h with __NV_SATFINITE: round to nearest even; finite values beyond the
// largest code and +-inf saturate to +-max; every NaN -> 0x7F; -0 and negative values that round
// to zero keep the sign bit. Integer arithmetic only (independent of FTZ and rounding modes).

/// fp32 bits -> code of a format with kMan mantissa bits, exponent bias kBias, largest finite
/// value whose fp32 bits are kMaxBits.
template <int kMan, int kBias, uint32_t kMaxBits>
OCTET_HD inline uint8_t fp8_encode_bits(uint32_t u) {
  const uint32_t sign = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;  // NaN
  if (a > kMaxBits) a = kMaxBits;    // saturate (inf included)
  constexpr int kDrop = 23 - kMan;   // fp32 mantissa bits dropped
  constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 - kBias + 1) << 23;
  if (a >= kMinNormalBits) {  // normal: round the dropped bits, ties to even, then rebias
    a += (1u << (kDrop - 1)) - 1u + ((a >> kDrop) & 1u);
    const uint32_t rebias = static_cast<uint32_t>(127 - kBias) << kMan;
    return static_cast<uint8_t>(sign | ((a >> kDrop) - rebias));
  }
  // Subnormal or zero: value = mant24 * 2^(e - 150); units of 2^(1 - kBias - kMan).
  const uint32_t e = a >> 23;
  uint32_t shift = static_cast<uint32_t>(151 - kBias - kMan) - e;
  if (shift > 25) shift = 25;  // rounds to zero (covers fp32 subnormals too)
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t units = (m + (1u << (shift - 1)) - 1u + ((m >> shift) & 1u)) >> shift;
  return static_cast<uint8_t>(sign | units);  // units == 2^kMan is the smallest normal code
}

/// fp32 -> E4M3 code: __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3).
OCTET_HD inline uint8_t e4m3_from_float(float x) {
  return fp8_encode_bits<3, 7, 0x43E00000u>(float_bits(x));  // max 448
}
/// fp32 -> E5M2 code: __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2).
OCTET_HD inline uint8_t e5m2_from_float(float x) {
  return fp8_encode_bits<2, 15, 0x47600000u>(float_bits(x));  // max 57344
}

/// Exact value of a finite code's magnitude (sign dropped) of a format.
template <int kMan, int kBias>
OCTET_HD inline float fp8_decode_magnitude(uint32_t mag) {
  const uint32_t mant = mag & ((1u << kMan) - 1u);
  if ((mag >> kMan) == 0) {  // subnormal: mant * 2^(1 - kBias - kMan), an exact product
    constexpr float kUnit = kBias == 7 ? 0x1p-9f : 0x1p-16f;
    return static_cast<float>(mant) * kUnit;
  }
  return bits_float((mag << (23 - kMan)) + (static_cast<uint32_t>(127 - kBias) << 23));
}

/// E4M3 code -> fp32, exact; NaN codes (0x7F, 0xFF) -> 0x7FFFFFFF, as cuda_fp8.h's fp8 -> half
/// -> float.
OCTET_HD inline float e4m3_to_float(uint8_t code) {
  const uint32_t mag = code & 0x7Fu;
  if (mag == 0x7Fu) return bits_float(0x7FFFFFFFu);
  const float v = fp8_decode_magnitude<3, 7>(mag);
  return (code & 0x80u) ? -v : v;
}
/// E5M2 code -> fp32, exact; 0x7C/0xFC -> +-inf, NaN codes -> 0x7FFFFFFF.
OCTET_HD inline float e5m2_to_float(uint8_t code) {
  const uint32_t mag = code & 0x7Fu;
  if (mag > 0x7Cu) return bits_float(0x7FFFFFFFu);
  const float v = mag == 0x7Cu ? bits_float(0x7F800000u) : fp8_decode_magnitude<2, 15>(mag);
  return (code & 0x80u) ? -v : v;
}

// ---- 16-bit floats -------------------------------------------------------------------------

/// fp32 -> bf16 bits, RNE, overflow to +-inf, NaN -> 0x7FFF (__float2bfloat16_rn on the host).
OCTET_HD inline uint16_t bf16_from_float(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
OCTET_HD inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

/// fp32 -> fp16 bits, RNE with subnormals, |x| >= 65520 -> +-inf, NaN -> 0x7FFF
/// (__float2half_rn on the host).
OCTET_HD inline uint16_t fp16_from_float(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFF;
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (a >= 0x38800000u) {  // normal fp16: drop 13 bits
    a += 0x0FFFu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((a - (112u << 23)) >> 13));
  }
  const uint32_t e = a >> 23;
  if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25: zero
  const uint32_t shift = 126 - e;
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t units = (m + (1u << (shift - 1)) - 1u + ((m >> shift) & 1u)) >> shift;
  return static_cast<uint16_t>(sign | units);
}
/// fp16 bits -> fp32, exact (NaN payloads kept, made quiet).
OCTET_HD inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1Fu)
    return bits_float(sign | 0x7F800000u | (mantissa ? 0x00400000u : 0u) | (mantissa << 13));
  if (exponent == 0) {
    const float mag = static_cast<float>(mantissa) * 0x1p-24f;
    return bits_float(sign | float_bits(mag));
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// ---- Activation quantization (vLLM's rules, kernels/cpu/w8a8.h) ------------------------------

/// The smallest dynamic per-token scale: 1 / (448 * 512).
inline constexpr float kMinActivationScale = 1.0f / (448.0f * 512.0f);

/// Dynamic per-token scale from a row's amax: max(amax / 448, 1 / (448 * 512)).
OCTET_HD inline float dynamic_scale(float amax) {
  return fmaxf(div_rn(amax, 448.0f), kMinActivationScale);
}
/// Dynamic code: e4m3(x / scale), true division.
OCTET_HD inline uint8_t quantize_dynamic(float x, float scale) {
  return e4m3_from_float(div_rn(x, scale));
}
/// Static code: e4m3(x * inv_scale), inv_scale = 1 / scale computed once in FP32.
OCTET_HD inline uint8_t quantize_static(float x, float inv_scale) {
  return e4m3_from_float(mul_rn(x, inv_scale));
}

// ---- W8A8 epilogue (backend.h linear_w8a8 / linear_w8a8_combine) ----------------------------

/// y = acc * (a_scale * w_scale) (+ bias when has_bias): the scale product first, then the
/// scaling, then the bias, each rounded once (no FMA), the CPU's order. Without a bias nothing is
/// added (a -0 stays -0).
OCTET_HD inline float w8a8_epilogue(float acc, float a_scale, float w_scale, bool has_bias,
                                    float bias) {
  const float y = mul_rn(acc, mul_rn(a_scale, w_scale));
  return has_bias ? add_rn(y, bias) : y;
}

// ---- Online softmax (Milakov & Gimelshein 2018) and the split-KV merge -----------------------
// State of a partial softmax over some scores s_t: m = max s_t, l = sum exp(s_t - m), and the
// caller's acc = sum exp(s_t - m) * v_t. The empty state is m = -inf, l = 0, acc = 0. A masked
// score is -inf and contributes nothing (exactly: rescale 1, weight 0).

/// Factor that moves a sum taken relative to max m_old onto max m_new (>= m_old): exp(m_old -
/// m_new); 1 when they are equal (both -inf included), 0 when m_old is -inf.
OCTET_HD inline float softmax_rescale(float m_old, float m_new) {
  return m_old == m_new ? 1.0f : expf(m_old - m_new);
}
/// Weight of score s under max m (>= s): exp(s - m), 0 for a masked score (s == -inf).
OCTET_HD inline float softmax_weight(float s, float m) {
  return s == -INFINITY ? 0.0f : expf(s - m);
}

/// Online update by one score s: the caller then sets acc = acc * alpha + p * v.
struct SoftmaxStep {
  float alpha;  // rescale of the old acc
  float p;      // weight of the new value
};
OCTET_HD inline SoftmaxStep online_softmax_update(float& m, float& l, float s) {
  const float m_new = fmaxf(m, s);  // fmaxf(-inf, -inf) = -inf
  SoftmaxStep step{softmax_rescale(m, m_new), softmax_weight(s, m_new)};
  l = add_rn(mul_rn(l, step.alpha), step.p);
  m = m_new;
  return step;
}

/// Merges partial state (m_i, l_i) into (m, l): the caller then sets acc = acc * a + acc_i * b.
/// Folding the partitions of a context in order gives the same bits whatever the batch.
struct MergeFactors {
  float a;  // for the running acc
  float b;  // for the partition's acc
};
OCTET_HD inline MergeFactors softmax_merge(float& m, float& l, float m_i, float l_i) {
  const float m_new = fmaxf(m, m_i);
  MergeFactors f{softmax_rescale(m, m_new), softmax_rescale(m_i, m_new)};
  l = add_rn(mul_rn(l, f.a), mul_rn(l_i, f.b));
  m = m_new;
  return f;
}

/// Final output of a softmax-weighted sum: acc / l * v_scale (l > 0 whenever one position was
/// visible, which causal attention guarantees).
OCTET_HD inline float softmax_output(float acc, float l, float v_scale) {
  return mul_rn(div_rn(acc, l), v_scale);
}

}  // namespace octet::cuda_math

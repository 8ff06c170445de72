// Offline / load-time FP8 weight quantization (compressed-tensors' rule, quoted in full in
// kernels/cpu/w8a8.h) and the activation scale floor: host code that loaders call before
// uploading weights to a backend. Defined in kernels/cpu/w8a8_quantize.cpp.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"

namespace octet {

/// Smallest dynamic activation scale vLLM produces: 1 / (448 * 512) in FP32
/// (min_scaling_factor<Float8_e4m3fn>). An all-zero token gets this scale and zero codes.
inline constexpr float kActivationScaleMin = 1.0f / (448.0f * 512.0f);

/// The weight scale compressed-tensors gives an all-zero row or tensor (whose codes are all 0):
/// torch.finfo(dtype).eps, 2^-23 (FP32), 2^-7 (BF16), 2^-10 (FP16).
/// `arithmetic` is the weight's dtype: F32, BF16 or F16.
constexpr float zero_weight_scale(DType arithmetic) {
  return arithmetic == DType::BF16 ? 0x1p-7f : arithmetic == DType::F16 ? 0x1p-10f : 0x1p-23f;
}

/// Quantizes a weight w: [n, k] FP32 to E4M3 with the compressed-tensors rule (quoted in
/// kernels/cpu/w8a8.h), FP32 arithmetic. q: [n, k]; scale: [n] (PerRow) or [1] (PerTensor).
/// Multithreaded over rows.
void quantize_weight_e4m3(const float* w, int64_t n, int64_t k, ScaleGranularity granularity,
                          uint8_t* q, float* scale);

/// Same rule with the arithmetic of a 16-bit weight: w must hold values exactly representable in
/// `arithmetic` (e.g. a BF16 checkpoint widened to FP32); the scale (returned widened to FP32)
/// and each w / s are rounded to that dtype (RNE) as torch does. F32 = quantize_weight_e4m3.
void quantize_weight_e4m3_as(const float* w, int64_t n, int64_t k, ScaleGranularity granularity,
                             DType arithmetic, uint8_t* q, float* scale);

}  // namespace octet

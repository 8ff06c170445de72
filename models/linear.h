#pragma once
// A linear layer's weights in one of the formats octet computes with, and y = x W^T (+ b).
//   F32:  W [out, in] FP32 (the unquantized path; GGUF weights are dequantized to FP32).
//   BF16: W [out, in] bf16 bits (embeddings / lm_head "stay 16-bit").
//   FP8:  W [out, in] E4M3 with weight_scale [out] (channel) or [1] (tensor); activations
//         quantized per token at run time (FP8_DYNAMIC) or with a static input_scale.
// DESIGN.md "Numerics conventions": y[m,n] = s_a[m] * s_w[n] * sum_k qa[m,k] * qw[n,k], FP32.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/huge_page_allocator.h"
#include "kernels/cpu/w8a8.h"

namespace octet {

struct LinearWeight {
  std::string name;  // HF module name, e.g. "model.layers.0.self_attn.q_proj" (for errors/logs)
  DType format = DType::F32;
  int64_t out_features = 0;
  int64_t in_features = 0;
  WeightVector<float> w_f32;      // [out, in] when F32 (huge pages: streamed every step)
  WeightVector<uint16_t> w_bf16;  // [out, in] when BF16
  WeightVector<uint8_t> w_fp8;    // [out, in] E4M3 when FP8
  std::vector<float> w_scale;     // [out] or [1] when FP8
  ScaleGranularity w_granularity = ScaleGranularity::PerRow;
  bool static_input = false;      // FP8: true -> input_scale, false -> dynamic per token
  float input_scale = 0.0f;       // FP8 static only
  std::vector<float> bias;        // [out] or empty

  /// Bytes of weight data read per forward call (weights and scales), for bandwidth figures.
  int64_t weight_bytes() const;
};

/// Reusable buffers for activation quantization (grown on demand, not shrunk).
struct LinearScratch {
  std::vector<uint8_t> qa;       // [m, in]
  std::vector<float> a_scale;    // [m]
};

/// y: [m, out] = x: [m, in] . W^T (+ bias), in the weight's format (FP8 quantizes x first).
void linear_forward(const LinearWeight& w, const float* x, int64_t m, float* y,
                    LinearScratch& scratch);

/// Quantizes an F32 weight to FP8 E4M3 in place (scale = amax/448 per output channel or per
/// tensor, compressed-tensors' rule in the arithmetic of the checkpoint's dtype, so the codes
/// equal llm-compressor's; see kernels/cpu/w8a8.h); activations dynamic per token.
void quantize_linear_fp8(LinearWeight& w, ScaleGranularity granularity,
                         DType arithmetic = DType::F32);

}  // namespace octet

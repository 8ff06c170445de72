// The element types, scale granularities and RoPE layouts that kernels compute with, shared by
// every backend (cpu/, cuda/) and by the model recipe. Plain C++17, no other project includes, so
// CUDA sources and host code can share it.
#pragma once

#include <cstdint>

namespace octet {

/// Element type of a tensor a kernel reads or writes: weights, activations, KV cache.
/// E4M3 is OCP "e4m3fn" (bias 7, no inf, max 448); E5M2: bias 15, IEEE-like inf/NaN, max 57344
/// (DESIGN.md "Numerics conventions").
enum class DType : uint8_t { F32, BF16, F16, FP8_E4M3, FP8_E5M2 };

/// Bytes per element: 4, 2, 2, 1, 1.
constexpr int64_t dtype_bytes(DType d) {
  return d == DType::F32 ? 4 : d == DType::BF16 || d == DType::F16 ? 2 : 1;
}
constexpr bool dtype_is_fp8(DType d) { return d == DType::FP8_E4M3 || d == DType::FP8_E5M2; }
/// Largest finite value of an FP8 dtype: 448 (E4M3) or 57344 (E5M2); a scale s = amax / this
/// maps amax onto the top code. 0 for the other dtypes.
constexpr float fp8_max_value(DType d) {
  return d == DType::FP8_E4M3 ? 448.0f : d == DType::FP8_E5M2 ? 57344.0f : 0.0f;
}
/// "f32", "bf16", "f16", "fp8_e4m3", "fp8_e5m2" (the KV cache keeps vLLM's "fp16" spelling at
/// the config edge).
constexpr const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::FP8_E4M3: return "fp8_e4m3";
    case DType::FP8_E5M2: return "fp8_e5m2";
  }
  return "?";
}

/// A KV cache dtype as the config edge spells it (vLLM's --kv-cache-dtype): "bf16", "fp16",
/// "fp8_e4m3", "fp8_e5m2"; "fp32" for F32 (calibration caches only).
constexpr const char* kv_cache_dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::FP8_E4M3: return "fp8_e4m3";
    case DType::FP8_E5M2: return "fp8_e5m2";
  }
  return "?";
}

/// Scale granularity of a quantized tensor: one scale for the tensor, or one per row (per output
/// channel of a weight, per token of an activation, per KV head of a cache).
enum class ScaleGranularity : uint8_t { PerTensor, PerRow };

/// How a head's dimensions are paired for rotation (RoFormer, Su et al. 2021).
/// AdjacentPairs: (x[2i], x[2i+1]), GGUF/llama.cpp "normal" layout (Q/K rows permuted).
/// HalfSplit:     (x[i], x[i + d/2]), Hugging Face's rotate_half layout ("neox").
enum class RopeLayout : uint8_t { AdjacentPairs, HalfSplit };

}  // namespace octet

#pragma once
// One layer's KV cache format (DESIGN.md "Numerics conventions"): dtype, FP8 scales, window.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/dtype.h"

namespace octet {

/// One layer's cache format. k_scale / v_scale: [num_kv_heads] FP32 (per-tensor scales are
/// repeated), used for FP8 dtypes. scale_source says where they came from, for the startup
/// table: "file", "checkpoint", "calculated", "unit", or "-" (16-bit layers). dtype F32 is for
/// calibration and one-sequence caches (LlamaModel::new_cache).
struct KVLayerSpec {
  DType dtype = DType::BF16;
  std::vector<float> k_scale;
  std::vector<float> v_scale;
  std::string scale_source = "-";
  int64_t sliding_window = 0;  // 0 = full attention
  /// fp8_per_token_head: dtype FP8_E4M3 with one FP32 scale per (token, KV head) for K and for
  /// V, stored beside the blocks (KVCacheView::k_token_scale); k_scale / v_scale are then
  /// placeholders (1.0) that no kernel reads.
  bool per_token_head = false;
  /// --kv-cache-rotation hadamard: the recipe rotates each head's q and k by the normalized
  /// Walsh-Hadamard matrix (Backend::hadamard_rotate) after RoPE, before the KV write, so the
  /// cache holds rotated K (V is not rotated). Fixed for the cache's life.
  bool hadamard_rotation = false;
};

/// The specs of a cache holding KV heads [kv_head_begin, kv_head_begin + num_kv_heads) of
/// `layers` (a tensor-parallel rank's share): FP8 scales sliced to those heads, the rest as is.
/// Throws std::invalid_argument when an FP8 layer's scales do not cover the range.
std::vector<KVLayerSpec> shard_kv_layer_specs(std::vector<KVLayerSpec> layers,
                                              int64_t kv_head_begin, int64_t num_kv_heads);

}  // namespace octet

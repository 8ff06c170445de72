#pragma once
// The paged KV cache's storage: per layer, K and V blocks in that layer's dtype with its scales
// (DESIGN.md "Numerics conventions"). Block bookkeeping (which request owns which block) is the
// engine's BlockPool; this is only memory, buffers of one Backend.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"

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

class PagedKVCache {
 public:
  /// Allocates num_blocks blocks of block_size tokens for every layer (zeroed) on `backend`,
  /// which must outlive the cache; the scales are uploaded.
  /// k_cache/v_cache of layer l: [num_blocks, block_size, num_kv_heads, head_dim], layers[l].dtype.
  /// Throws std::invalid_argument for non-positive sizes or scales of the wrong length.
  PagedKVCache(Backend& backend, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
               std::vector<KVLayerSpec> layers);

  /// Bytes of one block summed over all layers, K and V: block_size * num_kv_heads * head_dim
  /// * sum_l 2 * bytes(dtype_l), plus block_size * num_kv_heads * 2 * 4 per per_token_head layer
  /// (its FP32 token scales).
  static int64_t bytes_per_block(int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
                                 const std::vector<KVLayerSpec>& layers);

  /// Layer l's view (backend memory).
  KVCacheView layer(int64_t l) const;
  /// Layer l's K and V blocks (for downloads).
  const Buffer& k_buffer(int64_t l) const { return k_.at(l); }
  const Buffer& v_buffer(int64_t l) const { return v_.at(l); }
  /// The backend whose memory holds the cache.
  Backend& backend() const { return *backend_; }
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  const KVLayerSpec& spec(int64_t l) const { return layers_.at(l); }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t total_bytes() const;
  /// Writes zeros over every block (the cache reads as freshly allocated), so that a CPU
  /// backend's lazily mapped pages are all resident before a timed run (benchmarks).
  void prefault();

 private:
  Backend* backend_;
  int64_t num_blocks_, block_size_, num_kv_heads_, head_dim_;
  std::vector<KVLayerSpec> layers_;
  std::vector<Buffer> k_, v_, k_scale_, v_scale_;  // per layer
  std::vector<Buffer> k_token_scale_, v_token_scale_;  // per layer; empty unless per_token_head
};

}  // namespace octet

#pragma once
// The paged KV cache's storage: per layer, K and V blocks in that layer's dtype with its scales
// (DESIGN.md "Numerics conventions"). Block bookkeeping (which request owns which block) is the
// engine's BlockPool; this is only memory, buffers of one Backend.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "models/kv_cache_layout.h"
#include "models/kv_layer_spec.h"

namespace octet {

class PagedKVCache {
 public:
  /// Allocates num_blocks blocks of block_size tokens for every layer (zeroed) on `backend`,
  /// which must outlive the cache; the scales are uploaded. One KV cache group
  /// (single_group_layout): k_cache/v_cache of layer l: [num_blocks, block_size, num_kv_heads,
  /// head_dim], layers[l].dtype.
  /// Throws std::invalid_argument for non-positive sizes or scales of the wrong length.
  PagedKVCache(Backend& backend, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
               std::vector<KVLayerSpec> layers);
  /// The same laid out by `layout` (models/kv_cache_layout.h): one K and one V buffer per slot,
  /// num_blocks pages of the slot's size; layer l's view reads its slot as [num_blocks,
  /// block_size of its group, num_kv_heads, head_dim] in its dtype. Throws
  /// std::invalid_argument also for a layout that does not cover the layers once each.
  PagedKVCache(Backend& backend, int64_t num_blocks, int64_t num_kv_heads, int64_t head_dim,
               std::vector<KVLayerSpec> layers, KVCacheLayout layout);

  /// Bytes of one block summed over all layers, K and V: block_size * num_kv_heads * head_dim
  /// * sum_l 2 * bytes(dtype_l), plus block_size * num_kv_heads * 2 * 4 per per_token_head layer
  /// (its FP32 token scales).
  static int64_t bytes_per_block(int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
                                 const std::vector<KVLayerSpec>& layers);
  /// Bytes of one block of `layout`'s pool: its slots' pages, K and V, with token scales.
  static int64_t bytes_per_block(const KVCacheLayout& layout, int64_t num_kv_heads,
                                 int64_t head_dim, const std::vector<KVLayerSpec>& layers);

  /// Layer l's view (backend memory).
  KVCacheView layer(int64_t l) const;
  /// Layer l's K and V blocks (for downloads): its slot's buffer, [num_blocks, block size of
  /// its group, num_kv_heads, head_dim] in its dtype.
  const Buffer& k_buffer(int64_t l) const { return k_.at(layout_.layer_slot.at(l)); }
  const Buffer& v_buffer(int64_t l) const { return v_.at(layout_.layer_slot.at(l)); }
  /// The backend whose memory holds the cache.
  Backend& backend() const { return *backend_; }
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  const KVLayerSpec& spec(int64_t l) const { return layers_.at(l); }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t num_blocks() const { return num_blocks_; }
  /// Tokens per block of the smallest group (the prefix-hashing granularity).
  int64_t block_size() const { return block_size_; }
  const KVCacheLayout& layout() const { return layout_; }
  /// Layer l's KV cache group (index into layout().groups).
  int64_t layer_group(int64_t l) const { return layout_.layer_group.at(l); }
  int64_t total_bytes() const;
  /// Writes zeros over every block (the cache reads as freshly allocated), so that a CPU
  /// backend's lazily mapped pages are all resident before a timed run (benchmarks).
  void prefault();

 private:
  Backend* backend_;
  int64_t num_blocks_, block_size_, num_kv_heads_, head_dim_;
  std::vector<KVLayerSpec> layers_;
  KVCacheLayout layout_;
  std::vector<Buffer> k_, v_;                          // per slot
  std::vector<Buffer> k_token_scale_, v_token_scale_;  // per slot; empty unless per_token_head
  std::vector<Buffer> k_scale_, v_scale_;              // per layer
};

}  // namespace octet

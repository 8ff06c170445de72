#pragma once
// How the paged KV cache lays a model's layers over one pool of blocks when layers differ in
// attention window (hybrid models such as Gemma 3: five 512-token sliding-window layers to one
// global). vLLM v1's hybrid KV cache manager (vllm/v1/core/kv_cache_utils.py,
// _get_kv_cache_groups_uniform_page_size): layers are split into groups of equal size, each
// group with one window and its own block table per request; block b of the pool holds, in
// slot j, the page of layer j of whichever group owns b. A sliding-window group then frees the
// blocks its window has passed, and they serve any group.
//
// octet also lets groups differ in dtype when their page sizes divide (window layers in bf16,
// global layers in FP8): the group of the smaller dtype takes proportionally more tokens per
// block, so every slot is exactly full (vLLM pads the smaller pages instead).
#include <cstdint>
#include <string>
#include <vector>

#include "models/kv_layer_spec.h"

namespace octet {

/// One KV cache group: layers sharing one block table per request.
struct KVCacheGroup {
  int64_t sliding_window = 0;   // tokens; 0 = full attention (blocks are never freed early)
  int64_t block_size = 0;       // tokens per block of this group
  std::vector<int64_t> layers;  // model layer in slot 0, 1, ... of the group's blocks
};

/// The groups of a cache, each with the same number of layers (slots); layer l is in group
/// layer_group[l] at slot layer_slot[l].
struct KVCacheLayout {
  std::vector<KVCacheGroup> groups;
  std::vector<int32_t> layer_group;  // [num_layers]
  std::vector<int32_t> layer_slot;   // [num_layers]
  std::string note;                  // why the layout is what it is (start-up log)

  int64_t num_groups() const { return static_cast<int64_t>(groups.size()); }
  int64_t num_slots() const { return groups.empty() ? 0 : static_cast<int64_t>(groups[0].layers.size()); }
  /// The smallest group block size: the block size the engine hashes prefixes at.
  int64_t base_block_size() const;
  /// True when the pool has more than one group (some blocks are freed out of the window).
  bool hybrid() const { return groups.size() > 1 || (groups.size() == 1 && groups[0].sliding_window > 0); }
};

/// One group holding every layer in its own slot, block_size tokens per block: the layout of a
/// cache that keeps every block for the whole context. Its window is the layers' common window
/// when they all have the same one (then blocks behind it are freed), else 0.
KVCacheLayout single_group_layout(const std::vector<KVLayerSpec>& layers, int64_t block_size);

/// The hybrid layout: layers keyed by (window, per-token bytes of K values), each key's layer
/// count a multiple of s = gcd of the counts, split in layer order into groups of s layers.
/// A key whose per-token bytes are p takes block_size * p_max / p tokens per block (p_max: the
/// largest), so every slot's K (V) pages have one size; fp8_per_token_head's FP32 token scales
/// sit in per-slot buffers of the largest scale page beside them. Falls back to
/// single_group_layout (saying why in note) when a p does not divide p_max or when enable is
/// false (--disable-hybrid-kv-cache-manager).
KVCacheLayout hybrid_kv_cache_layout(const std::vector<KVLayerSpec>& layers, int64_t block_size,
                                     int64_t num_kv_heads, int64_t head_dim, bool enable);

/// Blocks a request of num_tokens tokens holds at most in `group` while it runs, computing at
/// most chunk tokens per step: ceil(num_tokens / block_size) for full attention; for a window W,
/// the blocks of the last W - 1 computed positions plus a chunk, capped by that.
int64_t group_blocks_held(const KVCacheGroup& group, int64_t num_tokens, int64_t chunk);

/// group_blocks_held summed over the layout's groups.
int64_t blocks_held(const KVCacheLayout& layout, int64_t num_tokens, int64_t chunk);

}  // namespace octet

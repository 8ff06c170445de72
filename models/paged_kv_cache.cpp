#include "models/paged_kv_cache.h"

#include <stdexcept>

namespace octet {

PagedKVCache::PagedKVCache(int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                           int64_t head_dim, std::vector<KVLayerSpec> layers)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      layers_(std::move(layers)) {
  if (num_blocks <= 0 || block_size <= 0 || num_kv_heads <= 0 || head_dim <= 0 || layers_.empty())
    throw std::invalid_argument("PagedKVCache: sizes must be positive (num_blocks " +
                                std::to_string(num_blocks) + ", block_size " +
                                std::to_string(block_size) + ")");
  k_.resize(layers_.size());
  v_.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    KVLayerSpec& s = layers_[l];
    if (dtype_is_fp8(s.dtype) &&
        (static_cast<int64_t>(s.k_scale.size()) != num_kv_heads ||
         static_cast<int64_t>(s.v_scale.size()) != num_kv_heads))
      throw std::invalid_argument("PagedKVCache: layer " + std::to_string(l) + " needs " +
                                  std::to_string(num_kv_heads) + " k/v scales");
    const size_t bytes = static_cast<size_t>(num_blocks * block_size * num_kv_heads * head_dim *
                                             dtype_bytes(s.dtype));
    k_[l].assign(bytes, 0);
    v_[l].assign(bytes, 0);
  }
}

int64_t PagedKVCache::bytes_per_block(int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
                                      const std::vector<KVLayerSpec>& layers) {
  int64_t bytes = 0;
  for (const KVLayerSpec& s : layers)
    bytes += 2 * block_size * num_kv_heads * head_dim * dtype_bytes(s.dtype);
  return bytes;
}

KVCacheView PagedKVCache::layer(int64_t l) {
  KVLayerSpec& s = layers_.at(l);
  KVCacheView view;
  view.k = k_[l].data();
  view.v = v_[l].data();
  view.dtype = s.dtype;
  view.num_blocks = num_blocks_;
  view.block_size = block_size_;
  view.num_kv_heads = num_kv_heads_;
  view.head_dim = head_dim_;
  view.k_scale = s.k_scale.empty() ? nullptr : s.k_scale.data();
  view.v_scale = s.v_scale.empty() ? nullptr : s.v_scale.data();
  return view;
}

int64_t PagedKVCache::total_bytes() const {
  return num_blocks_ * bytes_per_block(block_size_, num_kv_heads_, head_dim_, layers_);
}

}  // namespace octet

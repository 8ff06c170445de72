#include "models/paged_kv_cache.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace octet {

PagedKVCache::PagedKVCache(Backend& backend, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                           int64_t head_dim, std::vector<KVLayerSpec> layers)
    : backend_(&backend),
      num_blocks_(num_blocks),
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
  k_scale_.resize(layers_.size());
  v_scale_.resize(layers_.size());
  k_token_scale_.resize(layers_.size());
  v_token_scale_.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    KVLayerSpec& s = layers_[l];
    if (dtype_is_fp8(s.dtype) &&
        (static_cast<int64_t>(s.k_scale.size()) != num_kv_heads ||
         static_cast<int64_t>(s.v_scale.size()) != num_kv_heads))
      throw std::invalid_argument("PagedKVCache: layer " + std::to_string(l) + " needs " +
                                  std::to_string(num_kv_heads) + " k/v scales");
    const int64_t bytes = num_blocks * block_size * num_kv_heads * head_dim * dtype_bytes(s.dtype);
    k_[l] = backend.allocate(bytes);
    v_[l] = backend.allocate(bytes);
    if (s.per_token_head) {
      if (s.dtype != DType::FP8_E4M3)
        throw std::invalid_argument("PagedKVCache: layer " + std::to_string(l) +
                                    ": per-token-head scales need dtype fp8_e4m3");
      const int64_t n = num_blocks * block_size * num_kv_heads * 4;
      k_token_scale_[l] = backend.allocate(n);
      v_token_scale_[l] = backend.allocate(n);
    }
    for (auto [host, dev] : {std::pair{&s.k_scale, &k_scale_[l]}, {&s.v_scale, &v_scale_[l]}}) {
      const int64_t n = static_cast<int64_t>(host->size() * sizeof(float));
      *dev = backend.allocate(n);
      backend.upload(*dev, 0, host->data(), n);
    }
  }
}

std::vector<KVLayerSpec> shard_kv_layer_specs(std::vector<KVLayerSpec> layers,
                                              int64_t kv_head_begin, int64_t num_kv_heads) {
  for (KVLayerSpec& s : layers) {
    if (!dtype_is_fp8(s.dtype)) continue;
    for (std::vector<float>* v : {&s.k_scale, &s.v_scale}) {
      if (kv_head_begin < 0 || num_kv_heads < 0 ||
          kv_head_begin + num_kv_heads > static_cast<int64_t>(v->size()))
        throw std::invalid_argument("shard_kv_layer_specs: KV heads [" +
                                    std::to_string(kv_head_begin) + ", " +
                                    std::to_string(kv_head_begin + num_kv_heads) +
                                    ") outside the " + std::to_string(v->size()) + " scales");
      *v = std::vector<float>(v->begin() + kv_head_begin,
                              v->begin() + kv_head_begin + num_kv_heads);
    }
  }
  return layers;
}

int64_t PagedKVCache::bytes_per_block(int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
                                      const std::vector<KVLayerSpec>& layers) {
  int64_t bytes = 0;
  for (const KVLayerSpec& s : layers)
    bytes += 2 * block_size * num_kv_heads * (head_dim * dtype_bytes(s.dtype) +
                                              (s.per_token_head ? 4 : 0));
  return bytes;
}

KVCacheView PagedKVCache::layer(int64_t l) const {
  const KVLayerSpec& s = layers_.at(l);
  KVCacheView view;
  view.k = k_[l].data();
  view.v = v_[l].data();
  view.dtype = s.dtype;
  view.num_blocks = num_blocks_;
  view.block_size = block_size_;
  view.num_kv_heads = num_kv_heads_;
  view.head_dim = head_dim_;
  view.k_scale = k_scale_[l].as<const float>();
  view.v_scale = v_scale_[l].as<const float>();
  if (s.per_token_head) {
    view.k_token_scale = k_token_scale_[l].as<float>();
    view.v_token_scale = v_token_scale_[l].as<float>();
  }
  return view;
}

int64_t PagedKVCache::total_bytes() const {
  return num_blocks_ * bytes_per_block(block_size_, num_kv_heads_, head_dim_, layers_);
}

void PagedKVCache::prefault() {
  static const std::vector<uint8_t> zeros(size_t{2} << 20, 0);
  const auto fill = [&](const Buffer& b) {
    for (int64_t off = 0; off < b.bytes(); off += static_cast<int64_t>(zeros.size()))
      backend_->upload(b, off, zeros.data(),
                       std::min<int64_t>(static_cast<int64_t>(zeros.size()), b.bytes() - off));
  };
  for (size_t l = 0; l < layers_.size(); ++l)
    for (const Buffer* b : {&k_[l], &v_[l], &k_token_scale_[l], &v_token_scale_[l]})
      if (!b->empty()) fill(*b);
  backend_->synchronize();
}

}  // namespace octet

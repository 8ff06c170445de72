#include "models/paged_kv_cache.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace octet {

namespace {

// Slot j's page bytes: K values (or V) of its layers' pages, and their token scales (0 when
// none is per_token_head). Equal across a hybrid layout's groups by construction; the
// largest is taken otherwise.
struct SlotBytes {
  int64_t values = 0, token_scales = 0;
};

std::vector<SlotBytes> slot_bytes(const KVCacheLayout& layout, int64_t num_kv_heads,
                                  int64_t head_dim, const std::vector<KVLayerSpec>& layers) {
  std::vector<SlotBytes> out(static_cast<size_t>(layout.num_slots()));
  for (const KVCacheGroup& g : layout.groups)
    for (size_t j = 0; j < g.layers.size(); ++j) {
      const KVLayerSpec& s = layers.at(static_cast<size_t>(g.layers[j]));
      out[j].values = std::max(out[j].values,
                               g.block_size * num_kv_heads * head_dim * dtype_bytes(s.dtype));
      if (s.per_token_head)
        out[j].token_scales = std::max(out[j].token_scales, g.block_size * num_kv_heads * 4);
    }
  return out;
}

void check_layout(const KVCacheLayout& layout, size_t num_layers) {
  const auto bad = [](const std::string& why) {
    throw std::invalid_argument("PagedKVCache: bad KV cache layout: " + why);
  };
  if (layout.groups.empty() || layout.layer_group.size() != num_layers ||
      layout.layer_slot.size() != num_layers)
    bad("it does not cover the model's " + std::to_string(num_layers) + " layers");
  std::vector<int> seen(num_layers, 0);
  for (size_t gi = 0; gi < layout.groups.size(); ++gi) {
    const KVCacheGroup& g = layout.groups[gi];
    if (g.block_size <= 0 || g.sliding_window < 0 ||
        static_cast<int64_t>(g.layers.size()) != layout.num_slots())
      bad("group " + std::to_string(gi) + " has a non-positive block size or another slot count");
    for (size_t j = 0; j < g.layers.size(); ++j) {
      const int64_t l = g.layers[j];
      if (l < 0 || l >= static_cast<int64_t>(num_layers) ||
          layout.layer_group[static_cast<size_t>(l)] != static_cast<int32_t>(gi) ||
          layout.layer_slot[static_cast<size_t>(l)] != static_cast<int32_t>(j))
        bad("group " + std::to_string(gi) + " slot " + std::to_string(j));
      ++seen[static_cast<size_t>(l)];
    }
  }
  for (size_t l = 0; l < num_layers; ++l)
    if (seen[l] != 1) bad("layer " + std::to_string(l) + " is not in exactly one group");
}

}  // namespace

PagedKVCache::PagedKVCache(Backend& backend, int64_t num_blocks, int64_t block_size,
                           int64_t num_kv_heads, int64_t head_dim, std::vector<KVLayerSpec> layers)
    : PagedKVCache(backend, num_blocks, num_kv_heads, head_dim, layers,
                   block_size > 0 ? single_group_layout(layers, block_size) : KVCacheLayout{}) {}

PagedKVCache::PagedKVCache(Backend& backend, int64_t num_blocks, int64_t num_kv_heads,
                           int64_t head_dim, std::vector<KVLayerSpec> layers, KVCacheLayout layout)
    : backend_(&backend),
      num_blocks_(num_blocks),
      block_size_(layout.base_block_size()),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      layers_(std::move(layers)),
      layout_(std::move(layout)) {
  if (num_blocks <= 0 || block_size_ <= 0 || num_kv_heads <= 0 || head_dim <= 0 || layers_.empty())
    throw std::invalid_argument("PagedKVCache: sizes must be positive (num_blocks " +
                                std::to_string(num_blocks) + ", block_size " +
                                std::to_string(block_size_) + ")");
  check_layout(layout_, layers_.size());
  k_scale_.resize(layers_.size());
  v_scale_.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    KVLayerSpec& s = layers_[l];
    if (dtype_is_fp8(s.dtype) &&
        (static_cast<int64_t>(s.k_scale.size()) != num_kv_heads ||
         static_cast<int64_t>(s.v_scale.size()) != num_kv_heads))
      throw std::invalid_argument("PagedKVCache: layer " + std::to_string(l) + " needs " +
                                  std::to_string(num_kv_heads) + " k/v scales");
    if (s.per_token_head && s.dtype != DType::FP8_E4M3)
      throw std::invalid_argument("PagedKVCache: layer " + std::to_string(l) +
                                  ": per-token-head scales need dtype fp8_e4m3");
    for (auto [host, dev] : {std::pair{&s.k_scale, &k_scale_[l]}, {&s.v_scale, &v_scale_[l]}}) {
      const int64_t n = static_cast<int64_t>(host->size() * sizeof(float));
      *dev = backend.allocate(n);
      backend.upload(*dev, 0, host->data(), n);
    }
  }
  const std::vector<SlotBytes> slots = slot_bytes(layout_, num_kv_heads, head_dim, layers_);
  k_.resize(slots.size());
  v_.resize(slots.size());
  k_token_scale_.resize(slots.size());
  v_token_scale_.resize(slots.size());
  for (size_t j = 0; j < slots.size(); ++j) {
    k_[j] = backend.allocate(num_blocks * slots[j].values);
    v_[j] = backend.allocate(num_blocks * slots[j].values);
    if (slots[j].token_scales > 0) {
      k_token_scale_[j] = backend.allocate(num_blocks * slots[j].token_scales);
      v_token_scale_[j] = backend.allocate(num_blocks * slots[j].token_scales);
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

int64_t PagedKVCache::bytes_per_block(const KVCacheLayout& layout, int64_t num_kv_heads,
                                      int64_t head_dim, const std::vector<KVLayerSpec>& layers) {
  int64_t bytes = 0;
  for (const SlotBytes& s : slot_bytes(layout, num_kv_heads, head_dim, layers))
    bytes += 2 * (s.values + s.token_scales);
  return bytes;
}

KVCacheView PagedKVCache::layer(int64_t l) const {
  const KVLayerSpec& s = layers_.at(l);
  const size_t j = static_cast<size_t>(layout_.layer_slot.at(l));
  KVCacheView view;
  view.k = k_[j].data();
  view.v = v_[j].data();
  view.dtype = s.dtype;
  view.num_blocks = num_blocks_;
  view.block_size = layout_.groups[static_cast<size_t>(layout_.layer_group[l])].block_size;
  view.num_kv_heads = num_kv_heads_;
  view.head_dim = head_dim_;
  view.k_scale = k_scale_[l].as<const float>();
  view.v_scale = v_scale_[l].as<const float>();
  if (s.per_token_head) {
    view.k_token_scale = k_token_scale_[j].as<float>();
    view.v_token_scale = v_token_scale_[j].as<float>();
  }
  return view;
}

int64_t PagedKVCache::total_bytes() const {
  return num_blocks_ * bytes_per_block(layout_, num_kv_heads_, head_dim_, layers_);
}

void PagedKVCache::prefault() {
  static const std::vector<uint8_t> zeros(size_t{2} << 20, 0);
  const auto fill = [&](const Buffer& b) {
    for (int64_t off = 0; off < b.bytes(); off += static_cast<int64_t>(zeros.size()))
      backend_->upload(b, off, zeros.data(),
                       std::min<int64_t>(static_cast<int64_t>(zeros.size()), b.bytes() - off));
  };
  for (size_t j = 0; j < k_.size(); ++j)
    for (const Buffer* b : {&k_[j], &v_[j], &k_token_scale_[j], &v_token_scale_[j]})
      if (!b->empty()) fill(*b);
  backend_->synchronize();
}

}  // namespace octet

#include "models/kv_cache_layout.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

namespace octet {

int64_t KVCacheLayout::base_block_size() const {
  int64_t bs = 0;
  for (const KVCacheGroup& g : groups) bs = bs == 0 ? g.block_size : std::min(bs, g.block_size);
  return bs;
}

KVCacheLayout single_group_layout(const std::vector<KVLayerSpec>& layers, int64_t block_size) {
  KVCacheLayout out;
  KVCacheGroup g;
  g.block_size = block_size;
  g.sliding_window = layers.empty() ? 0 : layers[0].sliding_window;
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].sliding_window != g.sliding_window) g.sliding_window = 0;
    g.layers.push_back(static_cast<int64_t>(l));
    out.layer_group.push_back(0);
    out.layer_slot.push_back(static_cast<int32_t>(l));
  }
  out.groups.push_back(std::move(g));
  return out;
}

KVCacheLayout hybrid_kv_cache_layout(const std::vector<KVLayerSpec>& layers, int64_t block_size,
                                     int64_t num_kv_heads, int64_t head_dim, bool enable) {
  const auto fallback = [&](std::string why) {
    KVCacheLayout out = single_group_layout(layers, block_size);
    out.note = std::move(why);
    return out;
  };
  if (layers.empty()) return single_group_layout(layers, block_size);
  // Key: (window, bytes of one token's K values); full attention (window 0) sorts first.
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> by_key;
  for (size_t l = 0; l < layers.size(); ++l) {
    const KVLayerSpec& s = layers[l];
    by_key[{s.sliding_window, num_kv_heads * head_dim * dtype_bytes(s.dtype)}].push_back(
        static_cast<int64_t>(l));
  }
  if (by_key.size() == 1) return single_group_layout(layers, block_size);
  std::map<int64_t, int> windows;
  for (const auto& [key, ls] : by_key) ++windows[key.first];
  if (windows.size() == 1)  // one window, several dtypes: nothing is freed differently
    return single_group_layout(layers, block_size);
  if (!enable)
    return fallback("one KV cache group (--disable-hybrid-kv-cache-manager): window layers "
                    "keep every block of the context");
  int64_t p_max = 0, s = 0;
  for (const auto& [key, ls] : by_key) {
    p_max = std::max(p_max, key.second);
    s = std::gcd(s, static_cast<int64_t>(ls.size()));
  }
  for (const auto& [key, ls] : by_key)
    if (p_max % key.second != 0)
      return fallback("one KV cache group: page sizes of the layers' dtypes do not divide");
  KVCacheLayout out;
  out.layer_group.assign(layers.size(), -1);
  out.layer_slot.assign(layers.size(), -1);
  for (const auto& [key, ls] : by_key) {
    for (size_t first = 0; first < ls.size(); first += static_cast<size_t>(s)) {
      KVCacheGroup g;
      g.sliding_window = key.first;
      g.block_size = block_size * (p_max / key.second);
      for (int64_t j = 0; j < s; ++j) {
        const int64_t l = ls[first + static_cast<size_t>(j)];
        g.layers.push_back(l);
        out.layer_group[static_cast<size_t>(l)] = static_cast<int32_t>(out.groups.size());
        out.layer_slot[static_cast<size_t>(l)] = static_cast<int32_t>(j);
      }
      out.groups.push_back(std::move(g));
    }
  }
  out.note = std::to_string(out.groups.size()) + " KV cache groups of " + std::to_string(s) +
             " layers sharing one block pool";
  return out;
}

int64_t group_blocks_held(const KVCacheGroup& group, int64_t num_tokens, int64_t chunk) {
  const int64_t bs = group.block_size;
  const int64_t all = (num_tokens + bs - 1) / bs;
  if (group.sliding_window <= 0) return all;
  // Positions [start - W + 1, start + chunk) with start anywhere: at most this many blocks.
  const int64_t span = group.sliding_window - 1 + std::max<int64_t>(chunk, 1);
  return std::min(all, (span + bs - 1) / bs + 1);
}

int64_t blocks_held(const KVCacheLayout& layout, int64_t num_tokens, int64_t chunk) {
  int64_t n = 0;
  for (const KVCacheGroup& g : layout.groups) n += group_blocks_held(g, num_tokens, chunk);
  return n;
}

}  // namespace octet

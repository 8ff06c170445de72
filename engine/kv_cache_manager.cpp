#include "engine/kv_cache_manager.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <stdexcept>
#include <string>

#include "kernels/common/check.h"

namespace octet {

namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t fnv1a(uint64_t h, uint64_t value, int num_bytes) {
  for (int i = 0; i < num_bytes; ++i) {
    h ^= (value >> (8 * i)) & 0xff;
    h *= kFnvPrime;
  }
  return h;
}

uint64_t splitmix64_finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t hash_block_tokens(uint64_t parent_block_hash, const int32_t* token_ids,
                           int64_t num_tokens, uint64_t extra_key) {
  uint64_t h = kFnvOffset;
  h = fnv1a(h, parent_block_hash, 8);
  h = fnv1a(h, extra_key, 8);
  for (int64_t i = 0; i < num_tokens; ++i) h = fnv1a(h, static_cast<uint32_t>(token_ids[i]), 4);
  return splitmix64_finalize(h);
}

namespace {

KVCacheLayout one_full_group(int64_t block_size) {
  KVCacheLayout layout;
  KVCacheGroup g;
  g.block_size = block_size;
  layout.groups.push_back(g);
  return layout;
}

}  // namespace

KVCacheManager::KVCacheManager(int64_t num_blocks, int64_t block_size,
                               bool enable_prefix_caching, uint64_t cache_salt,
                               int64_t max_model_len)
    : KVCacheManager(num_blocks, one_full_group(block_size), enable_prefix_caching, cache_salt,
                     max_model_len) {}

KVCacheManager::KVCacheManager(int64_t num_blocks, const KVCacheLayout& layout,
                               bool enable_prefix_caching, uint64_t cache_salt,
                               int64_t max_model_len)
    : layout_(layout),
      block_size_(layout.base_block_size()),
      enable_prefix_caching_(enable_prefix_caching),
      cache_salt_(cache_salt),
      max_model_len_(max_model_len),
      max_blocks_per_seq_(block_size_ > 0 ? (max_model_len + block_size_ - 1) / block_size_ : 0),
      pool_(num_blocks, enable_prefix_caching) {
  if (block_size_ < 1)
    throw std::invalid_argument("KVCacheManager: block_size must be >= 1, got " +
                                std::to_string(block_size_));
  for (const KVCacheGroup& g : layout_.groups)
    if (g.block_size % block_size_ != 0 || g.sliding_window < 0)
      throw std::invalid_argument("KVCacheManager: group block size " +
                                  std::to_string(g.block_size) + " is not a multiple of " +
                                  std::to_string(block_size_));
  if (max_model_len < 1)
    throw std::invalid_argument("KVCacheManager: max_model_len must be >= 1, got " +
                                std::to_string(max_model_len));
}

void KVCacheManager::update_block_hashes(Request& request) const {
  if (!enable_prefix_caching_) return;
  const int64_t num_full = request.num_tokens() / block_size_;
  std::vector<int32_t> tokens(block_size_);
  for (int64_t b = static_cast<int64_t>(request.block_hashes.size()); b < num_full; ++b) {
    for (int64_t i = 0; i < block_size_; ++i) tokens[i] = request.token(b * block_size_ + i);
    const uint64_t parent = b == 0 ? 0 : request.block_hashes[b - 1];
    request.block_hashes.push_back(hash_block_tokens(parent, tokens.data(), block_size_,
                                                     cache_salt_));
  }
}

std::vector<uint64_t> KVCacheManager::prefix_hashes(const Request& request, int64_t n) const {
  std::vector<uint64_t> h(request.block_hashes.begin(),
                          request.block_hashes.begin() +
                              std::min<int64_t>(n, static_cast<int64_t>(request.block_hashes.size())));
  std::vector<int32_t> tokens(block_size_);
  for (int64_t b = static_cast<int64_t>(h.size()); b < n; ++b) {
    for (int64_t i = 0; i < block_size_; ++i) tokens[i] = request.token(b * block_size_ + i);
    h.push_back(hash_block_tokens(b == 0 ? 0 : h[b - 1], tokens.data(), block_size_, cache_salt_));
  }
  return h;
}

uint64_t KVCacheManager::group_hash(const std::vector<uint64_t>& hashes, size_t g,
                                    int64_t i) const {
  const int64_t m = layout_.groups[g].block_size / block_size_;
  const uint64_t h = hashes.at(static_cast<size_t>((i + 1) * m - 1));
  if (g == 0) return h;  // one group: the chained hash itself
  return splitmix64_finalize(h ^ (0x9e3779b97f4a7c15ull * (g + 1)));
}

ComputedBlocks KVCacheManager::get_computed_blocks(const Request& request) const {
  ComputedBlocks hit;
  if (!enable_prefix_caching_ || request.num_tokens() == 0) return hit;
  // Prompt logprobs need the logits of every prompt position: compute them all (as vLLM).
  if (request.sampling_params.prompt_logprobs >= 0) return hit;
  // A hit is whole blocks of every group: a multiple of the groups' block sizes' lcm.
  int64_t unit = 1;
  for (const KVCacheGroup& g : layout_.groups) unit = std::lcm(unit, g.block_size);
  // At least the last token is computed: it yields the logits of the next token.
  int64_t n = (request.num_tokens() - 1) / unit * unit;
  if (n == 0) return hit;
  const std::vector<uint64_t> hashes = prefix_hashes(request, n / block_size_);
  const auto cached = [&](size_t g, int64_t i) {
    return pool_.get_cached_block(group_hash(hashes, g, i));
  };
  for (size_t g = 0; g < layout_.groups.size(); ++g) {
    const KVCacheGroup& grp = layout_.groups[g];
    if (grp.sliding_window > 0) continue;
    int64_t i = 0;
    while (i < n / grp.block_size && cached(g, i)) ++i;
    n = std::min(n, i * grp.block_size) / unit * unit;
  }
  // Sliding-window groups need the blocks of [n - W + 1, n): shorten n until they are cached.
  // run[g][i]: cached blocks of group g ending at block i, contiguous (one lookup per block).
  std::vector<std::vector<int64_t>> run(layout_.groups.size());
  for (size_t g = 0; g < layout_.groups.size(); ++g) {
    const KVCacheGroup& grp = layout_.groups[g];
    if (grp.sliding_window <= 0) continue;
    run[g].resize(static_cast<size_t>(n / grp.block_size));
    for (size_t i = 0; i < run[g].size(); ++i)
      run[g][i] = cached(g, static_cast<int64_t>(i)) ? (i > 0 ? run[g][i - 1] : 0) + 1 : 0;
  }
  const auto window_ok = [&](int64_t len) {
    for (size_t g = 0; g < layout_.groups.size(); ++g) {
      const KVCacheGroup& grp = layout_.groups[g];
      if (grp.sliding_window <= 0) continue;
      const int64_t lo = std::max<int64_t>(0, len - grp.sliding_window + 1) / grp.block_size;
      const int64_t hi = len / grp.block_size;  // blocks [lo, hi) must be cached
      if (hi > lo && run[g][static_cast<size_t>(hi - 1)] < hi - lo) return false;
    }
    return true;
  };
  while (n > 0 && !window_ok(n)) n -= unit;
  if (n == 0) return hit;
  hit.num_computed_tokens = n;
  hit.block_ids.resize(layout_.groups.size());
  for (size_t g = 0; g < layout_.groups.size(); ++g) {
    const KVCacheGroup& grp = layout_.groups[g];
    const int64_t lo = grp.sliding_window > 0
                           ? std::max<int64_t>(0, n - grp.sliding_window + 1) / grp.block_size
                           : 0;
    for (int64_t i = 0; i < n / grp.block_size; ++i)
      hit.block_ids[g].push_back(i < lo ? 0 : *cached(g, i));
  }
  return hit;
}

bool KVCacheManager::allocate_slots(Request& request, int64_t num_new_tokens,
                                    const ComputedBlocks& computed) {
  OCTET_CHECK(num_new_tokens >= 0, "KVCacheManager: allocate_slots: negative num_new_tokens");
  const size_t num_groups = layout_.groups.size();
  const auto it = req_blocks_.find(request.request_id);
  const bool holds = it != req_blocks_.end();
  const bool has_hit = computed.num_computed_tokens > 0;
  OCTET_CHECK(!has_hit || (!holds && request.num_computed_tokens == 0),
              "KVCacheManager: allocate_slots: a prefix hit for '", request.request_id,
              "', which holds blocks");
  OCTET_CHECK(!has_hit || computed.block_ids.size() == num_groups,
              "KVCacheManager: allocate_slots: a prefix hit of ", computed.block_ids.size(),
              " groups, the cache has ", num_groups);
  for (size_t g = 0; has_hit && g < num_groups; ++g)
    OCTET_CHECK(computed.num_computed_tokens ==
                    static_cast<int64_t>(computed.block_ids[g].size()) *
                        layout_.groups[g].block_size,
                "KVCacheManager: allocate_slots: computed.num_computed_tokens is not its "
                "blocks' tokens");
  const int64_t start = request.num_computed_tokens + computed.num_computed_tokens;
  const int64_t total = start + num_new_tokens;
  OCTET_CHECK(total <= request.num_tokens(), "KVCacheManager: allocate_slots: '",
              request.request_id, "' schedules ", total, " tokens of ", request.num_tokens());
  OCTET_CHECK((total + block_size_ - 1) / block_size_ <= max_blocks_per_seq_,
              "KVCacheManager: allocate_slots: '", request.request_id, "' needs ",
              (total + block_size_ - 1) / block_size_,
              " blocks, more than max_model_len allows (", max_blocks_per_seq_, ")");
  // Blocks the window has passed go back to the pool first (the queries from `start` on read
  // positions >= start - W + 1 only).
  if (holds) {
    RequestBlocks& rb = it->second;
    for (size_t g = 0; g < num_groups; ++g) {
      const KVCacheGroup& grp = layout_.groups[g];
      if (grp.sliding_window <= 0) continue;
      const int64_t lo = std::max<int64_t>(0, start - grp.sliding_window + 1) / grp.block_size;
      std::vector<int32_t> passed;
      std::vector<int32_t>& ids = rb.block_ids[g];
      for (int64_t i = 0; i < std::min<int64_t>(lo, static_cast<int64_t>(ids.size())); ++i)
        if (ids[i] != 0) passed.push_back(std::exchange(ids[i], 0));
      if (!passed.empty()) pool_.free_blocks(passed);
    }
  }
  std::vector<int64_t> num_new(num_groups, 0);
  int64_t need = 0;
  for (size_t g = 0; g < num_groups; ++g) {
    const int64_t bs = layout_.groups[g].block_size;
    const int64_t held = holds ? static_cast<int64_t>(it->second.block_ids[g].size())
                               : has_hit ? static_cast<int64_t>(computed.block_ids[g].size()) : 0;
    num_new[g] = std::max<int64_t>(0, (total + bs - 1) / bs - held);
    need += num_new[g];
    // Hit blocks nobody holds sit in the free list: touching them uses up free blocks too.
    if (has_hit)
      for (int32_t id : computed.block_ids[g])
        if (id != 0 && pool_.block(id).ref_cnt == 0) ++need;
  }
  if (need > pool_.num_free_blocks()) return false;

  const bool first_allocation = !holds && request.num_computed_tokens == 0;
  RequestBlocks& rb = req_blocks_[request.request_id];
  if (rb.block_ids.empty()) {
    rb.block_ids.resize(num_groups);
    rb.num_cached_blocks.assign(num_groups, 0);
  }
  // Every group's hit blocks leave the free list before any new block is popped from it.
  for (size_t g = 0; has_hit && g < num_groups; ++g) {
    std::vector<int32_t> real;
    for (int32_t id : computed.block_ids[g])
      if (id != 0) real.push_back(id);
    pool_.touch(real);
    rb.block_ids[g] = computed.block_ids[g];
    rb.num_cached_blocks[g] = static_cast<int64_t>(rb.block_ids[g].size());
  }
  for (size_t g = 0; g < num_groups; ++g) {
    auto fresh = pool_.get_new_blocks(num_new[g]);
    OCTET_CHECK(fresh.has_value(), "KVCacheManager: allocate_slots: free blocks vanished");
    rb.block_ids[g].insert(rb.block_ids[g].end(), fresh->begin(), fresh->end());
  }

  if (enable_prefix_caching_) {
    if (first_allocation && request.num_preemptions == 0) {
      prefix_cache_queries_ += request.num_tokens();
      prefix_cache_hits_ += computed.num_computed_tokens;
    }
    if (total / block_size_ > static_cast<int64_t>(request.block_hashes.size()))
      update_block_hashes(request);
    for (size_t g = 0; g < num_groups; ++g) {
      const int64_t num_full = total / layout_.groups[g].block_size;
      int64_t& num_cached = rb.num_cached_blocks[g];
      if (num_full <= num_cached) continue;
      std::vector<uint64_t> hashes(static_cast<size_t>(num_full), 0);
      for (int64_t i = num_cached; i < num_full; ++i)
        hashes[static_cast<size_t>(i)] = group_hash(request.block_hashes, g, i);
      pool_.cache_full_blocks(rb.block_ids[g], hashes, num_cached, num_full);
      num_cached = num_full;
    }
  }
  return true;
}

void KVCacheManager::free(const Request& request) {
  const auto it = req_blocks_.find(request.request_id);
  if (it == req_blocks_.end()) return;
  for (const std::vector<int32_t>& ids : it->second.block_ids) {
    std::vector<int32_t> reversed;
    for (auto b = ids.rbegin(); b != ids.rend(); ++b)
      if (*b != 0) reversed.push_back(*b);
    pool_.free_blocks(reversed);
  }
  req_blocks_.erase(it);
}

const std::vector<int32_t>& KVCacheManager::get_block_ids(const std::string& request_id,
                                                          int64_t group) const {
  static const std::vector<int32_t> kNone;
  const auto it = req_blocks_.find(request_id);
  if (it == req_blocks_.end() || group < 0 ||
      group >= static_cast<int64_t>(it->second.block_ids.size()))
    return kNone;
  return it->second.block_ids[static_cast<size_t>(group)];
}

int64_t KVCacheManager::blocks_held(int64_t num_tokens, int64_t chunk) const {
  return octet::blocks_held(layout_, num_tokens, chunk);
}

}  // namespace octet

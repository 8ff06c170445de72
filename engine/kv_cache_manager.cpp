#include "engine/kv_cache_manager.h"

#include <algorithm>
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

KVCacheManager::KVCacheManager(int64_t num_blocks, int64_t block_size,
                               bool enable_prefix_caching, uint64_t cache_salt,
                               int64_t max_model_len)
    : block_size_(block_size),
      enable_prefix_caching_(enable_prefix_caching),
      cache_salt_(cache_salt),
      max_model_len_(max_model_len),
      max_blocks_per_seq_(block_size > 0 ? (max_model_len + block_size - 1) / block_size : 0),
      pool_(num_blocks, enable_prefix_caching) {
  if (block_size < 1)
    throw std::invalid_argument("KVCacheManager: block_size must be >= 1, got " +
                                std::to_string(block_size));
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

ComputedBlocks KVCacheManager::get_computed_blocks(const Request& request) const {
  ComputedBlocks hit;
  if (!enable_prefix_caching_ || request.num_tokens() == 0) return hit;
  // Prompt logprobs need the logits of every prompt position: compute them all (as vLLM).
  if (request.sampling_params.prompt_logprobs >= 0) return hit;
  // At least the last token is computed: it yields the logits of the next token.
  const int64_t max_hit_blocks = (request.num_tokens() - 1) / block_size_;
  std::vector<int32_t> tokens(block_size_);
  uint64_t parent = 0;
  for (int64_t b = 0; b < max_hit_blocks; ++b) {
    uint64_t h;
    if (b < static_cast<int64_t>(request.block_hashes.size())) {
      h = request.block_hashes[b];
    } else {  // hashes not yet extended by update_block_hashes: compute them here
      for (int64_t i = 0; i < block_size_; ++i) tokens[i] = request.token(b * block_size_ + i);
      h = hash_block_tokens(parent, tokens.data(), block_size_, cache_salt_);
    }
    const auto id = pool_.get_cached_block(h);
    if (!id) break;
    hit.block_ids.push_back(*id);
    parent = h;
  }
  hit.num_computed_tokens = static_cast<int64_t>(hit.block_ids.size()) * block_size_;
  return hit;
}

bool KVCacheManager::allocate_slots(Request& request, int64_t num_new_tokens,
                                    const ComputedBlocks& computed) {
  OCTET_CHECK(num_new_tokens >= 0, "KVCacheManager: allocate_slots: negative num_new_tokens");
  const auto it = req_blocks_.find(request.request_id);
  const int64_t num_held = it == req_blocks_.end()
                               ? 0 : static_cast<int64_t>(it->second.block_ids.size());
  const int64_t num_hit = static_cast<int64_t>(computed.block_ids.size());
  OCTET_CHECK(num_hit == 0 || (num_held == 0 && request.num_computed_tokens == 0),
              "KVCacheManager: allocate_slots: a prefix hit for '", request.request_id,
              "', which holds blocks");
  OCTET_CHECK(computed.num_computed_tokens == num_hit * block_size_,
              "KVCacheManager: allocate_slots: computed.num_computed_tokens is not its blocks' "
              "tokens");
  const int64_t total = request.num_computed_tokens + computed.num_computed_tokens +
                        num_new_tokens;
  OCTET_CHECK(total <= request.num_tokens(), "KVCacheManager: allocate_slots: '",
              request.request_id, "' schedules ", total, " tokens of ", request.num_tokens());
  const int64_t num_required = (total + block_size_ - 1) / block_size_;
  OCTET_CHECK(num_required <= max_blocks_per_seq_, "KVCacheManager: allocate_slots: '",
              request.request_id, "' needs ", num_required,
              " blocks, more than max_model_len allows (", max_blocks_per_seq_, ")");
  const int64_t num_new_blocks = std::max<int64_t>(0, num_required - num_held - num_hit);
  // Hit blocks nobody holds sit in the free list: touching them uses up free blocks too.
  int64_t num_evictable_hits = 0;
  for (int32_t id : computed.block_ids)
    if (pool_.block(id).ref_cnt == 0) ++num_evictable_hits;
  if (num_new_blocks + num_evictable_hits > pool_.num_free_blocks()) return false;

  const bool first_allocation = num_held == 0 && request.num_computed_tokens == 0;
  RequestBlocks& rb = req_blocks_[request.request_id];
  pool_.touch(computed.block_ids);
  rb.block_ids.insert(rb.block_ids.end(), computed.block_ids.begin(), computed.block_ids.end());
  rb.num_cached_blocks += num_hit;
  auto fresh = pool_.get_new_blocks(num_new_blocks);
  OCTET_CHECK(fresh.has_value(), "KVCacheManager: allocate_slots: free blocks vanished");
  rb.block_ids.insert(rb.block_ids.end(), fresh->begin(), fresh->end());

  if (enable_prefix_caching_) {
    if (first_allocation && request.num_preemptions == 0) {
      prefix_cache_queries_ += request.num_tokens();
      prefix_cache_hits_ += computed.num_computed_tokens;
    }
    const int64_t num_full = total / block_size_;
    if (num_full > rb.num_cached_blocks) {
      update_block_hashes(request);
      pool_.cache_full_blocks(rb.block_ids, request.block_hashes, rb.num_cached_blocks,
                              num_full);
      rb.num_cached_blocks = num_full;
    }
  }
  return true;
}

void KVCacheManager::free(const Request& request) {
  const auto it = req_blocks_.find(request.request_id);
  if (it == req_blocks_.end()) return;
  std::vector<int32_t> reversed(it->second.block_ids.rbegin(), it->second.block_ids.rend());
  pool_.free_blocks(reversed);
  req_blocks_.erase(it);
}

const std::vector<int32_t>& KVCacheManager::get_block_ids(const std::string& request_id) const {
  static const std::vector<int32_t> kNone;
  const auto it = req_blocks_.find(request_id);
  return it == req_blocks_.end() ? kNone : it->second.block_ids;
}

}  // namespace octet

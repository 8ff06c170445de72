#include "engine/block_pool.h"

#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/common/check.h"

namespace octet {

BlockPool::BlockPool(int64_t num_blocks, bool enable_caching) : enable_caching_(enable_caching) {
  if (num_blocks < 2 || num_blocks > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("BlockPool: num_blocks must be in [2, 2^31 - 1] (block 0 is the "
                                "null block), got " + std::to_string(num_blocks));
  blocks_.resize(num_blocks);
  prev_.assign(num_blocks, -1);
  next_.assign(num_blocks, -1);
  for (int32_t id = 0; id < num_blocks; ++id) blocks_[id].block_id = id;
  for (int32_t id = 1; id < num_blocks; ++id) push_back(id);
}

void BlockPool::unlink(int32_t id) {
  const int32_t p = prev_[id], n = next_[id];
  if (p >= 0) next_[p] = n; else head_ = n;
  if (n >= 0) prev_[n] = p; else tail_ = p;
  prev_[id] = next_[id] = -1;
  --num_free_;
}

void BlockPool::push_back(int32_t id) {
  prev_[id] = tail_;
  next_[id] = -1;
  if (tail_ >= 0) next_[tail_] = id; else head_ = id;
  tail_ = id;
  ++num_free_;
}

void BlockPool::evict(int32_t id) {
  KVCacheBlock& b = blocks_[id];
  if (!b.block_hash) return;
  cached_.erase(*b.block_hash);
  b.block_hash.reset();
}

std::optional<std::vector<int32_t>> BlockPool::get_new_blocks(int64_t n) {
  OCTET_CHECK(n >= 0, "BlockPool: get_new_blocks: negative count (", n, ")");
  if (n > num_free_) return std::nullopt;
  std::vector<int32_t> ids;
  ids.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = head_;
    unlink(id);
    evict(id);
    blocks_[id].ref_cnt = 1;
    ids.push_back(id);
  }
  return ids;
}

void BlockPool::free_blocks(const std::vector<int32_t>& block_ids) {
  for (int32_t id : block_ids) {
    OCTET_CHECK(id > 0 && id < num_blocks(), "BlockPool: free_blocks: bad block id (", id,
                ")");
    KVCacheBlock& b = blocks_[id];
    OCTET_CHECK(b.ref_cnt > 0, "BlockPool: free_blocks: block is already free (", id, ")");
    if (--b.ref_cnt == 0) push_back(id);
  }
}

void BlockPool::touch(const std::vector<int32_t>& block_ids) {
  for (int32_t id : block_ids) {
    OCTET_CHECK(id > 0 && id < num_blocks(), "BlockPool: touch: bad block id (", id, ")");
    KVCacheBlock& b = blocks_[id];
    if (b.ref_cnt == 0) unlink(id);
    ++b.ref_cnt;
  }
}

void BlockPool::cache_full_blocks(const std::vector<int32_t>& block_ids,
                                  const std::vector<uint64_t>& block_hashes,
                                  int64_t num_cached_blocks, int64_t num_full_blocks) {
  if (!enable_caching_) return;
  OCTET_CHECK(num_cached_blocks >= 0 &&
                  num_full_blocks <= static_cast<int64_t>(block_ids.size()) &&
                  num_full_blocks <= static_cast<int64_t>(block_hashes.size()),
              "BlockPool: cache_full_blocks: range out of bounds (", num_full_blocks, ")");
  for (int64_t i = num_cached_blocks; i < num_full_blocks; ++i) {
    const int32_t id = block_ids[i];
    OCTET_CHECK(id > 0 && id < num_blocks(),
                "BlockPool: cache_full_blocks: bad block id (", id, ")");
    KVCacheBlock& b = blocks_[id];
    OCTET_CHECK(!b.block_hash, "BlockPool: cache_full_blocks: block is already cached (", id, ")");
    OCTET_CHECK(b.ref_cnt > 0, "BlockPool: cache_full_blocks: block is free (", id, ")");
    // A block with the same content cached earlier (two requests computed the same prefix
    // before either could hit) stays the one that is found; this block remains uncached.
    if (cached_.emplace(block_hashes[i], id).second) b.block_hash = block_hashes[i];
  }
}

std::optional<int32_t> BlockPool::get_cached_block(uint64_t block_hash) const {
  const auto it = cached_.find(block_hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::reset_prefix_cache() {
  for (KVCacheBlock& b : blocks_) b.block_hash.reset();
  cached_.clear();
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(num_blocks() - 1);
}

const KVCacheBlock& BlockPool::block(int32_t block_id) const {
  OCTET_CHECK(block_id >= 0 && block_id < num_blocks(),
              "BlockPool: block: bad block id (", block_id, ")");
  return blocks_[block_id];
}

std::vector<int32_t> BlockPool::free_block_ids() const {
  std::vector<int32_t> ids;
  ids.reserve(num_free_);
  for (int32_t id = head_; id >= 0; id = next_[id]) ids.push_back(id);
  return ids;
}

}  // namespace octet

#pragma once
// The KV block allocator: reference counts, an LRU free list and the prefix cache's
// hash -> block map (vLLM v1 vllm/v1/core/block_pool.py and FreeKVCacheBlockQueue in
// kv_cache_utils.py; nano-vllm engine/block_manager.py). Only bookkeeping: the memory is
// models/paged_kv_cache.h's, indexed by the same block ids.
//
// Invariants: block 0 is the null block (pads block tables; never allocated, freed or cached);
// a block is in the free list iff its ref_cnt is 0; a block has a hash iff the map points to it.
// A free block may keep its hash (its KV stays valid) until it is popped for reuse (eviction).
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace octet {

struct KVCacheBlock {
  int32_t block_id = 0;
  int32_t ref_cnt = 0;                    // requests holding the block
  std::optional<uint64_t> block_hash;     // set while the block is in the prefix cache
};

class BlockPool {
 public:
  /// num_blocks includes the null block 0: blocks 1..num_blocks-1 are usable and start in the
  /// free list in id order. Throws std::invalid_argument when num_blocks < 2 or > 2^31 - 1.
  BlockPool(int64_t num_blocks, bool enable_caching);

  /// Pops n blocks from the head of the free list (least recently freed first), each with
  /// ref_cnt 1; a popped block that was cached loses its hash (evicted). Returns nullopt and
  /// changes nothing when fewer than n blocks are free. n >= 0 (CHECKed).
  [[nodiscard]] std::optional<std::vector<int32_t>> get_new_blocks(int64_t n);

  /// Decrements each block's ref_cnt; blocks reaching 0 are appended to the free-list tail in
  /// the order given (callers pass a request's blocks last-first, so its tail blocks, the least
  /// likely to be shared, are evicted first). Freeing the null block or a free block is a CHECK.
  void free_blocks(const std::vector<int32_t>& block_ids);

  /// Prefix hit: ref_cnt++ on each block, taking blocks with ref_cnt 0 out of the free list.
  void touch(const std::vector<int32_t>& block_ids);

  /// Caches blocks block_ids[i] for i in [num_cached_blocks, num_full_blocks) under
  /// block_hashes[i] (their tokens are all known and their KV is computed by the end of the
  /// current step). A hash already mapped to another block keeps that block (this one stays
  /// uncached); a block that already has a hash is a CHECK. No-op when caching is disabled.
  void cache_full_blocks(const std::vector<int32_t>& block_ids,
                         const std::vector<uint64_t>& block_hashes, int64_t num_cached_blocks,
                         int64_t num_full_blocks);

  /// The block cached under hash, if any (it may be free, i.e. evictable, or in use).
  std::optional<int32_t> get_cached_block(uint64_t block_hash) const;

  /// Drops every hash (used and free blocks alike): later requests miss until blocks are cached
  /// again. Block ownership and the free-list order do not change.
  void reset_prefix_cache();

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  /// Blocks in the free list (cached-but-unused ones included).
  int64_t num_free_blocks() const { return num_free_; }
  /// Fraction of usable blocks in use: 1 - num_free_blocks / (num_blocks - 1), in [0, 1].
  double usage() const;
  /// Blocks currently holding a hash.
  int64_t num_cached_blocks() const { return static_cast<int64_t>(cached_.size()); }
  bool enable_caching() const { return enable_caching_; }
  const KVCacheBlock& block(int32_t block_id) const;
  /// The free list from head (next to be allocated) to tail, O(num_free_blocks); for tests and
  /// debugging.
  std::vector<int32_t> free_block_ids() const;

 private:
  void unlink(int32_t id);       // remove from the free list
  void push_back(int32_t id);    // append to the free-list tail
  void evict(int32_t id);        // drop the block's hash

  bool enable_caching_;
  std::vector<KVCacheBlock> blocks_;
  // Doubly linked free list over block ids; -1 = none. Removal from the middle is O(1).
  std::vector<int32_t> prev_, next_;
  int32_t head_ = -1, tail_ = -1;
  int64_t num_free_ = 0;
  std::unordered_map<uint64_t, int32_t> cached_;  // block hash -> block id
};

}  // namespace octet

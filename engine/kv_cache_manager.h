#pragma once
// Which KV blocks each request holds, and the prefix cache over them (vLLM v1
// vllm/v1/core/kv_cache_manager.py and the block hashing of kv_cache_utils.py). The scheduler
// asks for prefix hits and slots; the pool below does the counting. Pure host code.
//
// Hybrid models (models/kv_cache_layout.h): one block table per KV cache group, all drawing on
// one pool. A group's table is append-only while the request holds blocks: slot of token
// position p is block_ids[p / bs] * bs + p % bs (bs: the group's block size); in a
// sliding-window group the entries whose blocks the window has passed are set to the null
// block 0 and the blocks go back to the pool (vLLM v1 SlidingWindowManager).
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request.h"
#include "models/kv_cache_layout.h"

namespace octet {

/// Chained hash of one full block: hash(parent_block_hash, its block_size token ids, extra_key).
/// Definition (stable, so tests can recompute it): FNV-1a 64 (offset 0xcbf29ce484222325, prime
/// 0x100000001b3) over the little-endian bytes of parent_block_hash (8), extra_key (8) and each
/// token id (4, as uint32), then splitmix64's finalizer (Steele et al. 2014) to spread the bits.
/// The first block's parent is 0. Equal hashes are taken as equal prefixes: with n cached
/// blocks a false hit has probability about n^2 / 2^65.
uint64_t hash_block_tokens(uint64_t parent_block_hash, const int32_t* token_ids,
                           int64_t num_tokens, uint64_t extra_key);

/// A prefix hit: per KV cache group, the cached blocks of a request's longest cached prefix,
/// and the tokens they hold (for each group g, block_ids[g].size() * its block size). In a
/// sliding-window group the blocks before the window of the first computed position are the
/// null block 0. Empty (no groups) when nothing hit.
struct ComputedBlocks {
  std::vector<std::vector<int32_t>> block_ids;  // [group][block]
  int64_t num_computed_tokens = 0;
};

class KVCacheManager {
 public:
  /// num_blocks: including the null block 0. block_size: tokens per block. cache_salt: mixed
  /// into every block hash (the engine folds in the layer dtypes and KV scales, so that a hit
  /// never mixes cache formats). max_model_len: tokens per request at most, so a request never
  /// holds more than max_blocks_per_seq() = ceil(max_model_len / block_size) blocks.
  /// Throws std::invalid_argument for num_blocks < 2, block_size < 1 or max_model_len < 1.
  KVCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching,
                 uint64_t cache_salt, int64_t max_model_len);
  /// The same for the groups of `layout` (their block sizes, windows): block_size is the
  /// smallest group block size, and every group's block size must be a multiple of it
  /// (std::invalid_argument otherwise). Group g > 0 hashes its block i as a mix of g and the
  /// chained hash of the first (i + 1) * block_size(g) tokens.
  KVCacheManager(int64_t num_blocks, const KVCacheLayout& layout, bool enable_prefix_caching,
                 uint64_t cache_salt, int64_t max_model_len);

  /// Extends request.block_hashes to one hash per full block of its tokens (prompt + output);
  /// no-op when prefix caching is disabled.
  void update_block_hashes(Request& request) const;

  /// The longest prefix of the request's full blocks that is cached, for a request holding no
  /// blocks (waiting or preempted): every full-attention group holds all its blocks and every
  /// sliding-window group the blocks of the window before it. At most num_tokens - 1 tokens
  /// hit, rounded down to whole blocks of every group, so at least one token is computed (its
  /// logits are needed). Changes nothing: pass
  /// the result to allocate_slots. Empty when prefix caching is disabled or the request asks
  /// for prompt_logprobs (every prompt position must be computed for its logits).
  ComputedBlocks get_computed_blocks(const Request& request) const;

  /// Makes room for num_new_tokens more tokens after request.num_computed_tokens (plus, on the
  /// first allocation, the prefix hit `computed` from get_computed_blocks): first frees the
  /// sliding-window groups' blocks that lie wholly before the window of the first position to
  /// compute (their entries become 0), then takes the hit blocks out of the free list and
  /// allocates, per group, ceil(total / block size) - held new blocks. Returns false and
  /// changes nothing else when not enough blocks are free. Then caches the
  /// request's blocks that are full of tokens whose KV is computed by the end of this step
  /// (those before num_computed + hit + num_new_tokens), as vLLM: a request admitted later in
  /// the same step may hit them, so the model runner must write the whole batch's K/V of a
  /// layer before that layer's attention reads it (Backend::paged_attention's order).
  /// On the first allocation of a request that was never preempted, adds num_tokens to the
  /// prefix-cache queries and the hit to the hits (vLLM counts preempted requests apart; octet
  /// leaves them out; a failed allocation counts nothing).
  /// CHECKs: num_computed + hit + num_new_tokens <= num_tokens, <= max_model_len in blocks, a
  /// hit only with no blocks held.
  [[nodiscard]] bool allocate_slots(Request& request, int64_t num_new_tokens,
                                    const ComputedBlocks& computed = {});

  /// Returns all the request's blocks to the pool, group by group, last block first (evicted first), and
  /// forgets the request. Its KV stays findable through the hashes until evicted. Does not
  /// change the Request. No-op for a request holding no blocks.
  void free(const Request& request);

  /// The request's block table in `group` (empty when it holds none). Valid until its next
  /// allocate_slots or free.
  const std::vector<int32_t>& get_block_ids(const std::string& request_id,
                                            int64_t group = 0) const;

  /// Blocks a request of num_tokens tokens holds at most, computing at most chunk tokens a
  /// step (blocks_held of the layout): what admission checks and "sequences that fit" count.
  int64_t blocks_held(int64_t num_tokens, int64_t chunk) const;

  /// Drops all hashes (BlockPool::reset_prefix_cache).
  void reset_prefix_cache() { pool_.reset_prefix_cache(); }

  double usage() const { return pool_.usage(); }
  int64_t num_free_blocks() const { return pool_.num_free_blocks(); }
  int64_t num_blocks() const { return pool_.num_blocks(); }
  /// The smallest group block size (prefix hashes are per block of it).
  int64_t block_size() const { return block_size_; }
  const KVCacheLayout& layout() const { return layout_; }
  int64_t num_groups() const { return layout_.num_groups(); }
  int64_t max_model_len() const { return max_model_len_; }
  int64_t max_blocks_per_seq() const { return max_blocks_per_seq_; }
  bool enable_prefix_caching() const { return enable_prefix_caching_; }
  uint64_t cache_salt() const { return cache_salt_; }
  /// Prompt tokens looked up in / found in the prefix cache (vLLM's prefix_cache_queries and
  /// prefix_cache_hits, in tokens); both 0 with prefix caching disabled.
  int64_t prefix_cache_queries() const { return prefix_cache_queries_; }
  int64_t prefix_cache_hits() const { return prefix_cache_hits_; }
  const BlockPool& block_pool() const { return pool_; }

 private:
  struct RequestBlocks {
    std::vector<std::vector<int32_t>> block_ids;  // [group]; 0 = freed out of the window
    std::vector<int64_t> num_cached_blocks;       // [group] leading blocks offered to the cache
  };
  // Group g's hash of its block i, from the request's chained hashes (block_size_ tokens each).
  uint64_t group_hash(const std::vector<uint64_t>& hashes, size_t g, int64_t i) const;
  // The request's chained hashes of its first n blocks (computed past request.block_hashes).
  std::vector<uint64_t> prefix_hashes(const Request& request, int64_t n) const;

  KVCacheLayout layout_;
  int64_t block_size_;
  bool enable_prefix_caching_;
  uint64_t cache_salt_;
  int64_t max_model_len_;
  int64_t max_blocks_per_seq_;
  BlockPool pool_;
  std::unordered_map<std::string, RequestBlocks> req_blocks_;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
};

}  // namespace octet

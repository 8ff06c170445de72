// KVCacheManager: the block hash against independently computed values, prefix hits with exact
// block ids and token counts, the "at least one token computed" rule, salts, caching only of
// computed tokens, and all-or-nothing allocation. Expected values are derived by hand in the
// comments (block_size 4; a fresh pool hands out blocks 1, 2, 3, ... in order).
#include <catch2/catch.hpp>

#include <numeric>
#include <stdexcept>
#include <vector>

#include "engine/kv_cache_manager.h"

using namespace octet;
using Ids = std::vector<int32_t>;

namespace {

std::vector<int32_t> iota_tokens(int32_t first, int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("block hash matches the documented definition", "[kv_cache_manager]") {
  // Values printed by scripts/block_hash_reference.py (FNV-1a 64 + splitmix64 finalizer,
  // written in Python from the definition in kv_cache_manager.h).
  const std::vector<int32_t> b0{1, 2, 3, 4}, b1{5, 6, 7, 8}, neg{-1, 0, 128000, 7};
  const uint64_t h0 = hash_block_tokens(0, b0.data(), 4, 0);
  CHECK(h0 == 0x5f11a64e2675c548ull);
  CHECK(hash_block_tokens(h0, b1.data(), 4, 0) == 0xc14d5ae4dc6973bdull);
  CHECK(hash_block_tokens(0, b0.data(), 4, 0x1234) == 0x3012bdd647cda816ull);
  CHECK(hash_block_tokens(0, neg.data(), 4, 0) == 0x436088450d1419f5ull);

  // A request's hashes chain block to block and cover full blocks only.
  KVCacheManager kv(10, 4, true, 0, 64);
  Request r("r", iota_tokens(1, 10));  // tokens 1..10: two full blocks
  kv.update_block_hashes(r);
  CHECK(r.block_hashes == std::vector<uint64_t>{0x5f11a64e2675c548ull, 0xc14d5ae4dc6973bdull});
  r.append_output_token(11);
  r.append_output_token(12);  // 12 tokens: a third full block, prompt and output mixed
  kv.update_block_hashes(r);
  REQUIRE(r.block_hashes.size() == 3);
  const std::vector<int32_t> b2{9, 10, 11, 12};
  CHECK(r.block_hashes[2] == hash_block_tokens(r.block_hashes[1], b2.data(), 4, 0));
}

TEST_CASE("two requests sharing a two-block prefix", "[kv_cache_manager]") {
  KVCacheManager kv(10, 4, true, 0, 64);  // blocks 1..9
  Request a("a", iota_tokens(1, 10));     // 1..10: blocks [1..4][5..8][9 10]
  Request b("b", concat(iota_tokens(1, 8), {20, 21, 22}));  // shares [1..4][5..8]

  ComputedBlocks hit_a = kv.get_computed_blocks(a);
  CHECK(hit_a.block_ids.empty());
  CHECK(hit_a.num_computed_tokens == 0);
  REQUIRE(kv.allocate_slots(a, 10, hit_a));  // ceil(10/4) = 3 blocks
  CHECK(kv.get_block_ids("a") == Ids{1, 2, 3});
  a.num_computed_tokens = 10;  // as Scheduler::update
  // Full blocks 0 and 1 (tokens 0..7) are cached; block 3 holds 2 tokens and is not.
  CHECK(kv.block_pool().num_cached_blocks() == 2);
  CHECK(kv.block_pool().block(1).block_hash == a.block_hashes[0]);
  CHECK(kv.block_pool().block(2).block_hash == a.block_hashes[1]);

  ComputedBlocks hit_b = kv.get_computed_blocks(b);
  CHECK(hit_b.block_ids.at(0) == Ids{1, 2});
  CHECK(hit_b.num_computed_tokens == 8);
  REQUIRE(kv.allocate_slots(b, 3, hit_b));  // 8 + 3 = 11 tokens: 3 blocks, 1 new
  CHECK(kv.get_block_ids("b") == Ids{1, 2, 4});
  CHECK(kv.block_pool().block(1).ref_cnt == 2);
  CHECK(kv.block_pool().block(2).ref_cnt == 2);
  CHECK(kv.block_pool().block(4).ref_cnt == 1);
  CHECK(kv.num_free_blocks() == 5);  // 9 - {1, 2, 3, 4}
  CHECK(kv.usage() == Approx(4.0 / 9.0));
  // Queries: 10 + 11 prompt tokens; hits: 8.
  CHECK(kv.prefix_cache_queries() == 21);
  CHECK(kv.prefix_cache_hits() == 8);

  // Freed last block first: a = [1, 2, 3] -> 3 reaches 0, 2 and 1 stay held by b.
  kv.free(a);
  CHECK(kv.get_block_ids("a").empty());
  CHECK(kv.block_pool().free_block_ids() == Ids{5, 6, 7, 8, 9, 3});
  kv.free(b);  // [1, 2, 4] -> 4, 2, 1 appended
  CHECK(kv.block_pool().free_block_ids() == Ids{5, 6, 7, 8, 9, 3, 4, 2, 1});
  // Still cached: a third request hits them from the free list.
  Request c("c", concat(iota_tokens(1, 8), {30}));
  ComputedBlocks hit_c = kv.get_computed_blocks(c);
  CHECK(hit_c.block_ids.at(0) == Ids{1, 2});
  REQUIRE(kv.allocate_slots(c, 1, hit_c));
  CHECK(kv.get_block_ids("c") == Ids{1, 2, 5});
  CHECK(kv.block_pool().free_block_ids() == Ids{6, 7, 8, 9, 3, 4});
  CHECK(kv.prefix_cache_queries() == 30);
  CHECK(kv.prefix_cache_hits() == 16);
}

TEST_CASE("a full-prompt hit still computes one token", "[kv_cache_manager]") {
  KVCacheManager kv(10, 4, true, 0, 64);
  Request a("a", iota_tokens(1, 8));  // exactly two full blocks
  REQUIRE(kv.allocate_slots(a, 8, kv.get_computed_blocks(a)));
  CHECK(kv.get_block_ids("a") == Ids{1, 2});
  CHECK(kv.block_pool().num_cached_blocks() == 2);

  // Same 8 tokens: at most 8 - 1 = 7 tokens may hit, rounded down to 1 block.
  Request b("b", iota_tokens(1, 8));
  ComputedBlocks hit = kv.get_computed_blocks(b);
  CHECK(hit.block_ids.at(0) == Ids{1});
  CHECK(hit.num_computed_tokens == 4);
  REQUIRE(kv.allocate_slots(b, 4, hit));
  CHECK(kv.get_block_ids("b") == Ids{1, 3});
  // b's second block has the content of a's block 2, which stays the cached one.
  CHECK(kv.block_pool().get_cached_block(b.block_hashes[1]) == 2);
  CHECK_FALSE(kv.block_pool().block(3).block_hash);

  // 9 tokens: up to 8 may hit, so both blocks.
  Request c("c", iota_tokens(1, 9));
  ComputedBlocks hit_c = kv.get_computed_blocks(c);
  CHECK(hit_c.block_ids.at(0) == Ids{1, 2});
  CHECK(hit_c.num_computed_tokens == 8);

  // A 1-token request never hits.
  Request d("d", {1});
  CHECK(kv.get_computed_blocks(d).block_ids.empty());
}

TEST_CASE("different cache salts never share blocks", "[kv_cache_manager]") {
  KVCacheManager bf16(10, 4, true, /*cache_salt=*/0, 64);
  KVCacheManager fp8(10, 4, true, /*cache_salt=*/0x1234, 64);
  Request r0("r", iota_tokens(1, 8)), r1("r", iota_tokens(1, 8));
  bf16.update_block_hashes(r0);
  fp8.update_block_hashes(r1);
  CHECK(r0.block_hashes[0] == 0x5f11a64e2675c548ull);  // scripts/block_hash_reference.py
  CHECK(r1.block_hashes[0] == 0x3012bdd647cda816ull);
  CHECK(r0.block_hashes[1] != r1.block_hashes[1]);

  // Blocks cached under one salt are not found under the other.
  REQUIRE(bf16.allocate_slots(r0, 8, {}));
  Request probe("p", iota_tokens(1, 9));
  CHECK(bf16.get_computed_blocks(probe).num_computed_tokens == 8);
  CHECK(bf16.block_pool().get_cached_block(r1.block_hashes[0]) == std::nullopt);
}

TEST_CASE("only tokens computed by the end of the step are cached", "[kv_cache_manager]") {
  KVCacheManager kv(10, 4, true, 0, 64);
  Request a("a", iota_tokens(1, 10));
  // Chunk 1: 3 tokens -> 1 block, not full of computed tokens even though its 4 tokens are known.
  REQUIRE(kv.allocate_slots(a, 3, kv.get_computed_blocks(a)));
  CHECK(kv.get_block_ids("a") == Ids{1});
  CHECK(kv.block_pool().num_cached_blocks() == 0);
  a.num_computed_tokens = 3;
  // Chunk 2: tokens 3..7 -> 8 tokens, 2 blocks, both full.
  REQUIRE(kv.allocate_slots(a, 5));
  CHECK(kv.get_block_ids("a") == Ids{1, 2});
  CHECK(kv.block_pool().num_cached_blocks() == 2);
  a.num_computed_tokens = 8;
  // Chunk 3: tokens 8, 9 -> a third block, partial.
  REQUIRE(kv.allocate_slots(a, 2));
  CHECK(kv.get_block_ids("a") == Ids{1, 2, 3});
  CHECK(kv.block_pool().num_cached_blocks() == 2);
  a.num_computed_tokens = 10;
  // Decode: tokens 10 and 11 are sampled outputs; block 3 fills when token 11 is scheduled.
  a.append_output_token(50);
  REQUIRE(kv.allocate_slots(a, 1));
  CHECK(kv.block_pool().num_cached_blocks() == 2);
  a.num_computed_tokens = 11;
  a.append_output_token(51);
  REQUIRE(kv.allocate_slots(a, 1));
  CHECK(kv.block_pool().num_cached_blocks() == 3);
  CHECK(kv.block_pool().block(3).block_hash == a.block_hashes[2]);
  // Stats count the first allocation only: 10 prompt tokens queried, 0 hit.
  CHECK(kv.prefix_cache_queries() == 10);
  CHECK(kv.prefix_cache_hits() == 0);
}

TEST_CASE("allocation is all or nothing, evictable hit blocks count as used", "[kv_cache_manager]") {
  KVCacheManager kv(5, 4, true, 0, 64);  // blocks 1..4
  Request a("a", iota_tokens(1, 12));
  REQUIRE(kv.allocate_slots(a, 12, kv.get_computed_blocks(a)));
  CHECK(kv.get_block_ids("a") == Ids{1, 2, 3});
  kv.free(a);
  CHECK(kv.block_pool().free_block_ids() == Ids{4, 3, 2, 1});

  // 20 tokens: hits 3 cached blocks (12 tokens) and needs 2 more: 3 + 2 = 5 > 4 free.
  Request big("big", concat(iota_tokens(1, 12), iota_tokens(100, 8)));
  ComputedBlocks hit = kv.get_computed_blocks(big);
  CHECK(hit.block_ids.at(0) == Ids{1, 2, 3});
  CHECK_FALSE(kv.allocate_slots(big, 8, hit));
  CHECK(kv.get_block_ids("big").empty());
  CHECK(kv.block_pool().free_block_ids() == Ids{4, 3, 2, 1});
  CHECK(kv.block_pool().num_cached_blocks() == 3);
  CHECK(kv.prefix_cache_queries() == 12);  // the failed attempt is not counted
  CHECK(kv.prefix_cache_hits() == 0);

  // 16 tokens: 3 hit + 1 new = 4 fits exactly.
  Request fits("fits", concat(iota_tokens(1, 12), iota_tokens(100, 4)));
  ComputedBlocks hit2 = kv.get_computed_blocks(fits);
  REQUIRE(kv.allocate_slots(fits, 4, hit2));
  CHECK(kv.get_block_ids("fits") == Ids{1, 2, 3, 4});
  CHECK(kv.num_free_blocks() == 0);
  CHECK(kv.usage() == 1.0);
  CHECK(kv.prefix_cache_queries() == 28);
  CHECK(kv.prefix_cache_hits() == 12);

  // Without prefix caching nothing hits and nothing is counted.
  KVCacheManager off(5, 4, false, 0, 64);
  Request x("x", iota_tokens(1, 8));
  REQUIRE(off.allocate_slots(x, 8, off.get_computed_blocks(x)));
  off.free(x);
  Request y("y", iota_tokens(1, 8));
  CHECK(off.get_computed_blocks(y).block_ids.empty());
  CHECK(off.prefix_cache_queries() == 0);
  CHECK(y.block_hashes.empty());

  CHECK_THROWS_AS(KVCacheManager(1, 4, true, 0, 64), std::invalid_argument);
  CHECK_THROWS_AS(KVCacheManager(8, 0, true, 0, 64), std::invalid_argument);
  CHECK_THROWS_AS(KVCacheManager(8, 4, true, 0, 0), std::invalid_argument);
  CHECK(KVCacheManager(8, 4, true, 0, 17).max_blocks_per_seq() == 5);
}

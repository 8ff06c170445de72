// BlockPool: exact block ids and free-list order through allocation, free, prefix hits and
// eviction (the style of vLLM's tests/v1/core/test_prefix_caching.py). Expected values are
// derived by hand in the comments from the documented rules: blocks 1..N-1 start in id order,
// allocation pops the head, freeing appends to the tail in the order given.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <vector>

#include "engine/block_pool.h"

using namespace octet;
using Ids = std::vector<int32_t>;

TEST_CASE("block pool: allocation order, failure changes nothing, null block", "[block_pool]") {
  BlockPool pool(6, /*enable_caching=*/true);  // usable blocks 1..5
  CHECK(pool.num_blocks() == 6);
  CHECK(pool.num_free_blocks() == 5);
  CHECK(pool.free_block_ids() == Ids{1, 2, 3, 4, 5});
  CHECK(pool.usage() == 0.0);

  auto a = pool.get_new_blocks(2);
  REQUIRE(a);
  CHECK(*a == Ids{1, 2});
  CHECK(pool.block(1).ref_cnt == 1);
  CHECK(pool.block(2).ref_cnt == 1);
  CHECK(pool.free_block_ids() == Ids{3, 4, 5});
  CHECK(pool.usage() == Approx(2.0 / 5.0));  // 1 - 3/5

  // 4 > 3 free: nothing changes.
  CHECK_FALSE(pool.get_new_blocks(4));
  CHECK(pool.free_block_ids() == Ids{3, 4, 5});
  CHECK(pool.block(3).ref_cnt == 0);

  auto empty = pool.get_new_blocks(0);
  REQUIRE(empty);
  CHECK(empty->empty());

  auto b = pool.get_new_blocks(3);
  REQUIRE(b);
  CHECK(*b == Ids{3, 4, 5});
  CHECK(pool.num_free_blocks() == 0);
  CHECK(pool.usage() == 1.0);
  CHECK_FALSE(pool.get_new_blocks(1));  // the null block is never handed out
  CHECK(pool.block(0).ref_cnt == 0);

  // Requests free their blocks last-first: a = [1, 2] -> {2, 1}, b = [3, 4, 5] -> {5, 4, 3}.
  pool.free_blocks({2, 1});
  CHECK(pool.free_block_ids() == Ids{2, 1});
  pool.free_blocks({5, 4, 3});
  CHECK(pool.free_block_ids() == Ids{2, 1, 5, 4, 3});
  auto c = pool.get_new_blocks(2);
  REQUIRE(c);
  CHECK(*c == Ids{2, 1});  // least recently freed first
  CHECK(pool.free_block_ids() == Ids{5, 4, 3});
}

TEST_CASE("block pool: shared blocks, touch takes cached blocks out of the free list",
          "[block_pool]") {
  BlockPool pool(6, true);
  auto a = pool.get_new_blocks(3);
  REQUIRE(a);
  REQUIRE(*a == Ids{1, 2, 3});
  // Blocks 0 and 1 of the request are full: cached under 100 and 200; block 3 is partial.
  pool.cache_full_blocks(*a, {100, 200}, 0, 2);
  CHECK(pool.get_cached_block(100) == 1);
  CHECK(pool.get_cached_block(200) == 2);
  CHECK_FALSE(pool.get_cached_block(300));
  CHECK(pool.block(1).block_hash == 100u);
  CHECK_FALSE(pool.block(3).block_hash);
  CHECK(pool.num_cached_blocks() == 2);

  pool.free_blocks({3, 2, 1});
  CHECK(pool.free_block_ids() == Ids{4, 5, 3, 2, 1});
  // Free cached blocks keep their hash (evictable, not evicted).
  CHECK(pool.get_cached_block(100) == 1);
  CHECK(pool.get_cached_block(200) == 2);

  // A prefix hit on [1, 2]: both leave the free list, the rest keeps its order.
  pool.touch({1, 2});
  CHECK(pool.free_block_ids() == Ids{4, 5, 3});
  CHECK(pool.block(1).ref_cnt == 1);
  pool.touch({1});  // a second request shares block 1
  CHECK(pool.block(1).ref_cnt == 2);
  CHECK(pool.free_block_ids() == Ids{4, 5, 3});

  pool.free_blocks({2, 1});  // block 2 -> 0 (free), block 1 -> 1 (still held)
  CHECK(pool.block(2).ref_cnt == 0);
  CHECK(pool.block(1).ref_cnt == 1);
  CHECK(pool.free_block_ids() == Ids{4, 5, 3, 2});
  CHECK(pool.num_free_blocks() == 4);
}

TEST_CASE("block pool: eviction pops the least recently freed cached block", "[block_pool]") {
  BlockPool pool(5, true);  // blocks 1..4
  auto a = pool.get_new_blocks(4);
  REQUIRE(a);
  pool.cache_full_blocks(*a, {11, 12, 13, 14}, 0, 4);
  CHECK(pool.num_cached_blocks() == 4);
  // Request x held [1, 2] and finishes first, request y held [3, 4].
  pool.free_blocks({2, 1});
  pool.free_blocks({4, 3});
  CHECK(pool.free_block_ids() == Ids{2, 1, 4, 3});

  auto b = pool.get_new_blocks(1);
  REQUIRE(b);
  CHECK(*b == Ids{2});
  CHECK_FALSE(pool.get_cached_block(12));  // evicted
  CHECK_FALSE(pool.block(2).block_hash);
  CHECK(pool.get_cached_block(11) == 1);
  CHECK(pool.num_cached_blocks() == 3);

  auto c = pool.get_new_blocks(2);
  REQUIRE(c);
  CHECK(*c == Ids{1, 4});
  CHECK_FALSE(pool.get_cached_block(11));
  CHECK_FALSE(pool.get_cached_block(14));
  CHECK(pool.get_cached_block(13) == 3);  // the only survivor
  CHECK(pool.num_cached_blocks() == 1);
  CHECK(pool.free_block_ids() == Ids{3});
}

TEST_CASE("block pool: a hash cached twice keeps the first block", "[block_pool]") {
  BlockPool pool(4, true);
  auto a = pool.get_new_blocks(2);
  REQUIRE(a);
  pool.cache_full_blocks({1}, {7}, 0, 1);
  pool.cache_full_blocks({2}, {7}, 0, 1);  // same content computed twice
  CHECK(pool.get_cached_block(7) == 1);
  CHECK_FALSE(pool.block(2).block_hash);
  CHECK(pool.num_cached_blocks() == 1);
  // Only blocks [num_cached_blocks, num_full_blocks) are cached.
  auto b = pool.get_new_blocks(1);
  REQUIRE(b);
  REQUIRE(*b == Ids{3});
  pool.cache_full_blocks({1, 3}, {7, 8}, 1, 2);
  CHECK(pool.get_cached_block(8) == 3);
  CHECK(pool.get_cached_block(7) == 1);
}

TEST_CASE("block pool: caching disabled, reset, bad sizes", "[block_pool]") {
  BlockPool off(4, false);
  auto a = off.get_new_blocks(2);
  REQUIRE(a);
  off.cache_full_blocks(*a, {1, 2}, 0, 2);
  CHECK_FALSE(off.get_cached_block(1));
  CHECK(off.num_cached_blocks() == 0);

  BlockPool pool(4, true);
  auto b = pool.get_new_blocks(3);
  REQUIRE(b);
  pool.cache_full_blocks(*b, {5, 6, 7}, 0, 3);
  pool.free_blocks({3});
  pool.reset_prefix_cache();
  CHECK(pool.num_cached_blocks() == 0);
  CHECK_FALSE(pool.get_cached_block(5));
  CHECK_FALSE(pool.block(3).block_hash);
  CHECK(pool.free_block_ids() == Ids{3});
  CHECK(pool.block(1).ref_cnt == 1);

  CHECK_THROWS_AS(BlockPool(1, true), std::invalid_argument);
  CHECK_THROWS_AS(BlockPool(0, false), std::invalid_argument);
  BlockPool two(2, true);  // one usable block
  CHECK(two.free_block_ids() == Ids{1});
}

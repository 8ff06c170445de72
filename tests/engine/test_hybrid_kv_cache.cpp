// Hybrid KV cache groups (models/kv_cache_layout.h, issue 27): the layout of a Gemma 3-like
// model, per-group block sizes for mixed dtypes, the fallbacks, blocks held, and the
// KVCacheManager freeing a sliding-window group's blocks with exact block ids. Expected values
// are derived by hand in the comments (block_size 4; a fresh pool hands out 1, 2, 3, ...).
#include <catch2/catch.hpp>

#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"
#include "models/kv_cache_layout.h"
#include "models/paged_kv_cache.h"

using namespace octet;
using Ids = std::vector<int32_t>;
using Layers = std::vector<int64_t>;

namespace {

// Gemma 3 270M's pattern: 18 layers, every sixth (5, 11, 17) global, the rest window 512.
std::vector<KVLayerSpec> gemma_like(DType window_dtype, DType global_dtype) {
  std::vector<KVLayerSpec> layers(18);
  for (int l = 0; l < 18; ++l) {
    const bool global = l % 6 == 5;
    layers[l].dtype = global ? global_dtype : window_dtype;
    layers[l].sliding_window = global ? 0 : 512;
  }
  return layers;
}

KVCacheLayout two_groups(int64_t window, int64_t bs = 4) {
  KVCacheLayout layout;
  layout.groups = {KVCacheGroup{0, bs, {1}}, KVCacheGroup{window, bs, {0}}};
  layout.layer_group = {1, 0};
  layout.layer_slot = {0, 0};
  return layout;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> iota_tokens(int32_t first, int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// The engine's step for one request: its scheduled tokens computed, one sampled token
// appended when they reached its end.
void compute(Request& r, int64_t n) {
  r.num_computed_tokens += n;
  if (r.num_computed_tokens == r.num_tokens()) r.append_output_token(1000);
}

}  // namespace

TEST_CASE("hybrid layout: Gemma 3's 5:1 pattern in groups of three", "[hybrid_kv]") {
  const KVCacheLayout l = hybrid_kv_cache_layout(gemma_like(DType::FP8_E4M3, DType::FP8_E4M3),
                                                 16, 1, 256, true);
  // 3 global and 15 window layers: gcd 3, so one full group and five window groups of three;
  // full attention first, then the window layers in layer order.
  REQUIRE(l.num_groups() == 6);
  CHECK(l.num_slots() == 3);
  CHECK(l.groups[0].sliding_window == 0);
  CHECK(l.groups[0].layers == Layers{5, 11, 17});
  CHECK(l.groups[1].layers == Layers{0, 1, 2});
  CHECK(l.groups[2].layers == Layers{3, 4, 6});
  CHECK(l.groups[5].layers == Layers{14, 15, 16});
  for (int g = 1; g < 6; ++g) CHECK(l.groups[g].sliding_window == 512);
  for (const KVCacheGroup& g : l.groups) CHECK(g.block_size == 16);
  CHECK(l.layer_group[11] == 0);
  CHECK(l.layer_slot[11] == 1);
  CHECK(l.layer_group[6] == 2);
  CHECK(l.layer_slot[6] == 2);
  CHECK(l.hybrid());
  // One block holds three layers' pages: 3 x 2 (K, V) x 16 tokens x 256 bytes.
  const std::vector<KVLayerSpec> specs = gemma_like(DType::FP8_E4M3, DType::FP8_E4M3);
  std::vector<KVLayerSpec> with_scales = specs;
  for (KVLayerSpec& s : with_scales) s.k_scale = s.v_scale = {1.0f};
  CHECK(PagedKVCache::bytes_per_block(l, 1, 256, with_scales) == 3 * 2 * 16 * 256);
}

TEST_CASE("hybrid layout: bf16 window layers and fp8 global layers share pages exactly",
          "[hybrid_kv]") {
  // --kv-cache-dtype fp8 with sliding_window skipped: a global page holds twice the tokens of
  // a bf16 window page in the same bytes, so the full group's blocks hold 32 tokens.
  const std::vector<KVLayerSpec> specs = gemma_like(DType::BF16, DType::FP8_E4M3);
  const KVCacheLayout l = hybrid_kv_cache_layout(specs, 16, 1, 256, true);
  REQUIRE(l.num_groups() == 6);
  CHECK(l.groups[0].block_size == 32);
  CHECK(l.groups[1].block_size == 16);
  CHECK(l.base_block_size() == 16);
  // Every slot is exactly full: 16 x 256 x 2 bytes = 32 x 256 x 1 bytes; no padding.
  std::vector<KVLayerSpec> with_scales = specs;
  for (KVLayerSpec& s : with_scales) s.k_scale = s.v_scale = {1.0f};
  CHECK(PagedKVCache::bytes_per_block(l, 1, 256, with_scales) == 3 * 2 * 16 * 256 * 2);
}

TEST_CASE("hybrid layout: fp8_per_token_head window layers beside bf16 global layers",
          "[hybrid_kv]") {
  // --kv-cache-dtype fp8_per_token_head --kv-cache-dtype-skip-layers 5,11,17: the FP8 values
  // take 32-token blocks in a bf16 page's bytes; their FP32 scales (one per token and head)
  // sit in each slot's scale buffer, sized for the per-token-head group's 32 tokens.
  std::vector<KVLayerSpec> pth = gemma_like(DType::FP8_E4M3, DType::BF16);
  for (KVLayerSpec& s : pth) {
    if (s.sliding_window > 0) s.per_token_head = true;
    s.k_scale = s.v_scale = {1.0f};
  }
  const KVCacheLayout l = hybrid_kv_cache_layout(pth, 16, 1, 256, true);
  REQUIRE(l.num_groups() == 6);
  CHECK(l.groups[0].block_size == 16);  // bf16 global
  CHECK(l.groups[1].block_size == 32);  // FP8 window
  // 3 slots x K and V x (16 x 256 x 2 value bytes + 32 x 1 head x 4 scale bytes).
  CHECK(PagedKVCache::bytes_per_block(l, 1, 256, pth) == 3 * 2 * (16 * 256 * 2 + 32 * 4));
}

TEST_CASE("hybrid layout: fallbacks to one group", "[hybrid_kv]") {
  const std::vector<KVLayerSpec> gemma = gemma_like(DType::BF16, DType::BF16);
  const KVCacheLayout off = hybrid_kv_cache_layout(gemma, 16, 1, 256, false);
  REQUIRE(off.num_groups() == 1);
  CHECK(off.groups[0].sliding_window == 0);  // mixed windows: nothing freed
  CHECK(off.groups[0].layers.size() == 18);
  CHECK(off.note.find("--disable-hybrid-kv-cache-manager") != std::string::npos);
  CHECK_FALSE(off.hybrid());


  // One window on every layer (Mistral): one group with that window, freed behind it.
  std::vector<KVLayerSpec> mistral(4);
  for (KVLayerSpec& s : mistral) s.sliding_window = 4096;
  const KVCacheLayout m = hybrid_kv_cache_layout(mistral, 16, 8, 128, true);
  REQUIRE(m.num_groups() == 1);
  CHECK(m.groups[0].sliding_window == 4096);
  CHECK(m.hybrid());

  // Full attention only (Llama): one group, nothing freed.
  const KVCacheLayout llama = hybrid_kv_cache_layout(std::vector<KVLayerSpec>(4), 16, 8, 128, true);
  REQUIRE(llama.num_groups() == 1);
  CHECK_FALSE(llama.hybrid());
}

TEST_CASE("hybrid layout: blocks held by a long sequence", "[hybrid_kv]") {
  KVCacheGroup full{0, 16, {0}}, window{512, 16, {1}};
  CHECK(group_blocks_held(full, 32768, 1) == 2048);
  // Positions [p - 511, p] span 512 tokens: at most 32 + 1 blocks of 16 when misaligned.
  CHECK(group_blocks_held(window, 32768, 1) == 33);
  // A 2048-token chunk adds its own blocks: (511 + 2048) / 16 rounded up, + 1.
  CHECK(group_blocks_held(window, 32768, 2048) == 161);
  CHECK(group_blocks_held(window, 100, 2048) == 7);  // never more than the sequence's blocks
  // Gemma 3 at 32K: 1 full + 5 window groups hold 2048 + 5 x 33 = 2213 blocks, where keeping
  // every block would take 6 x 2048 = 12288: 5.55x the sequences fit.
  const KVCacheLayout l = hybrid_kv_cache_layout(gemma_like(DType::FP8_E4M3, DType::FP8_E4M3),
                                                 16, 1, 256, true);
  CHECK(blocks_held(l, 32768, 1) == 2213);
}

TEST_CASE("hybrid manager: a window group frees the blocks its window passed",
          "[hybrid_kv]") {
  // Group 0 full attention, group 1 window 8, 4 tokens per block; blocks 1..11.
  KVCacheManager kv(12, two_groups(8), false, 0, 64);
  Request a("a", iota_tokens(1, 13));
  REQUIRE(kv.allocate_slots(a, 13));  // 4 blocks per group: group 0 first
  CHECK(kv.get_block_ids("a", 0) == Ids{1, 2, 3, 4});
  CHECK(kv.get_block_ids("a", 1) == Ids{5, 6, 7, 8});
  compute(a, 13);  // 14 tokens, 13 computed
  // Decode from position 13 reads [6, 13]: block 0 of group 1 (positions 0..3) is passed.
  REQUIRE(kv.allocate_slots(a, 1));
  CHECK(kv.get_block_ids("a", 1) == Ids{0, 6, 7, 8});
  CHECK(kv.block_pool().free_block_ids() == Ids{9, 10, 11, 5});
  compute(a, 1);  // 15 tokens, 14 computed: position 14 reads [7, 14], block 1 still needed
  REQUIRE(kv.allocate_slots(a, 1));
  CHECK(kv.get_block_ids("a", 1) == Ids{0, 6, 7, 8});
  compute(a, 1);
  compute(a, 1);  // 17 tokens, 16 computed (the engine would have allocated for 15 as well)
  // Position 16 reads [9, 16]: block 1 (4..7) goes; both groups need block 4 (16..19).
  REQUIRE(kv.allocate_slots(a, 1));
  CHECK(kv.get_block_ids("a", 0) == Ids{1, 2, 3, 4, 9});
  CHECK(kv.get_block_ids("a", 1) == Ids{0, 0, 7, 8, 10});
  CHECK(kv.block_pool().free_block_ids() == Ids{11, 5, 6});
  // Finishing frees group by group, last block first, skipping the passed entries.
  kv.free(a);
  CHECK(kv.block_pool().free_block_ids() == Ids{11, 5, 6, 9, 4, 3, 2, 1, 10, 8, 7});
  // 64 tokens: 16 full-attention blocks; the window's 8 positions span at most 3 blocks.
  CHECK(kv.blocks_held(64, 1) == 16 + 3);
}

TEST_CASE("hybrid manager: a prefix hit holds only the window's blocks", "[hybrid_kv]") {
  KVCacheManager kv(20, two_groups(8), true, 0, 64);
  Request a("a", iota_tokens(1, 13));
  REQUIRE(kv.allocate_slots(a, 13));  // group 0: 1 2 3 4, group 1: 5 6 7 8; 3 full blocks each
  compute(a, 13);
  kv.free(a);
  // Same 13 tokens: 12 may hit. The full group needs blocks 0..2 (1 2 3); the window group
  // only those of positions [5, 12): blocks 1 and 2 (6 7); its block 0 stays the null block.
  Request b("b", iota_tokens(1, 13));
  const ComputedBlocks hit = kv.get_computed_blocks(b);
  CHECK(hit.num_computed_tokens == 12);
  REQUIRE(hit.block_ids.size() == 2);
  CHECK(hit.block_ids[0] == Ids{1, 2, 3});
  CHECK(hit.block_ids[1] == Ids{0, 6, 7});
  REQUIRE(kv.allocate_slots(b, 1, hit));
  // Block 4 of each group: the free list's head (9 ... in id order, then the freed blocks).
  CHECK(kv.get_block_ids("b", 0) == Ids{1, 2, 3, 9});
  CHECK(kv.get_block_ids("b", 1) == Ids{0, 6, 7, 10});
  CHECK(kv.block_pool().block(5).ref_cnt == 0);  // a's passed block: cached, not held
  CHECK(kv.prefix_cache_hits() == 12);

  kv.free(b);
}

TEST_CASE("hybrid manager: a hit needs no block the window has passed", "[hybrid_kv]") {
  KVCacheManager kv(24, two_groups(8), true, 0, 64);
  Request c("c", iota_tokens(1, 21));
  REQUIRE(kv.allocate_slots(c, 21));  // group 0: 1..6, group 1: 7..12; 5 full blocks cached
  compute(c, 21);
  REQUIRE(kv.allocate_slots(c, 1));  // from position 21 the window reads [14, 21]: 7 8 9 go
  CHECK(kv.get_block_ids("c", 1) == Ids{0, 0, 0, 10, 11, 12});
  CHECK(kv.block_pool().free_block_ids() ==
        Ids{13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 7, 8, 9});
  // Another request takes 12 blocks: 13..18 for group 0, 19..23 and 7 (evicted) for group 1.
  Request d("d", iota_tokens(100, 24));
  REQUIRE(kv.allocate_slots(d, 24));
  CHECK(kv.get_block_ids("d", 1) == Ids{19, 20, 21, 22, 23, 7});
  kv.free(d);
  // e shares c's first 17 tokens: 16 may hit. Group 0 has blocks 0..3 (1 2 3 4); the window
  // group needs only positions [9, 16): blocks 2 and 3 (9, cached though free, and 10), not
  // the evicted 7.
  Request e("e", concat(iota_tokens(1, 17), {50, 51, 52, 53}));
  const ComputedBlocks hit = kv.get_computed_blocks(e);
  CHECK(hit.num_computed_tokens == 16);
  REQUIRE(hit.block_ids.size() == 2);
  CHECK(hit.block_ids[0] == Ids{1, 2, 3, 4});
  CHECK(hit.block_ids[1] == Ids{0, 0, 9, 10});
  // Every group's hit blocks are taken before any new block is popped: 9 sits at the free
  // list's head after 8 and must not be handed out as a new block of group 0.
  REQUIRE(kv.allocate_slots(e, 5, hit));
  CHECK(kv.get_block_ids("e", 0) == Ids{1, 2, 3, 4, 8, 18});
  CHECK(kv.get_block_ids("e", 1) == Ids{0, 0, 9, 10, 17, 16});
  CHECK(kv.block_pool().block(9).ref_cnt == 1);
  CHECK(kv.block_pool().block(10).ref_cnt == 2);  // shared with c
}

TEST_CASE("hybrid scheduler: one long request fits only because the window frees blocks",
          "[hybrid_kv]") {
  SchedulerConfig cfg;
  cfg.max_num_seqs = 4;
  cfg.max_num_batched_tokens = 4;
  cfg.max_model_len = 32;
  // Full attention needs 8 blocks of 4; window 4 with chunks of 4: (3 + 4) / 4 -> 2 + 1 = 3.
  KVCacheManager hybrid(12, two_groups(4), false, 0, 32);  // 11 usable >= 8 + 3
  CHECK_NOTHROW(Scheduler(cfg, hybrid));
  KVCacheManager full(12, two_groups(0), false, 0, 32);  // 8 + 8 = 16 > 11
  CHECK_THROWS_AS(Scheduler(cfg, full), std::invalid_argument);

  // Run a 30-token prompt in chunks of 4 through the scheduler: the window group never holds
  // more than 3 blocks, the full group one per 4 tokens.
  Scheduler s(cfg, hybrid);
  s.add_request(std::make_unique<Request>("r", iota_tokens(1, 30), SamplingParams{}));
  int64_t steps = 0;
  while (s.has_unfinished_requests() && steps < 40) {
    SchedulerOutput out = s.schedule();
    REQUIRE(out.scheduled.size() == 1);
    Request* r = out.scheduled[0];
    const int64_t end = r->num_computed_tokens + out.num_scheduled_tokens[0];
    int64_t held = 0;
    for (int32_t id : hybrid.get_block_ids("r", 1)) held += id != 0;
    CHECK(held <= 3);
    CHECK(static_cast<int64_t>(hybrid.get_block_ids("r", 0).size()) == (end + 3) / 4);
    if (end == r->num_tokens()) r->append_output_token(7);
    s.update(out);
    if (r->num_tokens() == 32) s.finish_request("r", RequestStatus::FinishedLength);
    ++steps;
  }
  CHECK(steps == 9);  // 30 prompt tokens in 8 chunks, then one decode step to 32 tokens
  CHECK(hybrid.num_free_blocks() == 11);
}

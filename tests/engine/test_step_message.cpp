// The per-step message node 0 sends the other nodes (engine/model_runner.h): a ForwardBatch
// survives the round trip exactly, shutdown is its own message, and a truncated or malformed
// message is an error, never a batch.
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "engine/model_runner.h"

using namespace octet;

namespace {

// Two sequences: a 3-token prefill chunk at positions 0..2 in block 5, and a one-token decode
// at position 17 (block table 2, 9; block size 16: slot 9 * 16 + 1).
ForwardBatch example_batch() {
  ForwardBatch b;
  b.token_ids = {1, 403, 407, 261};
  b.positions = {0, 1, 2, 17};
  b.slot_mapping = {80, 81, 82, 145};
  b.query_start_loc = {0, 3, 4};
  b.seq_lens = {3, 18};
  b.max_blocks_per_seq = 2;
  b.block_tables = {5, 0, 2, 9};
  b.logits_indices = {2, 3};
  return b;
}

}  // namespace

TEST_CASE("step message: a batch round-trips exactly") {
  const ForwardBatch b = example_batch();
  const std::vector<uint8_t> msg = encode_step_message(b);
  // kind u8, max_blocks_per_seq i64, num_kv_groups i64, 7 array lengths i64, then the
  // elements: token ids (4 x i32), positions, slots (4 x i64 each), query starts (3 x i64),
  // seq lens (2 x i64), block tables (4 x i32), logits rows (2 x i64).
  const size_t expect = 1 + 8 + 8 + 7 * 8 + 4 * 4 + 4 * 8 + 4 * 8 + 3 * 8 + 2 * 8 + 4 * 4 + 2 * 8;
  CHECK(msg.size() == expect);
  CHECK(msg[0] == 1);
  ForwardBatch got;
  got.token_ids = {99};  // replaced, not appended to
  REQUIRE(decode_step_message(msg, got));
  CHECK(got.token_ids == b.token_ids);
  CHECK(got.positions == b.positions);
  CHECK(got.slot_mapping == b.slot_mapping);
  CHECK(got.query_start_loc == b.query_start_loc);
  CHECK(got.seq_lens == b.seq_lens);
  CHECK(got.max_blocks_per_seq == 2);
  CHECK(got.block_tables == b.block_tables);
  CHECK(got.logits_indices == b.logits_indices);
  CHECK(got.num_kv_groups == 1);

  // Two KV cache groups (a hybrid cache): slots and block tables per group.
  ForwardBatch h = b;
  h.num_kv_groups = 2;
  h.slot_mapping = {80, 81, 82, 145, 16, 17, 18, 33};
  h.block_tables = {5, 0, 2, 9, 1, 0, 0, 2};
  ForwardBatch got2;
  REQUIRE(decode_step_message(encode_step_message(h), got2));
  CHECK(got2.num_kv_groups == 2);
  CHECK(got2.slot_mapping == h.slot_mapping);
  CHECK(got2.block_tables == h.block_tables);
  // A group count the arrays do not match is malformed.
  h.num_kv_groups = 3;
  CHECK_THROWS_AS(decode_step_message(encode_step_message(h), got2), std::runtime_error);
}

TEST_CASE("step message: shutdown, truncated and malformed messages") {
  ForwardBatch got;
  CHECK(encode_shutdown_message() == std::vector<uint8_t>{0});
  CHECK_FALSE(decode_step_message(encode_shutdown_message(), got));

  const std::vector<uint8_t> msg = encode_step_message(example_batch());
  for (size_t n : {size_t{1}, size_t{5}, size_t{20}, msg.size() - 1}) {
    INFO("first " << n << " bytes");
    const std::vector<uint8_t> cut(msg.begin(), msg.begin() + static_cast<long>(n));
    CHECK_THROWS_WITH(decode_step_message(cut, got), Catch::Contains("truncated") ||
                                                         Catch::Contains("bad array length"));
  }
  CHECK_THROWS_AS(decode_step_message({}, got), std::runtime_error);
  std::vector<uint8_t> unknown = msg;
  unknown[0] = 7;
  CHECK_THROWS_WITH(decode_step_message(unknown, got), Catch::Contains("unknown kind 7"));
  std::vector<uint8_t> longer = msg;
  longer.push_back(0);
  CHECK_THROWS_WITH(decode_step_message(longer, got), Catch::Contains("malformed"));
  // Array sizes that disagree: one position fewer than tokens.
  ForwardBatch bad = example_batch();
  bad.positions.pop_back();
  CHECK_THROWS_WITH(decode_step_message(encode_step_message(bad), got),
                    Catch::Contains("malformed"));
}

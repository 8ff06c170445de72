// `octet plan` on a hybrid model (issue 27): Gemma 3 270M's shape (15 of 18 layers with a
// 512-token window) at 32K context. Expected bytes derived by hand below.
#include <catch2/catch.hpp>

#include "bench/plan.h"

TEST_CASE("plan: a hybrid model's window layers hold their window, not the context", "[plan]") {
  octet::bench::PlanInputs in;
  octet::bench::ModelShape& m = in.model;
  m.name = "gemma-3-270m";
  m.hidden_size = 640, m.num_hidden_layers = 18, m.num_attention_heads = 4;
  m.num_key_value_heads = 1, m.head_dim = 256, m.intermediate_size = 2048;
  m.vocab_size = 262144, m.tie_word_embeddings = true, m.max_position_embeddings = 32768;
  for (int l = 0; l < 18; ++l) m.layer_sliding_window.push_back(l % 6 == 5 ? 0 : 512);
  in.device = *octet::bench::device_preset("h100-sxm-80gb");
  in.max_model_len = 32768;
  const auto rows = octet::bench::make_plan(in);
  const octet::bench::PlanRow& ff = rows.back();  // fp8 weights, fp8 KV
  REQUIRE(ff.kv_cache_dtype == "fp8");
  // FP8 K and V of one KV head of 256: 512 bytes per token and layer.
  CHECK(ff.kv_bytes_per_token == 18 * 512);
  CHECK(ff.kv_bytes_per_token_window == 15 * 512);
  // 3 global layers x 32768 tokens + 15 window layers x 512 tokens.
  CHECK(ff.kv_bytes_per_sequence == 3 * 512 * 32768 + 15 * 512 * 512);
  CHECK(ff.kv_bytes_per_sequence_full_context == int64_t{18} * 512 * 32768);
  // 301989888 / 54263808 = 5.57: at least 5x the sequences fit.
  CHECK(ff.sequences_fit >= 5 * ff.sequences_fit_full_context);
  CHECK(ff.sequences_fit_full_context > 0);
  const std::string table = octet::bench::plan_table(in, rows);
  CHECK(table.find("if windows kept all context") != std::string::npos);
  CHECK(table.find("in sliding-window layers") != std::string::npos);
}

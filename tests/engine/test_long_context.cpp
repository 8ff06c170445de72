// Long-context numerics against transformers (float32, the GGUF dequantized by transformers
// itself): tests/models/golden/smollm2_long_context.json, made by
// scripts/make_long_context_reference.py. Unquantized (quantization "none") so that the
// comparison isolates RoPE, attention and the cache over thousands of positions from FP8.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/kv_report.h"
#include "engine/perplexity.h"

using namespace octet;

namespace {

nlohmann::json reference() {
  std::ifstream in(std::string(OCTET_SOURCE_DIR) +
                   "/tests/models/golden/smollm2_long_context.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("SmolLM2 FP32 perplexity over 4096 tokens of GPL-3 matches transformers",
          "[perplexity][long_context]") {
  const nlohmann::json ref = reference();
  std::ifstream in(ref["corpus"].get<std::string>());
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  PerplexityOptions o;
  o.model = OCTET_SMOLLM2_GGUF;
  o.quantization = "none";
  o.max_tokens = 4096;
  const PerplexityResult r = compute_perplexity(o, text.str());
  const double want = ref["perplexity"]["4096"].get<double>();
  WARN("octet " << r.perplexity << ", transformers " << want);
  REQUIRE(r.tokens == 4096);
  CHECK(r.window == 4096);  // one window: every position sees all the tokens before it
  // FP32 against FP32: 2.7e-8 relative was measured at 7639 tokens; 1e-4 leaves room for the
  // summation order and nothing for a wrong rotary angle or a dropped block.
  CHECK(std::fabs(r.perplexity / want - 1.0) < 1e-4);
}

TEST_CASE("kv-report's copy task at 1024 tokens: exact-KV accuracy matches transformers",
          "[kv_report][long_context]") {
  const nlohmann::json ref = reference();
  KVReportOptions o;
  o.model = OCTET_SMOLLM2_GGUF;
  o.quantization = "none";
  o.text = ref["corpus"].get<std::string>();
  o.max_tokens = 16;
  o.formats = {"fp8_e4m3"};
  o.sources = {"per_token_head"};
  o.long_context_lengths = {1024};
  const KVReport r = run_kv_report(o);
  REQUIRE(r.long_context.size() == 1);
  const double want = ref["copy_task_accuracy"]["1024"].get<double>();
  WARN("exact-KV accuracy " << r.long_context[0].exact_accuracy << ", transformers " << want
                            << ", fp8_e4m3/per_token_head " << r.long_context[0].accuracy[0]);
  // 511 scored positions: 0.01 is five argmax flips between two FP32 implementations.
  CHECK(std::fabs(r.long_context[0].exact_accuracy - want) < 0.01);
}

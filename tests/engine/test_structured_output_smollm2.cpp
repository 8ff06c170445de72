// Structured outputs on SmolLM2-135M (byte-level BPE, 49152 tokens; exits 77 without the GGUF):
// a JSON schema and a regex through the real chat model (CTest label `heavy`), and the manual
// benchmark `test_structured_output_smollm2 "[.bench]"` (prints bench_structured's JSON).
#include <catch2/catch.hpp>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/structured_output.h"
#include "engine/structured_output_bench.h"
#include "engine_test_support.h"
#include "structured_test_support.h"
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::collect;
using testing::Result;

using testing::check_person;
using testing::kPersonSchema;
using testing::so_params;

SamplingParams constrained(StructuredOutputParams so, int64_t max_tokens, float temperature = 0.0f,
                           int64_t seed = -1) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.structured_outputs = std::move(so);
  return p;
}

}  // namespace

// SmolLM2 (byte-level BPE, 49152 tokens): a JSON schema through the real chat model.
TEST_CASE("structured outputs: SmolLM2 follows a JSON schema", "[structured][smollm2]") {
  auto engine = Engine::create(testing::engine_args(
      testing::smollm2(), {.kv_cache_memory_bytes = 64 << 20, .max_model_len = 512}));
  const std::vector<int32_t> prompt = engine->tokenizer().tokenize(
      "<|im_start|>user\nGive me a person as JSON.<|im_end|>\n<|im_start|>assistant\n", true);
  for (int64_t seed : {-1, 5}) {
    INFO("seed " << seed);
    SamplingParams p = constrained(so_params(StructuredOutputKind::Json, kPersonSchema, "json_schema"),
                                   120, seed < 0 ? 0.0f : 0.8f, seed);
    p.logprobs = 2;
    const Result r = collect(*engine->add_request("smol", prompt, p));
    check_person(r.text);
    CHECK(r.finish_reason == "stop");
  }
  const Result re = collect(*engine->add_request(
      "smol-re", prompt,
      constrained(so_params(StructuredOutputKind::Regex, "Answer: (yes|no)\\.", "regex"), 20)));
  CHECK(std::regex_match(re.text, std::regex("Answer: (yes|no)\\.")));
}

// Manual: `test_structured_output_smollm2 "[.bench]"` prints the bench_structured JSON on SmolLM2.
TEST_CASE("structured outputs: bench on SmolLM2", "[.bench][smollm2]") {
  auto engine = Engine::create(testing::engine_args(
      testing::smollm2(), {.kv_cache_memory_bytes = 256 << 20, .max_model_len = 512}));
  const std::vector<std::string> schemas = {
      kPersonSchema,
      R"({"type":"object","properties":{"id":{"type":"integer"},"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},"qty":{"type":"integer","minimum":1},"price":{"type":"number"}},"required":["sku","qty","price"]}},"note":{"type":["string","null"]}},"required":["id","items"]})"};
  const StructuredBenchResult r = bench_structured(*engine, schemas, {1, 16}, 64);
  std::printf("%s\n", structured_bench_json(r).c_str());
  CHECK(r.compile_ms.size() == 2);
  CHECK(r.bitmask_fills > 0);
}

}  // namespace octet

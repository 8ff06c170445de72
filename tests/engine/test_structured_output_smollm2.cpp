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
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::collect;
using testing::Result;

// A person: bounded fields, so that even a tiny model's greedy output ends.
constexpr const char* kPersonSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "ok": {"type": "boolean"},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}
  },
  "required": ["name", "age", "ok", "tags"],
  "additionalProperties": false
})";

/// Checks by hand that `text` is a JSON object of kPersonSchema.
void check_person(const std::string& text) {
  INFO("output: " << text);
  const nlohmann::json j = nlohmann::json::parse(text);  // throws: not JSON
  REQUIRE(j.is_object());
  CHECK(j.size() == 4);
  REQUIRE(j.contains("name"));
  REQUIRE(j["name"].is_string());
  const std::string name = j["name"];
  // maxLength counts characters; the stories model only makes ASCII-ish text, bound by bytes
  // loosely: at most 8 code points.
  size_t code_points = 0;
  for (unsigned char c : name) code_points += (c & 0xC0) != 0x80;
  CHECK(code_points >= 1);
  CHECK(code_points <= 8);
  REQUIRE(j.contains("age"));
  REQUIRE(j["age"].is_number_integer());
  CHECK(j["age"].get<int64_t>() >= 0);
  CHECK(j["age"].get<int64_t>() <= 120);
  REQUIRE(j.contains("ok"));
  CHECK(j["ok"].is_boolean());
  REQUIRE(j.contains("tags"));
  REQUIRE(j["tags"].is_array());
  CHECK(j["tags"].size() <= 2);
  for (const auto& t : j["tags"]) CHECK((t == "a" || t == "b"));
}

StructuredOutputParams so_params(StructuredOutputKind kind, std::string spec,
                                 std::string field = "structured_outputs") {
  StructuredOutputParams so;
  so.kind = kind;
  so.spec = std::move(spec);
  so.field = std::move(field);
  return so;
}

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

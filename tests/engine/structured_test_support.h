#pragma once
// Shared by the structured-output engine tests (stories260K and SmolLM2): a bounded JSON
// schema, a hand-written check of outputs against it, and StructuredOutputParams in one call.
#include <cstdint>
#include <string>
#include <utility>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/structured_output.h"

namespace octet::testing {

// A person: bounded fields, so that even a tiny model's greedy output ends.
inline constexpr const char* kPersonSchema = R"({
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
inline void check_person(const std::string& text) {
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

inline StructuredOutputParams so_params(StructuredOutputKind kind, std::string spec,
                                 std::string field = "structured_outputs") {
  StructuredOutputParams so;
  so.kind = kind;
  so.spec = std::move(spec);
  so.field = std::move(field);
  return so;
}

}  // namespace octet::testing

// The tuple form of JSON Schema drafts 4-2019 ("items": [...]) rewritten to 2020-12's
// "prefixItems" (engine/json_schema_compat.h), and such schemas accepted by the compiler.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "engine/json_schema_compat.h"
#include "engine/request_error.h"
#include "engine/structured_output.h"

using nlohmann::ordered_json;
using octet::rewrite_tuple_items;

namespace {

ordered_json rewritten(const std::string& schema) {
  const auto r = rewrite_tuple_items(schema);
  REQUIRE(r.has_value());
  return ordered_json::parse(*r);
}

}  // namespace

TEST_CASE("tuple items become prefixItems, additionalItems becomes items", "[structured]") {
  CHECK(rewritten(R"({"items": [{"type": "integer"}]})") ==
        ordered_json::parse(R"({"prefixItems": [{"type": "integer"}]})"));
  CHECK(rewritten(R"({"type": "array", "items": [{"type": "string"}, {"type": "integer"}],
                      "additionalItems": false})") ==
        ordered_json::parse(R"({"type": "array", "items": false,
                                "prefixItems": [{"type": "string"}, {"type": "integer"}]})"));
  // Nested: under properties (a property named "items" is a name, not a keyword), $defs,
  // anyOf and inside a tuple's own members.
  const ordered_json nested = rewritten(R"({"type": "object", "properties": {
      "items": {"type": "array", "items": [{"type": "integer"}]},
      "p": {"anyOf": [{"items": [{"items": [{"type": "null"}]}]}]}},
      "$defs": {"t": {"items": [true]}}})");
  CHECK(nested["properties"]["items"] ==
        ordered_json::parse(R"({"type": "array", "prefixItems": [{"type": "integer"}]})"));
  CHECK(nested["properties"]["p"]["anyOf"][0] ==
        ordered_json::parse(R"({"prefixItems": [{"prefixItems": [{"type": "null"}]}]})"));
  CHECK(nested["$defs"]["t"] == ordered_json::parse(R"({"prefixItems": [true]})"));
  // Property order is kept (it is the order xgrammar emits them in).
  const ordered_json order = rewritten(R"({"properties": {"z": {}, "a": {"items": [{}]}}})");
  CHECK(order["properties"].begin().key() == "z");
}

TEST_CASE("schemas without the tuple form, and literal values, are left alone", "[structured]") {
  CHECK_FALSE(rewrite_tuple_items(R"({"type": "array", "items": {"type": "integer"}})"));
  CHECK_FALSE(rewrite_tuple_items(R"({"type": "object"})"));
  CHECK_FALSE(rewrite_tuple_items("not json"));
  // "items" arrays inside enum / const / default / examples are values, not schemas.
  CHECK_FALSE(rewrite_tuple_items(R"({"const": {"items": [1, 2]}, "enum": [{"items": [3]}],
                                      "default": {"items": []}, "examples": [{"items": [4]}]})"));
  // Both forms given: 2020-12's wins, nothing is rewritten.
  CHECK_FALSE(rewrite_tuple_items(R"({"prefixItems": [{}], "items": [{}]})"));
}

TEST_CASE("a tuple-form schema compiles, as llama.cpp's server takes it", "[structured]") {
  octet::StructuredOutputParams p;
  p.kind = octet::StructuredOutputKind::Json;
  p.field = "response_format";
  p.spec = R"({"items": [{"type": "integer"}]})";
  CHECK_NOTHROW(octet::validate_structured_output(p));
  p.spec = R"({"items": 5})";  // still invalid: named by the compiler
  CHECK_THROWS_AS(octet::validate_structured_output(p), octet::RequestError);
}

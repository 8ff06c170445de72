// Structured-output request fields -> StructuredOutputParams (server/openai/structured_request.h):
// OpenAI's response_format, vLLM's structured_outputs and guided_* fields, llama.cpp's
// json_schema / grammar; one constraint per request; a spec that does not compile is a 400
// naming the field. Expected values are written by hand from the OpenAI / vLLM / llama.cpp
// request shapes.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"
#include "server/openai/openai_request.h"
#include "server/openai/structured_request.h"

using nlohmann::json;
using octet::StructuredOutputKind;
using octet::StructuredOutputParams;
using octet::server::ApiError;
using octet::server::parse_chat_request;
using octet::server::parse_completion_request;
using octet::server::parse_structured_outputs;

namespace {

json chat(const json& extra) {
  json b{{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}
json completion(const json& extra) {
  json b{{"prompt", "hi"}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

StructuredOutputParams chat_so(const json& extra) {
  return parse_chat_request(chat(extra)).params.structured_outputs;
}

ApiError error_of(const json& body) {
  try {
    parse_structured_outputs(body);
  } catch (const ApiError& e) {
    return e;
  }
  FAIL("no ApiError for " << body.dump());
  return ApiError(0, "");
}

const json kSchema = {{"type", "object"},
                      {"properties", {{"name", {{"type", "string"}}}, {"age", {{"type", "integer"}}}}},
                      {"required", {"name", "age"}}};

}  // namespace

TEST_CASE("response_format maps to the engine's structured outputs", "[server][structured]") {
  CHECK_FALSE(chat_so({{"response_format", {{"type", "text"}}}}).active());
  CHECK_FALSE(chat_so({{"response_format", nullptr}}).active());

  const auto obj = chat_so({{"response_format", {{"type", "json_object"}}}});
  CHECK(obj.kind == StructuredOutputKind::JsonObject);
  CHECK(obj.field == "response_format");
  CHECK(obj.any_whitespace);

  const auto js = chat_so({{"response_format",
                            {{"type", "json_schema"},
                             {"json_schema", {{"name", "person"}, {"schema", kSchema}, {"strict", true}}}}}});
  CHECK(js.kind == StructuredOutputKind::Json);
  CHECK(json::parse(js.spec) == kSchema);
  CHECK(js.field == "response_format");

  // No schema: any JSON object (as json_object).
  CHECK(chat_so({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}})
            .kind == StructuredOutputKind::JsonObject);
  // Completions accept response_format too (vLLM's CompletionRequest).
  CHECK(parse_completion_request(completion({{"response_format", {{"type", "json_object"}}}}))
            .params.structured_outputs.kind == StructuredOutputKind::JsonObject);
  // structural_tag: the whole object is xgrammar's structural tag.
  const json tag = {{"type", "structural_tag"},
                    {"format", {{"type", "const_string"}, {"value", "hello"}}}};
  const auto st = chat_so({{"response_format", tag}});
  CHECK(st.kind == StructuredOutputKind::StructuralTag);
  CHECK(json::parse(st.spec) == tag);
}

TEST_CASE("malformed response_format values get 400 naming it", "[server][structured]") {
  for (const json& rf : {json("json_object"), json{{"type", 5}}, json{{"type", "xml"}},
                         json{{"type", "json_schema"}},
                         json{{"type", "json_schema"}, {"json_schema", 5}},
                         json{{"type", "json_schema"}, {"json_schema", {{"schema", "x"}}}},
                         json{{"type", "json_schema"}, {"json_schema", {{"strict", "yes"}}}}}) {
    INFO(rf.dump());
    const ApiError e = error_of(json{{"response_format", rf}});
    CHECK(e.status() == 400);
    CHECK(e.param() == "response_format");
  }
  CHECK(std::string(error_of(json{{"response_format", {{"type", "json_schema"}}}}).what()) ==
        "When response_format type is 'json_schema', the 'json_schema' field must be provided.");
}

TEST_CASE("vLLM's structured_outputs and guided_* fields", "[server][structured]") {
  const auto j = chat_so({{"structured_outputs", {{"json", kSchema}}}});
  CHECK(j.kind == StructuredOutputKind::Json);
  CHECK(json::parse(j.spec) == kSchema);
  CHECK(j.field == "structured_outputs");
  // json as JSON text (vLLM accepts str | dict).
  CHECK(json::parse(chat_so({{"structured_outputs", {{"json", kSchema.dump()}}}}).spec) == kSchema);

  const auto r = chat_so({{"structured_outputs", {{"regex", "[a-z]+@[a-z]+\\.com"}}}});
  CHECK(r.kind == StructuredOutputKind::Regex);
  CHECK(r.spec == "[a-z]+@[a-z]+\\.com");

  const auto c = chat_so({{"structured_outputs", {{"choice", {"yes", "no"}}}}});
  CHECK(c.kind == StructuredOutputKind::Choice);
  CHECK(c.choice == std::vector<std::string>{"yes", "no"});

  const auto g = chat_so({{"structured_outputs", {{"grammar", "root ::= \"a\" | \"b\""}}}});
  CHECK(g.kind == StructuredOutputKind::Grammar);
  CHECK(g.spec == "root ::= \"a\" | \"b\"");

  CHECK(chat_so({{"structured_outputs", {{"json_object", true}}}}).kind ==
        StructuredOutputKind::JsonObject);
  CHECK_FALSE(chat_so({{"structured_outputs", {{"json_object", false}}}}).active());

  const auto w = chat_so({{"structured_outputs", {{"json_object", true}, {"disable_any_whitespace", true}}}});
  CHECK_FALSE(w.any_whitespace);
  // The option alone applies to the constraint of another field.
  const auto rw = chat_so({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", kSchema}}}}},
                           {"structured_outputs", {{"disable_any_whitespace", true}}}});
  CHECK(rw.kind == StructuredOutputKind::Json);
  CHECK(rw.field == "response_format");
  CHECK_FALSE(rw.any_whitespace);
  CHECK_FALSE(chat_so({{"structured_outputs", {{"disable_any_whitespace", true}}}}).active());

  // guided_* (vLLM <= 0.10), each naming itself.
  const auto gj = chat_so({{"guided_json", kSchema}});
  CHECK(gj.kind == StructuredOutputKind::Json);
  CHECK(gj.field == "guided_json");
  CHECK(chat_so({{"guided_regex", "a+"}}).kind == StructuredOutputKind::Regex);
  const auto gc = chat_so({{"guided_choice", {"x", "y", "z"}}});
  CHECK(gc.choice.size() == 3);
  CHECK(gc.field == "guided_choice");
  CHECK(chat_so({{"guided_grammar", "root ::= \"x\""}}).kind == StructuredOutputKind::Grammar);
  CHECK_FALSE(chat_so({{"guided_decoding_backend", "xgrammar"}}).active());
}

TEST_CASE("llama.cpp's json_schema and grammar fields", "[server][structured]") {
  const auto j = parse_completion_request(completion({{"json_schema", kSchema}})).params.structured_outputs;
  CHECK(j.kind == StructuredOutputKind::Json);
  CHECK(j.field == "json_schema");
  CHECK(json::parse(j.spec) == kSchema);
  const auto g = chat_so({{"grammar", "root ::= [0-9]+"}});
  CHECK(g.kind == StructuredOutputKind::Grammar);
  CHECK(g.field == "grammar");
  CHECK_FALSE(chat_so({{"grammar", ""}}).active());
  // llama.cpp's response_format {"type": "json_object", "schema": ...} is that schema; a
  // schema that is not an object or boolean is a 400 naming response_format.
  const auto rs = chat_so({{"response_format", {{"type", "json_object"}, {"schema", kSchema}}}});
  CHECK(rs.kind == StructuredOutputKind::Json);
  CHECK(rs.field == "response_format");
  CHECK(json::parse(rs.spec) == kSchema);
  CHECK(chat_so({{"response_format", {{"type", "json_object"}, {"schema", nullptr}}}}).kind ==
        StructuredOutputKind::JsonObject);
  const ApiError e = error_of(json{{"response_format", {{"type", "json_object"}, {"schema", 123}}}});
  CHECK(e.status() == 400);
  CHECK(e.param() == "response_format");
}

TEST_CASE("more than one constraint gets 400", "[server][structured]") {
  const ApiError a = error_of(json{{"structured_outputs", {{"regex", "a"}, {"choice", {"a"}}}}});
  CHECK(a.status() == 400);
  CHECK(a.param() == "structured_outputs");
  CHECK(std::string(a.what()).find("You can only use one kind of constraints") == 0);
  const ApiError b = error_of(json{{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a"}});
  CHECK(b.param() == "guided_regex");
  const ApiError c = error_of(json{{"json_schema", kSchema}, {"grammar", "root ::= \"a\""}});
  CHECK(c.param() == "grammar");
  // {"type": "text"} is no constraint: alongside another one it is fine.
  CHECK(parse_structured_outputs(json{{"response_format", {{"type", "text"}}}, {"guided_regex", "a"}})
            .kind == StructuredOutputKind::Regex);
}

TEST_CASE("malformed structured_outputs values get 400 naming the field", "[server][structured]") {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"structured_outputs", "regex"}}, "structured_outputs"},
      {{{"structured_outputs", {{"regex", 5}}}}, "structured_outputs.regex"},
      {{{"structured_outputs", {{"choice", "a"}}}}, "structured_outputs.choice"},
      {{{"structured_outputs", {{"choice", json::array()}}}}, "structured_outputs.choice"},
      {{{"structured_outputs", {{"choice", {1, 2}}}}}, "structured_outputs.choice"},
      {{{"structured_outputs", {{"json", "{not json"}}}}, "structured_outputs.json"},
      {{{"structured_outputs", {{"json", 5}}}}, "structured_outputs.json"},
      {{{"structured_outputs", {{"json_object", "yes"}}}}, "structured_outputs"},
      {{{"structured_outputs", {{"whitespace_pattern", " "}}}}, "structured_outputs"},
      {{{"structured_outputs", {{"regexp", "a"}}}}, "structured_outputs"},
      {{{"guided_choice", "a"}}, "guided_choice"},
      {{{"guided_regex", {"a"}}}, "guided_regex"},
      {{{"guided_decoding_backend", "outlines"}}, "guided_decoding_backend"},
      {{{"json_schema", "{}"}}, "json_schema"},
      {{{"grammar", 5}}, "grammar"},
  };
  for (const auto& [body, param] : cases) {
    INFO(body.dump());
    const ApiError e = error_of(body);
    CHECK(e.status() == 400);
    CHECK(e.param() == param);
  }
}

TEST_CASE("a spec the grammar compiler rejects is a 400 naming the field", "[server][structured]") {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"structured_outputs", {{"regex", "(ab"}}}}, "structured_outputs"},
      {{{"guided_regex", "[z-a]"}}, "guided_regex"},
      {{{"grammar", "root ::= undefined_rule"}}, "grammar"},
      {{{"structured_outputs", {{"grammar", "this is not ebnf"}}}}, "structured_outputs"},
      {{{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "no_such_type"}}}}}}}},
       "response_format"},
      {{{"structured_outputs", {{"structural_tag", "{not json"}}}}, "structured_outputs"},
  };
  for (const auto& [body, param] : cases) {
    INFO(body.dump());
    const ApiError e = error_of(body);
    CHECK(e.status() == 400);
    CHECK(e.param() == param);
  }
  // Through the request parsers too (the chat and completion paths call it).
  CHECK_THROWS_AS(parse_chat_request(chat({{"guided_regex", "(ab"}})), ApiError);
  CHECK_THROWS_AS(parse_completion_request(completion({{"guided_regex", "(ab"}})), ApiError);
}

TEST_CASE("keep_key_order restores the client's property order of a schema",
          "[server][structured]") {
  const std::string text =
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "p",
         "schema": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}},
         "required": ["zeta", "alpha"]}}}})";
  auto r = parse_completion_request(json::parse(text));
  // nlohmann::json sorts keys: alpha first.
  CHECK(r.params.structured_outputs.spec.find("alpha") < r.params.structured_outputs.spec.find("zeta"));
  octet::server::keep_key_order(r, text);
  const std::string& spec = r.params.structured_outputs.spec;
  CHECK(spec.find("zeta") < spec.find("alpha"));
  CHECK(spec.find("\"type\"") < spec.find("\"properties\""));
  CHECK(json::parse(spec) == json::parse(text)["response_format"]["json_schema"]["schema"]);
  const std::string guided = R"({"prompt": "x", "guided_json": "{\"properties\": {\"b\": {}, \"a\": {}}}"})";
  auto g = parse_completion_request(json::parse(guided));
  octet::server::keep_key_order(g, guided);
  CHECK(g.params.structured_outputs.spec == R"({"properties":{"b":{},"a":{}}})");
}

TEST_CASE("structured-output fields are not reported as unknown", "[server][structured]") {
  const auto r = parse_chat_request(chat({{"guided_regex", "a+"}, {"guided_decoding_backend", "xgrammar"}}));
  CHECK(r.unknown_fields.empty());
  CHECK(parse_completion_request(completion({{"structured_outputs", {{"choice", {"a"}}}}}))
            .unknown_fields.empty());
}

// Tool calling in the server: the request fields (tool_request.h, vLLM's checks and messages),
// the parsers hermes / llama3_json / mistral on hand-written model outputs, malformed ones
// included (tool_parser.h, vLLM's results), and the streamed deltas, whose concatenation must
// give what the non-streaming reading gives (tool_stream.h).
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "config/serve_config.h"
#include "server/openai/api_error.h"
#include "server/openai/openai_request.h"
#include "server/openai/structured_request.h"
#include "server/openai/tool_parser.h"
#include "server/openai/tool_request.h"
#include "server/openai/tool_stream.h"
#include "server/openai/tool_stream.h"

using nlohmann::json;
using namespace octet::server;
using octet::SamplingParams;
using octet::StructuredOutputKind;

namespace {

const json kWeather = {{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"description", "Weather in a city"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"city", {{"type", "string"}}}}},
                           {"required", {"city"}}}}}}};
const json kTime = {{"type", "function"}, {"function", {{"name", "get_time"}}}};

json chat(const json& extra) {
  json b{{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

ApiError chat_error(const json& body) {
  try {
    parse_chat_request(body);
  } catch (const ApiError& e) {
    return e;
  }
  FAIL("no ApiError for " << body.dump());
  return ApiError(0, "");
}

ToolRequest tools_of(const json& extra) { return parse_chat_request(chat(extra)).tools; }

/// The stream of `text` fed in pieces of `step` bytes: content and, per call index, id, name
/// and the concatenated arguments, as the openai client accumulates them; also checks the
/// shape of every delta.
struct Accumulated {
  std::string content;
  std::map<int64_t, json> calls;  // index -> {"id", "name", "arguments"}
};
Accumulated stream(ChoiceTools& t, const std::string& text, size_t step) {
  Accumulated a;
  for (size_t end = 0; end < text.size() + step; end += step) {
    const size_t n = std::min(end, text.size());
    const bool finished = end >= text.size();
    for (const json& d : t.stream_deltas(text.substr(0, n), finished)) {
      if (d.contains("content")) a.content += d["content"].get<std::string>();
      if (!d.contains("tool_calls")) continue;
      REQUIRE(d["tool_calls"].size() == 1);
      const json& c = d["tool_calls"][0];
      const int64_t i = c["index"];
      if (!a.calls.count(i)) {
        // The first delta of a call: index, id, type, function.name, arguments "".
        CHECK(c["type"] == "function");
        CHECK(c["id"].is_string());
        CHECK(c["function"]["arguments"] == "");
        a.calls[i] = json{{"id", c["id"]}, {"name", c["function"]["name"]}, {"arguments", ""}};
      } else {
        CHECK_FALSE(c.contains("id"));
        CHECK_FALSE(c["function"].contains("name"));
        a.calls[i]["arguments"] = a.calls[i]["arguments"].get<std::string>() +
                                  c["function"]["arguments"].get<std::string>();
      }
    }
    if (finished) break;
  }
  return a;
}

}  // namespace

TEST_CASE("tools and tool_choice are parsed with vLLM's defaults", "[server][tools]") {
  const ToolRequest none = tools_of(json::object());
  CHECK(none.choice == ToolChoice::kNone);
  CHECK(none.tools.is_null());
  // tools: [] is no tools (vLLM's test_chat_completion_with_empty_tools), with or without "auto".
  for (const json& extra : {json{{"tools", json::array()}},
                            json{{"tools", json::array()}, {"tool_choice", "auto"}}}) {
    const ToolRequest empty = tools_of(extra);
    CHECK(empty.choice == ToolChoice::kNone);
    CHECK(empty.tools.is_null());
  }
  // tools without tool_choice: "auto" (vLLM).
  const ToolRequest dflt = tools_of({{"tools", {kWeather}}});
  CHECK(dflt.choice == ToolChoice::kAuto);
  CHECK(json(dflt.tools) == json::array({kWeather}));
  CHECK(tools_of({{"tools", {kWeather}}, {"tool_choice", "none"}}).choice == ToolChoice::kNone);
  CHECK(tools_of({{"tools", {kWeather}}, {"tool_choice", "required"}}).choice == ToolChoice::kRequired);
  const ToolRequest named = tools_of(
      {{"tools", {kWeather, kTime}},
       {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}},
       {"parallel_tool_calls", false}});
  CHECK(named.choice == ToolChoice::kNamed);
  CHECK(named.named == "get_time");
  CHECK_FALSE(named.parallel_tool_calls);
  // "type" defaults to function.
  CHECK(tools_of({{"tools", {{{"function", {{"name", "f"}}}}}}}).tools[0]["type"] == "function");
  CHECK(parse_chat_request(chat({{"tools", {kWeather}}, {"tool_choice", "auto"}})).unknown_fields.empty());
}

TEST_CASE("malformed tool fields get vLLM's 400s naming them", "[server][tools]") {
  const std::vector<std::tuple<json, std::string, std::string>> cases = {
      {{{"tools", json::array()}, {"tool_choice", "required"}}, "tool_choice",
       "When using `tool_choice`, `tools` must be set."},
      {{{"tools", "x"}}, "tools", ""},
      {{{"tools", {5}}}, "tools[0]", ""},
      {{{"tools", {{{"type", "code_interpreter"}, {"function", {{"name", "f"}}}}}}}, "tools[0].type", ""},
      {{{"tools", {{{"type", "function"}}}}}, "tools[0].function", ""},
      {{{"tools", {{{"function", {{"name", ""}}}}}}}, "tools[0].function.name", ""},
      {{{"tools", {{{"function", {{"name", "f"}, {"parameters", "x"}}}}}}},
       "tools[0].function.parameters", ""},
      {{{"tools", {{{"function", {{"name", "f"}, {"strict", "x"}}}}}}}, "tools[0].function.strict", ""},
      {{{"tool_choice", "required"}}, "tool_choice", "When using `tool_choice`, `tools` must be set."},
      {{{"tools", {kWeather}}, {"tool_choice", "always"}}, "tool_choice",
       "Invalid value for `tool_choice`: \"always\"! Only named tools, \"none\", \"auto\" or "
       "\"required\" are supported."},
      {{{"tools", {kWeather}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
       "tool_choice",
       "The tool specified in `tool_choice` does not match any of the specified `tools`"},
      {{{"tools", {kWeather}}, {"tool_choice", {{"type", "function"}}}}, "tool_choice.function", ""},
      {{{"tools", {kWeather}}, {"tool_choice", {{"type", "function"}, {"function", json::object()}}}},
       "tool_choice.function.name", ""},
      {{{"tools", {kWeather}}, {"parallel_tool_calls", "no"}}, "parallel_tool_calls", ""},
  };
  for (const auto& [extra, param, message] : cases) {
    INFO(extra.dump());
    const ApiError e = chat_error(chat(extra));
    CHECK(e.status() == 400);
    CHECK(e.param() == param);
    if (!message.empty()) CHECK(std::string(e.what()) == message);
  }
}

TEST_CASE("assistant tool_calls and tool results in messages", "[server][tools]") {
  const json messages = {
      {{"role", "user"}, {"content", "Weather in Paris?"}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        {{{"id", "call_1"},
          {"type", "function"},
          {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}},
         {{"id", "call_2"}, {"type", "function"}, {"function", {{"name", "get_time"}, {"arguments", ""}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C"}},
  };
  const GenerateRequest r = parse_chat_request(json{{"messages", messages}});
  const json& a = r.messages[1];
  CHECK(a["content"] == "");
  // Arguments as a value for the templates (vLLM); "" -> {}.
  CHECK(a["tool_calls"][0] == json{{"id", "call_1"},
                                   {"type", "function"},
                                   {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}});
  CHECK(a["tool_calls"][1]["function"]["arguments"] == json::object());
  CHECK(r.messages[2]["tool_call_id"] == "call_1");
  CHECK(r.messages[2]["content"] == "18 C");

  const std::vector<std::pair<json, std::string>> bad = {
      {{{{"role", "tool"}, {"content", "x"}, {"tool_call_id", 5}}}, "messages[0].tool_call_id"},
      {{{{"role", "assistant"}, {"tool_calls", "x"}}}, "messages[0].tool_calls"},
      {{{{"role", "user"}, {"tool_calls", {{{"function", {{"name", "f"}}}}}}}}, "messages[0].tool_calls"},
      {{{{"role", "assistant"}, {"tool_calls", {{{"id", "1"}}}}}}, "messages[0].tool_calls[0].function"},
      {{{{"role", "assistant"},
         {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "{oops"}}}}}}}},
       "messages[0].tool_calls[0].function.arguments"},
      {{{{"role", "assistant"}, {"function_call", {{"name", "f"}}}}}, "messages[0].function_call"},
  };
  for (const auto& [msgs, param] : bad) {
    INFO(msgs.dump());
    const ApiError e = chat_error(json{{"messages", msgs}});
    CHECK(e.status() == 400);
    CHECK(e.param() == param);
  }
}

TEST_CASE("tool_choice against the server's flags, and its constraint", "[server][tools]") {
  const ToolRequest aut = tools_of({{"tools", {kWeather}}});
  SamplingParams p;
  try {
    prepare_tool_request(aut, false, "", p);
    FAIL("no error");
  } catch (const ApiError& e) {
    CHECK(e.status() == 400);
    CHECK(std::string(e.what()) ==
          "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
  }
  CHECK_THROWS_AS(prepare_tool_request(aut, true, "", p), ApiError);
  SamplingParams q;
  prepare_tool_request(aut, true, "hermes", q);
  CHECK_FALSE(q.skip_special_tokens);  // vLLM: tags may be special tokens
  CHECK_FALSE(q.structured_outputs.active());

  // Named: the function's parameters schema, without any server flag.
  const ToolRequest named = tools_of(
      {{"tools", {kWeather, kTime}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
  SamplingParams n;
  prepare_tool_request(named, false, "", n);
  CHECK(n.structured_outputs.kind == StructuredOutputKind::Json);
  CHECK(n.structured_outputs.field == "tool_choice");
  CHECK_FALSE(n.structured_outputs.any_whitespace);
  CHECK(json::parse(n.structured_outputs.spec) == kWeather["function"]["parameters"]);
  // The client's key order is kept for the schema once keep_key_order() ran on the body text.
  GenerateRequest ordered = parse_chat_request(json::parse(
      R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required", "tools": [{"type": "function",
          "function": {"name": "f", "parameters": {"type": "object", "properties": {"zeta": {"type": "string"},
          "alpha": {"type": "integer"}}, "required": ["zeta", "alpha"]}}}]})"));
  keep_key_order(ordered, R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required", "tools": [{"type": "function",
          "function": {"name": "f", "parameters": {"type": "object", "properties": {"zeta": {"type": "string"},
          "alpha": {"type": "integer"}}, "required": ["zeta", "alpha"]}}}]})");
  const std::string spec = tool_choice_structured_outputs(ordered.tools).spec;
  CHECK(spec.find("\"zeta\"") < spec.find("\"alpha\""));
  CHECK(ordered.tools.tools[0]["function"].dump().find("\"name\"") == 1);  // {"name":...: first, as sent
  // A function without parameters: an empty object schema.
  const ToolRequest named_time = tools_of(
      {{"tools", {kWeather, kTime}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}});
  CHECK(json::parse(tool_choice_structured_outputs(named_time).spec) ==
        json{{"type", "object"}, {"properties", json::object()}});

  // Required: vLLM's array schema, hand-written.
  const ToolRequest req = tools_of({{"tools", {kWeather, kTime}}, {"tool_choice", "required"}});
  const json expected = {
      {"type", "array"},
      {"minItems", 1},
      {"items",
       {{"type", "object"},
        {"anyOf",
         {{{"properties",
            {{"name", {{"type", "string"}, {"enum", {"get_weather"}}}},
             {"parameters", kWeather["function"]["parameters"]}}},
           {"required", {"name", "parameters"}}},
          {{"properties",
            {{"name", {{"type", "string"}, {"enum", {"get_time"}}}},
             {"parameters", {{"type", "object"}, {"properties", json::object()}}}}},
           {"required", {"name", "parameters"}}}}}}}};
  CHECK(json::parse(tool_choice_structured_outputs(req).spec) == expected);
  SamplingParams rq;
  prepare_tool_request(req, false, "", rq);
  CHECK(rq.structured_outputs.kind == StructuredOutputKind::Json);
  // parallel_tool_calls false: at most one call.
  const ToolRequest one = tools_of({{"tools", {kWeather}}, {"tool_choice", "required"}, {"parallel_tool_calls", false}});
  CHECK(json::parse(tool_choice_structured_outputs(one).spec)["maxItems"] == 1);

  // $defs of the tools move to the top; conflicting ones are a 400.
  const json with_defs = {{"function",
                           {{"name", "f"},
                            {"parameters",
                             {{"type", "object"},
                              {"properties", {{"p", {{"$ref", "#/$defs/P"}}}}},
                              {"$defs", {{"P", {{"type", "integer"}}}}}}}}}};
  const json other_defs = {{"function",
                            {{"name", "g"},
                             {"parameters",
                              {{"type", "object"},
                               {"properties", {{"p", {{"$ref", "#/$defs/P"}}}}},
                               {"$defs", {{"P", {{"type", "string"}}}}}}}}}};
  const json s = json::parse(
      tool_choice_structured_outputs(tools_of({{"tools", {with_defs}}, {"tool_choice", "required"}})).spec);
  CHECK(s["$defs"] == json{{"P", {{"type", "integer"}}}});
  CHECK_FALSE(s["items"]["anyOf"][0]["properties"]["parameters"].contains("$defs"));
  CHECK_THROWS_AS(tool_choice_structured_outputs(
                      tools_of({{"tools", {with_defs, other_defs}}, {"tool_choice", "required"}})),
                  ApiError);

  // response_format gives way to a required / named tool choice's grammar (vLLM's fix in
  // test_response_format_with_tool_choice_required); the tool grammar is what remains.
  for (const char* choice : {"required", "named"}) {
    INFO(choice);
    const json tc = std::string(choice) == "required"
                        ? json("required")
                        : json{{"type", "function"}, {"function", {{"name", "get_weather"}}}};
    GenerateRequest rf = parse_chat_request(chat(
        {{"tools", {kWeather}}, {"tool_choice", tc}, {"response_format", {{"type", "json_object"}}}}));
    REQUIRE(rf.params.structured_outputs.field == "response_format");
    prepare_tool_request(rf.tools, false, "", rf.params);
    CHECK(rf.params.structured_outputs.spec == tool_choice_structured_outputs(rf.tools).spec);
  }

  // Explicit structured outputs and a required / named tool choice together: vLLM's 400.
  GenerateRequest both = parse_chat_request(
      chat({{"tools", {kWeather}}, {"tool_choice", "required"}, {"guided_regex", "a"}}));
  try {
    prepare_tool_request(both.tools, false, "", both.params);
    FAIL("no error");
  } catch (const ApiError& e) {
    CHECK(std::string(e.what()) ==
          "You can only either use constraints for structured outputs or tools, not both.");
  }
}

TEST_CASE("hermes parser", "[server][tools]") {
  const auto k = ToolParserKind::kHermes;
  auto e = extract_tool_calls(k, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"n\":[1,2]}}\n</tool_call>");
  REQUIRE(e.calls.size() == 1);
  CHECK(e.calls[0].name == "get_weather");
  CHECK(e.calls[0].arguments == "{\"city\": \"Paris\", \"n\": [1, 2]}");  // json.dumps style
  CHECK_FALSE(e.content.has_value());

  // Text before, two calls, the last one without its closing tag (vLLM's regex takes it).
  e = extract_tool_calls(k, "Let me check. <tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
                            "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": \"</tool_call\"}}");
  REQUIRE(e.calls.size() == 2);
  CHECK(e.content == std::optional<std::string>("Let me check. "));
  CHECK(e.calls[0].name == "a");
  CHECK(e.calls[0].arguments == "{}");
  CHECK(e.calls[1].arguments == "{\"x\": \"</tool_call\"}");

  // No tag, malformed JSON, a missing key: everything is content, no calls.
  for (const std::string& out : {std::string("just text"),
                                std::string("<tool_call>{\"name\": \"a\", \"arguments\": {</tool_call>"),
                                std::string("<tool_call>{\"arguments\": {}}</tool_call>"),
                                std::string("<tool_call>{\"name\": \"a\"}</tool_call>")}) {
    INFO(out);
    e = extract_tool_calls(k, out);
    CHECK(e.calls.empty());
    CHECK(e.content == std::optional<std::string>(out));
  }
}

TEST_CASE("llama3_json parser", "[server][tools]") {
  const auto k = ToolParserKind::kLlama3Json;
  auto e = extract_tool_calls(k, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
  REQUIRE(e.calls.size() == 1);
  CHECK(e.calls[0].name == "get_weather");
  CHECK(e.calls[0].arguments == "{\"city\": \"Paris\"}");
  CHECK_FALSE(e.content.has_value());
  // <|python_tag|>, several calls separated by "; ", "arguments" accepted too.
  e = extract_tool_calls(k, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": {\"y\": 1}}}; "
                            "{\"name\": \"b\", \"arguments\": {}}");
  REQUIRE(e.calls.size() == 2);
  CHECK(e.calls[0].arguments == "{\"x\": {\"y\": 1}}");
  CHECK(e.calls[1].name == "b");
  for (const std::string& out : {std::string("Hello there"), std::string("{\"name\": \"a\"}"),
                                std::string("{\"name\": \"a\", \"parameters\": {"),
                                std::string("{\"city\": \"Paris\"}")}) {
    INFO(out);
    e = extract_tool_calls(k, out);
    CHECK(e.calls.empty());
    CHECK(e.content == std::optional<std::string>(out));
  }
}

TEST_CASE("mistral parser", "[server][tools]") {
  const auto k = ToolParserKind::kMistral;
  auto e = extract_tool_calls(k, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                                 "{\"name\": \"get_time\", \"arguments\": {}}]");
  REQUIRE(e.calls.size() == 2);
  CHECK(e.calls[0].arguments == "{\"city\": \"Paris\"}");
  CHECK(e.calls[1].name == "get_time");
  CHECK_FALSE(e.content.has_value());
  e = extract_tool_calls(k, "Sure.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": 1}}]");
  REQUIRE(e.calls.size() == 1);
  CHECK(e.content == std::optional<std::string>("Sure."));
  for (const std::string& out : {std::string("no calls"), std::string("[TOOL_CALLS] [{\"name\": \"a\""),
                                std::string("[TOOL_CALLS] not json")}) {
    INFO(out);
    e = extract_tool_calls(k, out);
    CHECK(e.calls.empty());
    CHECK(e.content == std::optional<std::string>(out));
  }
  // Mistral's ids: 9 letters or digits.
  const std::string id = tool_call_id(true);
  CHECK(id.size() == 9);
  const std::string oid = tool_call_id(false);
  CHECK(oid.rfind("call_", 0) == 0);
  CHECK(oid.size() == 29);
}

TEST_CASE("required: the constrained array of calls", "[server][tools]") {
  auto calls = parse_required_tool_calls(
      "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"parameters\": {}}]");
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].name == "get_weather");
  CHECK(calls[0].arguments == "{\"city\": \"Paris\"}");
  CHECK(calls[1].arguments == "{}");
  CHECK(parse_required_tool_calls("[{\"name\": \"a\", \"parameters\": {").empty());  // cut off
}

TEST_CASE("python_json_text: json.dumps layout, exact numbers", "[server][tools][arguments]") {
  // Expected texts: Python's json.dumps(json.loads(raw), ensure_ascii=False), where that keeps
  // the values.
  CHECK(python_json_text(" {\"a\":1,\"b\":[true,false,null],\"c\":{},\"d\":[]}\n") ==
        std::optional<std::string>("{\"a\": 1, \"b\": [true, false, null], \"c\": {}, \"d\": []}"));
  CHECK(python_json_text("{\"z\": 1, \"a\": 2}") ==
        std::optional<std::string>("{\"z\": 1, \"a\": 2}"));  // the model's key order
  CHECK(python_json_text("[12345678901234567890, 123456789012345678901234567890, 0.1, 0.10, 1e5, "
                         "1E-7, 1.5e300, -0, -0.0, 2.5, 1e16, 1e15, 0.0001, 0.00001, 100, "
                         "-3.25e2, 1e22, 123.456e-2, 5e-324]") ==
        std::optional<std::string>(
            "[12345678901234567890, 123456789012345678901234567890, 0.1, 0.1, 100000.0, 1e-07, "
            "1.5e+300, 0, -0.0, 2.5, 1e+16, 1000000000000000.0, 0.0001, 1e-05, 100, -325.0, "
            "1e+22, 1.23456, 5e-324]"));
  // Where Python's float would change the value (0.1, Infinity), the literal stays.
  CHECK(python_json_text("[0.1000000000000000000001, 1e400, 1e-400]") ==
        std::optional<std::string>("[0.1000000000000000000001, 1e400, 1e-400]"));
  CHECK(python_json_text(R"({"k\u00e9y": "a\/b\u0041\n\u001f\u2028é\"\\"})") ==
        std::optional<std::string>("{\"k\u00e9y\": \"a/bA\\n\\u001f\u2028\u00e9\\\"\\\\\"}"));
  // Deep nesting: no recursion.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK(python_json_text(deep) == std::optional<std::string>(deep));
  for (const char* bad : {"", " ", "{", "[1,]", "[,1]", "{\"a\" 1}", "{\"a\":}", "{1: 2}", "01",
                          "1 2", "tru", "NaN", "[1]x", "\"\\x\"", "-", "1.", "1e", "{\"a\":1,}",
                          "\"a\nb\""}) {
    INFO(bad);
    CHECK_FALSE(python_json_text(bad).has_value());
  }
}

TEST_CASE("parsed tool call arguments keep the model's numbers and key order",
          "[server][tools][arguments]") {
  const std::string args =
      "{\"id\": 12345678901234567890123, \"x\": 0.1, \"big\": 12345678901234567890, "
      "\"y\": 1.0, \"a\": [1e5]}";
  const std::string compact =
      "{\"id\":12345678901234567890123,\"x\":0.1,\"big\":12345678901234567890,\"y\":1.0,\"a\":[1e5]}";
  const std::string expected =
      "{\"id\": 12345678901234567890123, \"x\": 0.1, \"big\": 12345678901234567890, "
      "\"y\": 1.0, \"a\": [100000.0]}";
  auto e = extract_tool_calls(ToolParserKind::kHermes,
                              "<tool_call>\n{\"name\": \"f\", \"arguments\": " + compact + "}\n</tool_call>");
  REQUIRE(e.calls.size() == 1);
  CHECK(e.calls[0].arguments == expected);
  e = extract_tool_calls(ToolParserKind::kLlama3Json,
                         "{\"name\": \"f\", \"parameters\": " + args + "}");
  REQUIRE(e.calls.size() == 1);
  CHECK(e.calls[0].arguments == expected);
  e = extract_tool_calls(ToolParserKind::kMistral,
                         "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": " + compact +
                             "}, {\"name\": \"g\", \"arguments\": {\"n\": -0}}]");
  REQUIRE(e.calls.size() == 2);
  CHECK(e.calls[0].arguments == expected);
  CHECK(e.calls[1].arguments == "{\"n\": 0}");
  e = extract_tool_calls(ToolParserKind::kMistral,
                         "[TOOL_CALLS] {\"name\": \"f\", \"arguments\": " + args + "}");
  REQUIRE(e.calls.size() == 1);
  CHECK(e.calls[0].arguments == expected);
  // A repeated key: the last value, as Python's dict.
  e = extract_tool_calls(ToolParserKind::kHermes,
                         "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"arguments\": "
                         "{\"b\": 2}}</tool_call>");
  REQUIRE(e.calls.size() == 1);
  CHECK(e.calls[0].arguments == "{\"b\": 2}");
  const auto calls = parse_required_tool_calls("[{\"name\": \"f\", \"parameters\": " + compact + "}]");
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].arguments == expected);

  // The same through a response: non-streamed arguments as above; streamed deltas carry the
  // model's text itself.
  const ToolRequest req = tools_of({{"tools", {kWeather}}});
  const std::string out = "<tool_call>{\"name\": \"get_weather\", \"arguments\": " + compact + "}</tool_call>";
  std::string reason = "stop";
  const json m = ChoiceTools(req, ToolParserKind::kHermes).final_message(out, &reason);
  CHECK(m["tool_calls"][0]["function"]["arguments"] == expected);
  ChoiceTools t(req, ToolParserKind::kHermes);
  const Accumulated a = stream(t, out, 5);
  CHECK(a.calls.at(0)["arguments"] == compact);
}

TEST_CASE("streamed tool calls accumulate to the non-streamed ones", "[server][tools]") {
  struct Case {
    json extra;
    const char* parser;
    std::string text;
    std::string content;          // streamed content
    std::vector<std::pair<std::string, json>> calls;  // name, arguments as JSON
  };
  const std::vector<Case> cases = {
      {{{"tools", {kWeather}}}, "hermes",
       "I'll look. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par{is}\\\"\"}}\n</tool_call>"
       "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
       "I'll look. ",
       {{"get_weather", {{"city", "Par{is}\""}}}, {"get_time", json::object()}}},
      {{{"tools", {kWeather}}}, "hermes", "No tools needed <tool", "No tools needed <tool", {}},
      {{{"tools", {kWeather}}}, "llama3_json",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}; {\"name\": \"get_time\", \"parameters\": {}}",
       "", {{"get_weather", {{"city", "Rome"}}}, {"get_time", json::object()}}},
      {{{"tools", {kWeather}}}, "llama3_json", "Plain answer.", "Plain answer.", {}},
      {{{"tools", {kWeather}}}, "mistral",
       "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]", "",
       {{"get_weather", {{"city", "Oslo"}}}}},
      {{{"tools", {kWeather, kTime}}, {"tool_choice", "required"}}, "",
       "[{\"name\": \"get_time\", \"parameters\": {}}, {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Nice\"}}]",
       "", {{"get_time", json::object()}, {"get_weather", {{"city", "Nice"}}}}},
      {{{"tools", {kWeather}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}},
       "", "{ \"city\" : \"Lyon\" }", "", {{"get_weather", {{"city", "Lyon"}}}}},
      // parallel_tool_calls false: the first call only.
      {{{"tools", {kWeather}}, {"parallel_tool_calls", false}}, "hermes",
       "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
       "", {{"a", json::object()}}},
  };
  for (const Case& c : cases) {
    const ToolRequest req = tools_of(c.extra);
    const auto parser = tool_parser_from_name(c.parser);
    for (size_t step : {size_t{1}, size_t{3}, size_t{7}, c.text.size()}) {
      INFO(c.text << " step " << step);
      ChoiceTools t(req, parser);
      const Accumulated a = stream(t, c.text, step);
      CHECK(a.content == c.content);
      REQUIRE(a.calls.size() == c.calls.size());
      for (size_t i = 0; i < c.calls.size(); ++i) {
        const json& got = a.calls.at(static_cast<int64_t>(i));
        CHECK(got["name"] == c.calls[i].first);
        CHECK(json::parse(got["arguments"].get<std::string>()) == c.calls[i].second);
      }
      CHECK(t.stream_finish_reason("stop") ==
            (c.calls.empty() || req.choice == ToolChoice::kNamed ? "stop" : "tool_calls"));
      // The non-streaming message of the same output.
      std::string reason = "stop";
      const json m = ChoiceTools(req, parser).final_message(c.text, &reason);
      if (c.calls.empty()) {
        CHECK_FALSE(m.contains("tool_calls"));
        CHECK(m["content"] == c.text);
        CHECK(reason == "stop");
      } else {
        REQUIRE(m["tool_calls"].size() == c.calls.size());
        for (size_t i = 0; i < c.calls.size(); ++i) {
          CHECK(m["tool_calls"][i]["type"] == "function");
          CHECK(m["tool_calls"][i]["function"]["name"] == c.calls[i].first);
          CHECK(json::parse(m["tool_calls"][i]["function"]["arguments"].get<std::string>()) ==
                c.calls[i].second);
        }
        CHECK(reason == (req.choice == ToolChoice::kNamed ? "stop" : "tool_calls"));
        if (c.content.empty()) CHECK(m["content"].is_null());
        else CHECK(m["content"] == c.content);
      }
    }
  }
}

TEST_CASE("a required output cut off by max_tokens keeps its complete calls", "[server][tools]") {
  const ToolRequest req = tools_of({{"tools", {kWeather}}, {"tool_choice", "required"}});
  std::string reason = "length";
  const json m = ChoiceTools(req, std::nullopt)
                     .final_message("[{\"name\": \"get_weather\", \"parameters\": {\"city\":\"A\"}}, "
                                    "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"B",
                                    &reason);
  REQUIRE(m["tool_calls"].size() == 1);
  CHECK(m["tool_calls"][0]["function"]["arguments"] == "{\"city\": \"A\"}");
  CHECK(m["content"].is_null());
  CHECK(reason == "length");
}

TEST_CASE("partial outputs: names only once complete, arguments only growing", "[server][tools]") {
  auto p = parse_partial_tool_calls(ToolParserKind::kHermes, "Hi <tool_call>{\"name\": \"get_wea");
  CHECK(p.content_end == 3);
  REQUIRE(p.calls.size() == 1);
  CHECK_FALSE(p.calls[0].name.has_value());
  p = parse_partial_tool_calls(ToolParserKind::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2");
  REQUIRE(p.calls.size() == 1);
  CHECK(p.calls[0].name == std::optional<std::string>("f"));
  CHECK(p.calls[0].arguments == "{\"a\": [1, 2");
  // A possible start tag at the end is held back.
  CHECK(parse_partial_tool_calls(ToolParserKind::kHermes, "ok <tool_ca").content_end == 3);
  CHECK(parse_partial_tool_calls(ToolParserKind::kMistral, "ok [TOOL").content_end == 3);
  CHECK(parse_partial_tool_calls(ToolParserKind::kLlama3Json, "<|python").content_end == 0);
  CHECK(parse_partial_tool_calls(ToolParserKind::kLlama3Json, "Hello").content_end == 5);
  CHECK(json_value_end("{\"a\": \"}\"} tail", 0) == 10);
  CHECK(json_value_end("[1, {\"b\": 2}", 0) == std::string::npos);
}

TEST_CASE("serve: --enable-auto-tool-choice and --tool-call-parser are validated", "[server][tools]") {
  octet::ServeConfig c;
  c.engine.model = "m";
  CHECK_NOTHROW(c.validate());
  c.enable_auto_tool_choice = true;
  CHECK_THROWS_WITH(c.validate(), "--enable-auto-tool-choice requires --tool-call-parser");
  for (const char* name : {"hermes", "llama3_json", "mistral"}) {
    c.tool_call_parser = name;
    CHECK_NOTHROW(c.validate());
    CHECK(tool_parser_from_name(name).has_value());
  }
  c.tool_call_parser = "pythonic";
  CHECK_THROWS_WITH(c.validate(),
                    "--tool-call-parser must be hermes, llama3_json or mistral, got 'pythonic'");
  CHECK_FALSE(tool_parser_from_name("pythonic").has_value());
}

TEST_CASE("a named tool call cut off by max_tokens is no call, with empty content",
          "[server][tools]") {
  octet::server::ToolRequest req;
  req.choice = octet::server::ToolChoice::kNamed;
  req.named = "get_current_weather";
  const octet::server::ChoiceTools tools(req, std::nullopt);
  std::string reason = "length";
  const auto cut = tools.final_message("{\"city\": \"Dal", &reason);
  CHECK(cut["content"] == "");
  CHECK_FALSE(cut.contains("tool_calls"));
  CHECK(reason == "length");
  // Whole arguments are a call even when the budget ended right after them.
  const auto whole = tools.final_message("{\"city\": \"Dallas\"}", &reason);
  REQUIRE(whole.contains("tool_calls"));
  CHECK(whole["tool_calls"][0]["function"]["name"] == "get_current_weather");
  CHECK(whole["tool_calls"][0]["function"]["arguments"] == "{\"city\": \"Dallas\"}");
  CHECK(whole["content"].is_null());
  reason = "stop";
  CHECK(tools.final_message("{\"city\": \"Dallas\"}", &reason).contains("tool_calls"));
}

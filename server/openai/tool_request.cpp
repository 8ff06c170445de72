#include "server/openai/tool_request.h"

#include "server/openai/api_error.h"
#include "server/openai/request_fields.h"

namespace octet::server {

namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

// vLLM's hint for a malformed named tool_choice.
constexpr const char* kCorrectUsage =
    "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";

void check_function(const json& fn, const std::string& where) {
  if (!fn.is_object()) throw bad_request("'" + where + "' must be an object", where);
  if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
    throw bad_request("'" + where + ".name' must be a non-empty string", where + ".name");
  if (fn["name"].get_ref<const std::string&>().size() > 256)
    throw bad_request("'" + where + ".name' must be at most 256 characters", where + ".name");
  if (fn.contains("description") && !fn["description"].is_null() && !fn["description"].is_string())
    throw bad_request("'" + where + ".description' must be a string", where + ".description");
  if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object())
    throw bad_request("'" + where + ".parameters' must be a JSON schema object",
                      where + ".parameters");
  if (fn.contains("strict") && !fn["strict"].is_null() && !fn["strict"].is_boolean())
    throw bad_request("'" + where + ".strict' must be a boolean", where + ".strict");
}

ojson parameters_or_empty(const ojson& fn) {
  if (fn.contains("parameters") && fn["parameters"].is_object()) return fn["parameters"];
  return ojson{{"type", "object"}, {"properties", ojson::object()}};
}

}  // namespace

ToolRequest parse_tool_request(const json& body) {
  ToolRequest t;
  const auto tools_it = body.find("tools");
  // An empty list is no tools, as vLLM takes it (tests/tool_use: tools=[] answers in text).
  const bool has_tools = tools_it != body.end() && !tools_it->is_null() &&
                         !(tools_it->is_array() && tools_it->empty());
  if (has_tools) {
    const json& tools = *tools_it;
    if (!tools.is_array()) throw bad_request("'tools' must be a list of tools", "tools");
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string where = "tools[" + std::to_string(i) + "]";
      const json& tool = tools[i];
      if (!tool.is_object()) throw bad_request("'" + where + "' must be an object", where);
      if (tool.contains("type") && tool["type"] != "function")
        throw bad_request("'" + where + ".type' must be \"function\"", where + ".type");
      if (!tool.contains("function"))
        throw bad_request("'" + where + ".function' is required", where + ".function");
      check_function(tool["function"], where + ".function");
    }
    t.tools = ojson::array();
    for (const json& tool : tools)
      t.tools.push_back(ojson{{"type", "function"}, {"function", ojson(tool["function"])}});
  }
  if (auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean())
      throw bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    t.parallel_tool_calls = it->get<bool>();
  }
  const auto choice_it = body.find("tool_choice");
  if (choice_it == body.end() || choice_it->is_null()) {
    t.choice = has_tools ? ToolChoice::kAuto : ToolChoice::kNone;  // vLLM's default
    return t;
  }
  const json& c = *choice_it;
  if (c == "none") return t;
  if (c == "auto" && tools_it != body.end() && tools_it->is_array() && tools_it->empty())
    return t;  // tools: [] with "auto": nothing to call, so none
  if (!has_tools)
    throw bad_request("When using `tool_choice`, `tools` must be set.", "tool_choice");
  if (c == "auto") {
    t.choice = ToolChoice::kAuto;
  } else if (c == "required") {
    t.choice = ToolChoice::kRequired;
  } else if (c.is_object()) {
    if (c.contains("type") && c["type"] != "function")
      throw bad_request("'tool_choice.type' must be \"function\"", "tool_choice.type");
    const json fn = c.contains("function") ? c["function"] : json(nullptr);
    if (!fn.is_object())
      throw bad_request("Invalid value for `function`: `" + describe_json(fn) +
                            "` in `tool_choice`! " + kCorrectUsage,
                        "tool_choice.function");
    if (!fn.contains("name"))
      throw bad_request(std::string("Expected field `name` in `function` in `tool_choice`! ") +
                            kCorrectUsage,
                        "tool_choice.function.name");
    if (!fn["name"].is_string() || fn["name"].get<std::string>().empty())
      throw bad_request("Invalid `name` in `function`: `" + describe_json(fn["name"]) +
                            "` in `tool_choice`! " + kCorrectUsage,
                        "tool_choice.function.name");
    t.named = fn["name"].get<std::string>();
    bool found = false;
    for (const ojson& tool : t.tools) found = found || tool["function"]["name"] == t.named;
    if (!found)
      throw bad_request("The tool specified in `tool_choice` does not match any of the "
                        "specified `tools`",
                        "tool_choice");
    t.choice = ToolChoice::kNamed;
  } else {
    throw bad_request("Invalid value for `tool_choice`: " + describe_json(c) +
                          "! Only named tools, \"none\", \"auto\" or \"required\" are supported.",
                      "tool_choice");
  }
  return t;
}

void parse_message_tool_fields(const json& m, const std::string& where, json& out) {
  const std::string role = m.contains("role") && m["role"].is_string() ? m["role"].get<std::string>()
                                                                      : "";
  if (m.contains("function_call") && !m["function_call"].is_null())
    throw bad_request("'" + where + ".function_call' is not supported by octet: use tool_calls",
                      where + ".function_call");
  if (auto it = m.find("tool_calls"); it != m.end() && !it->is_null()) {
    const std::string f = where + ".tool_calls";
    if (!it->is_array()) throw bad_request("'" + f + "' must be a list", f);
    if (role != "assistant" && !it->empty())
      throw bad_request("'" + f + "' is only allowed in assistant messages", f);
    json calls = json::array();
    for (size_t j = 0; j < it->size(); ++j) {
      const json& call = (*it)[j];
      const std::string cw = f + "[" + std::to_string(j) + "]";
      if (!call.is_object()) throw bad_request("'" + cw + "' must be an object", cw);
      if (call.contains("type") && call["type"] != "function")
        throw bad_request("'" + cw + ".type' must be \"function\"", cw + ".type");
      json out_call{{"type", "function"}};
      if (call.contains("id") && !call["id"].is_null()) {
        if (!call["id"].is_string()) throw bad_request("'" + cw + ".id' must be a string", cw + ".id");
        out_call["id"] = call["id"];
      }
      const json fn = call.contains("function") ? call["function"] : json(nullptr);
      if (!fn.is_object()) throw bad_request("'" + cw + ".function' must be an object", cw + ".function");
      if (!fn.contains("name") || !fn["name"].is_string())
        throw bad_request("'" + cw + ".function.name' must be a string", cw + ".function.name");
      json args = json::object();  // vLLM: null or "" -> {}
      if (fn.contains("arguments") && !fn["arguments"].is_null()) {
        const json& a = fn["arguments"];
        if (a.is_string()) {
          if (!a.get<std::string>().empty()) {
            args = parse_json_text(a.get<std::string>(), cw + ".function.arguments",
                                   cw + ".function.arguments");
          }
        } else if (a.is_object()) {
          args = a;
        } else {
          throw bad_request("'" + cw + ".function.arguments' must be a string of JSON",
                            cw + ".function.arguments");
        }
      }
      out_call["function"] = json{{"name", fn["name"]}, {"arguments", std::move(args)}};
      calls.push_back(std::move(out_call));
    }
    if (!calls.empty()) out["tool_calls"] = std::move(calls);
  }
  if (auto it = m.find("tool_call_id"); it != m.end() && !it->is_null()) {
    if (!it->is_string())
      throw bad_request("'" + where + ".tool_call_id' must be a string", where + ".tool_call_id");
    out["tool_call_id"] = *it;  // optional, as vLLM's custom message type has it
  }
}

void check_tool_choice(const ToolRequest& t, bool enable_auto_tool_choice,
                       const std::string& tool_call_parser) {
  if (t.choice == ToolChoice::kAuto && !(enable_auto_tool_choice && !tool_call_parser.empty()))
    throw bad_request("\"auto\" tool choice requires --enable-auto-tool-choice and "
                      "--tool-call-parser to be set",
                      "tool_choice");
}

ojson tool_parameters(const ToolRequest& t, const std::string& name) {
  if (!t.tools.is_array()) return nullptr;
  for (const ojson& tool : t.tools)
    if (tool["function"]["name"] == name) return parameters_or_empty(tool["function"]);
  return nullptr;
}

StructuredOutputParams tool_choice_structured_outputs(const ToolRequest& t) {
  StructuredOutputParams p;
  p.field = "tool_choice";
  // Compact JSON (", " and ": "): the calls always end (vLLM allows any whitespace, which lets a
  // model emit newlines until max_tokens and cut the arguments).
  p.any_whitespace = false;
  if (t.choice == ToolChoice::kNamed) {
    p.kind = StructuredOutputKind::Json;
    p.spec = tool_parameters(t, t.named).dump();
    return p;
  }
  if (t.choice != ToolChoice::kRequired) return p;
  ojson defs = ojson::object();
  ojson any_of = ojson::array();
  for (const ojson& tool : t.tools) {
    ojson params = parameters_or_empty(tool["function"]);
    if (params.contains("$defs")) {
      if (!params["$defs"].is_object())
        throw bad_request("a tool's parameters '$defs' must be an object", "tools");
      for (auto it = params["$defs"].begin(); it != params["$defs"].end(); ++it) {
        if (defs.contains(it.key()) && defs[it.key()] != it.value())
          throw bad_request("Tool definitions contain conflicting $defs: '" + it.key() +
                                "' is defined differently by two tools",
                            "tools");
        defs[it.key()] = it.value();
      }
      params.erase("$defs");
    }
    any_of.push_back(ojson{
        {"properties",
         {{"name", {{"type", "string"}, {"enum", ojson::array({tool["function"]["name"]})}}},
          {"parameters", std::move(params)}}},
        {"required", ojson::array({"name", "parameters"})}});
  }
  ojson schema{{"type", "array"},
              {"minItems", 1},
              {"items", {{"type", "object"}, {"anyOf", std::move(any_of)}}}};
  if (!t.parallel_tool_calls) schema["maxItems"] = 1;
  if (!defs.empty()) schema["$defs"] = std::move(defs);
  p.kind = StructuredOutputKind::Json;
  p.spec = schema.dump();
  return p;
}

}  // namespace octet::server

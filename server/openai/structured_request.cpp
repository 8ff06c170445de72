#include "server/openai/structured_request.h"

#include <optional>

#include "config/file_read.h"
#include "engine/request_error.h"
#include "server/openai/api_error.h"
#include "server/openai/request_fields.h"

namespace octet::server {

namespace {

using nlohmann::json;

StructuredOutputParams make(StructuredOutputKind kind, std::string spec, const std::string& field) {
  StructuredOutputParams p;
  p.kind = kind;
  p.spec = std::move(spec);
  p.field = field;
  return p;
}

std::string require_string(const json& v, const std::string& field) {
  if (!v.is_string()) throw bad_request("'" + field + "' must be a string", field);
  return v.get<std::string>();
}

/// A JSON schema given as an object (or, in structured_outputs.json, as JSON text of one).
std::string schema_text(const json& v, const std::string& field, bool text_allowed,
                        const std::string& param = "") {
  const std::string& p = param.empty() ? field : param;
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (text_allowed && v.is_string()) {
    const json parsed = parse_json_text(v.get<std::string>(), field, p);
    if (!parsed.is_object() && !parsed.is_boolean())
      throw bad_request("'" + field + "' must be a JSON schema object", p);
    return parsed.dump();
  }
  throw bad_request("'" + field + "' must be a JSON schema object", p);
}

std::vector<std::string> choice_list(const json& v, const std::string& field) {
  if (!v.is_array()) throw bad_request("'" + field + "' must be a list of strings", field);
  std::vector<std::string> out;
  for (const json& c : v) {
    if (!c.is_string()) throw bad_request("'" + field + "' must be a list of strings", field);
    out.push_back(c.get<std::string>());
  }
  if (out.empty()) throw bad_request("'" + field + "' must not be empty", field);
  return out;
}

StructuredOutputParams from_response_format(const json& rf) {
  const std::string field = "response_format";
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    throw bad_request("'response_format' must be an object with a string 'type'", field);
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return {};
  if (type == "json_object") {
    // llama.cpp's server also takes a schema here ({"type": "json_object", "schema": {...}}).
    if (rf.contains("schema") && !rf["schema"].is_null())
      return make(StructuredOutputKind::Json,
                  schema_text(rf["schema"], "response_format.schema", false, field), field);
    return make(StructuredOutputKind::JsonObject, "", field);
  }
  if (type == "json_schema") {
    // vLLM: "When response_format type is 'json_schema', the 'json_schema' field must be
    // provided."
    if (!rf.contains("json_schema") || rf["json_schema"].is_null())
      throw bad_request("When response_format type is 'json_schema', the 'json_schema' field "
                        "must be provided.",
                        field);
    const json& js = rf["json_schema"];
    if (!js.is_object())
      throw bad_request("'response_format.json_schema' must be an object", field);
    if (js.contains("name") && !js["name"].is_null() && !js["name"].is_string())
      throw bad_request("'response_format.json_schema.name' must be a string", field);
    if (js.contains("strict") && !js["strict"].is_null() && !js["strict"].is_boolean())
      throw bad_request("'response_format.json_schema.strict' must be a boolean", field);
    // OpenAI's "schema" (vLLM also reads it under the alias "json_schema"); none = any JSON.
    const char* key = js.contains("schema") ? "schema" : "json_schema";
    if (!js.contains(key) || js[key].is_null())
      return make(StructuredOutputKind::JsonObject, "", field);
    return make(StructuredOutputKind::Json,
                schema_text(js[key], "response_format.json_schema." + std::string(key), false,
                            field),
                field);
  }
  if (type == "structural_tag") return make(StructuredOutputKind::StructuralTag, rf.dump(), field);
  throw bad_request("'response_format.type' " + describe_json(rf["type"]) +
                        " is not supported: use 'text', 'json_object', 'json_schema' or "
                        "'structural_tag'",
                    field);
}

StructuredOutputParams from_structured_outputs(const json& so) {
  const std::string field = "structured_outputs";
  if (!so.is_object()) throw bad_request("'structured_outputs' must be an object", field);
  std::vector<StructuredOutputParams> found;
  bool any_whitespace = true;
  for (auto it = so.begin(); it != so.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    const std::string sub = field + "." + k;
    if (v.is_null()) continue;
    if (k == "json") {
      found.push_back(make(StructuredOutputKind::Json, schema_text(v, sub, true), field));
    } else if (k == "regex") {
      found.push_back(make(StructuredOutputKind::Regex, require_string(v, sub), field));
    } else if (k == "choice") {
      StructuredOutputParams p = make(StructuredOutputKind::Choice, "", field);
      p.choice = choice_list(v, sub);
      found.push_back(std::move(p));
    } else if (k == "grammar") {
      found.push_back(make(StructuredOutputKind::Grammar, require_string(v, sub), field));
    } else if (k == "json_object") {
      if (!v.is_boolean()) throw bad_request("'" + sub + "' must be a boolean", field);
      if (v.get<bool>()) found.push_back(make(StructuredOutputKind::JsonObject, "", field));
    } else if (k == "structural_tag") {
      const std::string text = v.is_string() ? v.get<std::string>() : v.dump();
      found.push_back(make(StructuredOutputKind::StructuralTag, text, field));
    } else if (k == "disable_any_whitespace") {
      if (!v.is_boolean()) throw bad_request("'" + sub + "' must be a boolean", field);
      any_whitespace = !v.get<bool>();
    } else if (k == "disable_fallback" || k == "disable_additional_properties") {
      // One backend (xgrammar), nothing to fall back to; additional properties follow the
      // schema as written. Only the neutral value passes.
      if (!v.is_boolean()) throw bad_request("'" + sub + "' must be a boolean", field);
      if (k == "disable_additional_properties" && v.get<bool>())
        throw bad_request("'" + sub + "' is not supported by octet", field);
    } else if (k == "whitespace_pattern") {
      throw bad_request("'" + sub + "' is not supported by octet", field);
    } else {
      throw bad_request("'" + sub + "' is not a structured outputs option (json, regex, choice, "
                        "grammar, json_object, structural_tag, disable_any_whitespace)",
                        field);
    }
  }
  if (found.size() > 1)
    throw bad_request("You can only use one kind of constraints for structured outputs "
                      "('json', 'regex', 'choice', 'grammar', 'json_object' or "
                      "'structural_tag').",
                      field);
  // Options alone (disable_any_whitespace) apply to the constraint of another field
  // (response_format, guided_*): kind None carries them.
  StructuredOutputParams p = found.empty() ? StructuredOutputParams{} : found[0];
  p.any_whitespace = any_whitespace;
  return p;
}

}  // namespace

const std::vector<std::string>& structured_output_fields() {
  static const std::vector<std::string> fields = {
      "response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
      "guided_grammar", "guided_decoding_backend", "guided_whitespace_pattern", "json_schema",
      "grammar"};
  return fields;
}

void keep_key_order(GenerateRequest& r, const std::string& body_text) {
  using ojson = nlohmann::ordered_json;
  StructuredOutputParams& so = r.params.structured_outputs;
  const bool schema = so.kind == StructuredOutputKind::Json;
  if (!schema && r.tools.tools.is_null()) return;
  ojson body;
  try {
    body = ojson::parse(body_text);
  } catch (const ojson::exception&) {
    return;  // parsed once already; nothing to restore otherwise
  }
  if (!body.is_object()) return;
  auto ordered_schema = [](const ojson& v) -> std::optional<std::string> {
    if (v.is_object()) return v.dump();
    if (v.is_string() && json_nesting_depth(v.get_ref<const std::string&>(), int(kMaxJsonDepth)) <=
                             int(kMaxJsonDepth)) {
      try {
        const ojson parsed = ojson::parse(v.get<std::string>());
        if (parsed.is_object()) return parsed.dump();
      } catch (const ojson::exception&) {
      }
    }
    return std::nullopt;
  };
  std::optional<std::string> spec;
  if (schema && so.field == "response_format" && body.contains("response_format")) {
    const ojson& rf = body["response_format"];
    const ojson& js = rf.is_object() && rf.value("type", ojson()) == "json_object"
                          ? rf
                          : rf.value("json_schema", ojson());
    if (js.is_object()) {
      const char* key = js.contains("schema") ? "schema" : "json_schema";
      if (js.contains(key)) spec = ordered_schema(js[key]);
    }
  } else if (schema && so.field == "structured_outputs" && body.contains("structured_outputs") &&
             body["structured_outputs"].is_object() && body["structured_outputs"].contains("json")) {
    spec = ordered_schema(body["structured_outputs"]["json"]);
  } else if (schema && (so.field == "guided_json" || so.field == "json_schema") &&
             body.contains(so.field)) {
    spec = ordered_schema(body[so.field]);
  }
  // Same schema, other key order: it compiled already.
  if (spec && json::parse(*spec) == json::parse(so.spec)) so.spec = std::move(*spec);
  if (r.tools.tools.is_array() && body.contains("tools") && body["tools"].is_array() &&
      body["tools"].size() == r.tools.tools.size()) {
    for (size_t i = 0; i < body["tools"].size(); ++i) {
      const ojson& tool = body["tools"][i];
      if (tool.is_object() && tool.contains("function") &&
          json(tool["function"]) == json(r.tools.tools[i]["function"]))
        r.tools.tools[i]["function"] = tool["function"];
    }
  }
}

void check_structured_outputs(const StructuredOutputParams& p) {
  if (!p.active()) return;
  size_t choice_bytes = 0;
  for (const std::string& c : p.choice) choice_bytes += c.size();
  if (p.spec.size() > kMaxStructuredSpecBytes || p.choice.size() > kMaxStructuredChoices ||
      choice_bytes > kMaxStructuredChoiceBytes)
    throw bad_request("'" + p.field + "' is too large: at most " +
                          std::to_string(kMaxStructuredSpecBytes) + " bytes of schema, regex or "
                          "grammar, or " + std::to_string(kMaxStructuredChoices) + " choices",
                      p.field);
  try {
    validate_structured_output(p);
  } catch (const RequestError& e) {
    throw bad_request(e.message(), e.param().empty() ? p.field : e.param());
  }
}

StructuredOutputParams parse_structured_outputs(const json& body) {
  std::vector<StructuredOutputParams> found;
  auto get = [&](const char* key) -> const json* {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = get("response_format")) {
    StructuredOutputParams p = from_response_format(*v);
    if (p.active()) found.push_back(std::move(p));
  }
  bool any_whitespace = true;  // structured_outputs.disable_any_whitespace, for any field
  if (const json* v = get("structured_outputs")) {
    StructuredOutputParams p = from_structured_outputs(*v);
    any_whitespace = p.any_whitespace;
    if (p.active()) found.push_back(std::move(p));
  }
  // vLLM <= 0.10's guided_* fields.
  if (const json* v = get("guided_json"))
    found.push_back(make(StructuredOutputKind::Json, schema_text(*v, "guided_json", true),
                         "guided_json"));
  if (const json* v = get("guided_regex"))
    found.push_back(make(StructuredOutputKind::Regex, require_string(*v, "guided_regex"),
                         "guided_regex"));
  if (const json* v = get("guided_choice")) {
    StructuredOutputParams p = make(StructuredOutputKind::Choice, "", "guided_choice");
    p.choice = choice_list(*v, "guided_choice");
    found.push_back(std::move(p));
  }
  if (const json* v = get("guided_grammar"))
    found.push_back(make(StructuredOutputKind::Grammar, require_string(*v, "guided_grammar"),
                         "guided_grammar"));
  if (const json* v = get("guided_decoding_backend")) {
    // vLLM's backend names; octet has one (xgrammar). Anything else would be ignored silently.
    const std::string b = require_string(*v, "guided_decoding_backend");
    if (b != "xgrammar" && b != "auto")
      throw bad_request("'guided_decoding_backend' " + describe_json(*v) +
                            " is not supported: octet's backend is 'xgrammar'",
                        "guided_decoding_backend");
  }
  if (get("guided_whitespace_pattern"))
    throw bad_request("'guided_whitespace_pattern' is not supported by octet",
                      "guided_whitespace_pattern");
  // llama.cpp's fields.
  if (const json* v = get("json_schema"))
    found.push_back(make(StructuredOutputKind::Json, schema_text(*v, "json_schema", false),
                         "json_schema"));
  if (const json* v = get("grammar")) {
    std::string g = require_string(*v, "grammar");
    if (!g.empty()) found.push_back(make(StructuredOutputKind::Grammar, std::move(g), "grammar"));
  }
  if (found.size() > 1)
    throw bad_request("You can only use one kind of constraints for structured outputs: '" +
                          found[0].field + "' and '" + found[1].field + "' are both given",
                      found[1].field);
  if (found.empty()) return {};
  found[0].any_whitespace = any_whitespace;
  check_structured_outputs(found[0]);
  return found[0];
}

}  // namespace octet::server

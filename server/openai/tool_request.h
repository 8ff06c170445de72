#pragma once
// Tool calling, request side (OpenAI's tools / tool_choice / parallel_tool_calls, with vLLM's
// checks and messages): parsing the fields, the tool fields of messages, and the structured
// output that makes tool_choice "required" or a named function always produce valid calls
// (vLLM's _get_json_schema_from_tool). Every failure is an ApiError 400 naming the field.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/structured_output.h"

namespace octet::server {

/// OpenAI's tool_choice. kNone: the model answers in text (tools still reach the template);
/// kAuto: it may call tools (needs --enable-auto-tool-choice and a --tool-call-parser);
/// kRequired: it calls one or more tools; kNamed: it calls `ToolRequest::named` once.
enum class ToolChoice : uint8_t { kNone, kAuto, kRequired, kNamed };

/// The tool fields of one chat request.
struct ToolRequest {
  // null, or [{"type": "function", "function": {...}}]: the validated list for the chat
  // template and the tool constraints, in the client's key order once keep_key_order()
  // (structured_request.h) has run (nlohmann::json sorts keys).
  nlohmann::ordered_json tools;
  ToolChoice choice = ToolChoice::kNone;  // absent: kAuto with tools, kNone without (vLLM)
  std::string named;                // kNamed: the function's name
  bool parallel_tool_calls = true;  // false: at most one call
  bool active() const { return choice != ToolChoice::kNone; }
};

/// Reads tools, tool_choice and parallel_tool_calls from a chat request body (vLLM's
/// check_tool_usage): tools must be a non-empty list of {"type": "function", "function":
/// {"name": non-empty string, "description": string, "parameters": object, "strict": bool}};
/// tool_choice "none" | "auto" | "required" | {"type": "function", "function": {"name"}} naming
/// one of the tools; a tool_choice other than "none" needs tools. Throws ApiError 400 naming
/// the field.
ToolRequest parse_tool_request(const nlohmann::json& body);

/// Checks the tool fields of message `m` (at `where`, "messages[i]") and copies them into the
/// normalised message `out`: an assistant's tool_calls ([{"id", "type": "function",
/// "function": {"name", "arguments": JSON text}}], arguments parsed into a value for the
/// template as vLLM does; null or "" become {}), a tool message's tool_call_id (a string, optional as in vLLM).
/// Throws ApiError 400 naming the field.
void parse_message_tool_fields(const nlohmann::json& m, const std::string& where,
                               nlohmann::json& out);

/// Checks tool_choice against the server (vLLM): "auto" needs --enable-auto-tool-choice and
/// --tool-call-parser, else 400 '"auto" tool choice requires --enable-auto-tool-choice and
/// --tool-call-parser to be set'. "required" and named choices need neither.
void check_tool_choice(const ToolRequest& t, bool enable_auto_tool_choice,
                       const std::string& tool_call_parser);

/// The constraint of a "required" or named tool choice (kind None otherwise), field
/// "tool_choice": named -> the function's parameters schema ({"type": "object",
/// "properties": {}} when absent); required -> {"type": "array", "minItems": 1, ["maxItems": 1
/// when !parallel_tool_calls,] "items": {"type": "object", "anyOf": [{"properties": {"name":
/// {"type": "string", "enum": [name]}, "parameters": schema}, "required": ["name",
/// "parameters"]}, ...]}} with every tool's "$defs" moved to the top (400 when two tools define
/// one name differently). Both with any_whitespace false (compact JSON).
StructuredOutputParams tool_choice_structured_outputs(const ToolRequest& t);

/// The function's parameters schema of tool `name` (null when absent or unknown).
nlohmann::ordered_json tool_parameters(const ToolRequest& t, const std::string& name);

}  // namespace octet::server

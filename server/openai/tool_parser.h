#pragma once
// Tool-call parsers: find the tool calls in a model's text output, as vLLM's parsers of the
// same names do (vllm/tool_parsers/*). Pure text -> data; no engine, no JSON response shapes.
// - hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one per call (Hermes 2
//   Pro, Qwen2.5 / Qwen3); the text before the first <tool_call> is content.
// - llama3_json: optional <|python_tag|>, then {"name": ..., "parameters" | "arguments": {...}}
//   objects separated by "; " (Llama 3.1 / 3.2 JSON tool calling); no content.
// - mistral: [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]; the text before
//   [TOOL_CALLS] is content; ids are 9 letters or digits (Mistral's templates require it).
// Malformed output (JSON that does not parse, a call without a name) is returned as content
// with no calls, as vLLM does.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace octet::server {

enum class ToolParserKind { kHermes, kLlama3Json, kMistral };

/// "hermes", "llama3_json", "mistral" -> the kind; nullopt for any other name.
std::optional<ToolParserKind> tool_parser_from_name(const std::string& name);
/// The names tool_parser_from_name() accepts, for messages ("hermes, llama3_json, mistral").
const char* tool_parser_names();

/// One parsed call: arguments is JSON text, the model's own arguments value in the layout of
/// vLLM's non-streaming parsers (python_json_text: json.dumps style, ", " and ": "), with every
/// number's exact value.
struct ParsedToolCall {
  std::string name;
  std::string arguments;
};

/// A complete output, parsed: calls (empty when none was found or the output is malformed)
/// and the content (nullopt = null: no text besides the calls).
struct ExtractedToolCalls {
  std::vector<ParsedToolCall> calls;
  std::optional<std::string> content;
};

/// vLLM's extract_tool_calls for `kind` on a finished output.
ExtractedToolCalls extract_tool_calls(ToolParserKind kind, const std::string& text);

/// The calls of the output of tool_choice "required": the JSON array [{"name", "parameters"},
/// ...] the constraint produces. Empty when `text` is not such an array (a cut-off output).
std::vector<ParsedToolCall> parse_required_tool_calls(const std::string& text);

/// The JSON text `raw` (one value, whitespace around allowed) as vLLM writes a parsed call's
/// arguments, json.dumps(json.loads(raw), ensure_ascii=False), without going through doubles:
/// ", " between items and ": " after keys, no other whitespace, keys in the model's order
/// (a repeated key stays repeated; Python would keep its last value), strings re-escaped as
/// Python does (\" \\ \b \f \n \r \t, other control characters \u00XX, the rest as UTF-8).
/// Numbers keep their exact value: an integer's digits as written ("-0" is 0, as Python's int),
/// a number with a fraction or exponent in Python's float repr (0.10 -> 0.1, 1e5 -> 100000.0,
/// 1e-7 -> 1e-07) when that is the same decimal value, else its literal unchanged
/// (0.1000000000000000000001, 1e400). nullopt when `raw` is not exactly one JSON value.
/// Iterative: any nesting depth.
std::optional<std::string> python_json_text(const std::string& raw);

/// A tool call as far as a partial output shows it: name once complete, arguments as the raw
/// text of the arguments value so far (it only ever grows; complete once `complete`).
struct PartialToolCall {
  std::optional<std::string> name;
  std::string arguments;
  bool complete = false;
};

/// A partial output, parsed for streaming: the content that is certainly not part of a call
/// (a possible prefix of a start tag at the end is held back) and the calls so far.
struct PartialToolOutput {
  size_t content_end = 0;  // text[0, content_end) is content
  std::vector<PartialToolCall> calls;
};

/// vLLM's streaming view of `text` (the whole output so far) for `kind`.
PartialToolOutput parse_partial_tool_calls(ToolParserKind kind, const std::string& text);

/// The streaming view of a tool_choice "required" output (a JSON array of {"name",
/// "parameters"}): content_end is always 0.
PartialToolOutput parse_partial_required(const std::string& text);

/// Where the JSON value starting at text[pos] (after whitespace) ends (one past its last
/// character), or npos when it is incomplete or malformed.
size_t json_value_end(const std::string& text, size_t pos);

}  // namespace octet::server

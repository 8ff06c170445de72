#pragma once
// Tool calling, response side: one choice's output -> OpenAI's assistant message with
// tool_calls (non-streaming) or the chat-chunk deltas that stream them, as vLLM's serving_chat
// does, plus the request-side step that needs the server's flags (prepare_tool_request).
//
// Streaming deltas (what the openai client's stream helpers accumulate): the first delta of a
// call is {"tool_calls": [{"index", "id", "type": "function", "function": {"name",
// "arguments": ""}}]}, then {"tool_calls": [{"index", "function": {"arguments": fragment}}]}
// as the arguments text grows; content before a call streams as {"content"}. finish_reason:
// "tool_calls" once a call was made under "auto" or "required", the engine's reason ("stop")
// for a named choice (OpenAI and vLLM).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling_params.h"
#include "server/openai/tool_parser.h"
#include "server/openai/tool_request.h"

namespace octet::server {

/// For a chat request with tool fields, given the server's --enable-auto-tool-choice and
/// --tool-call-parser: check_tool_choice(); for "required" / named, the tool constraint in
/// params.structured_outputs (400 "You can only either use constraints for structured outputs
/// or tools, not both." when the request has its own; compiled once here: 400 naming
/// tool_choice / tools when it does not compile); for "auto" with a parser,
/// skip_special_tokens = false (vLLM: the parsers' tags may be special tokens).
void prepare_tool_request(const ToolRequest& tools, bool enable_auto_tool_choice,
                          const std::string& tool_call_parser, SamplingParams& params);

/// A random tool call id: "call_" + 24 letters and digits (OpenAI's form), or 9 letters and
/// digits for the mistral parser (Mistral's templates refuse any other id).
std::string tool_call_id(bool mistral);

/// One choice's tool-call view of its output.
class ChoiceTools {
 public:
  /// `parser`: the server's parser (used under tool_choice "auto").
  ChoiceTools(const ToolRequest& request, std::optional<ToolParserKind> parser);

  /// Streaming: the deltas to send now, in order, given the whole text so far (`finished`: the
  /// last update; content held back as a possible tag prefix, or an output that turned out not
  /// to be a call, is sent then).
  std::vector<nlohmann::json> stream_deltas(const std::string& text, bool finished);

  /// Non-streaming: the assistant message {"role", "content", ["tool_calls"]} for the whole
  /// output, and *finish_reason rewritten as above. A "required" output cut off by max_tokens
  /// keeps its complete calls (finish_reason stays "length"); a named call cut off before its
  /// arguments are whole JSON is no call, with content "".
  nlohmann::json final_message(const std::string& text, std::string* finish_reason) const;

  /// The finish_reason of a stream that ended with `engine_reason`.
  std::string stream_finish_reason(const std::string& engine_reason) const;

 private:
  struct SentCall {
    std::string id;
    size_t arguments_sent = 0;
  };
  PartialToolOutput partial(const std::string& text) const;

  ToolChoice choice_;
  std::string named_;
  bool parallel_;
  std::optional<ToolParserKind> parser_;
  size_t content_sent_ = 0;
  std::vector<SentCall> sent_;
};

}  // namespace octet::server

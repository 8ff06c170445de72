#include "server/openai/tool_stream.h"

#include <random>

#include "server/openai/api_error.h"
#include "server/openai/structured_request.h"

namespace octet::server {

using nlohmann::json;

void prepare_tool_request(const ToolRequest& tools, bool enable_auto_tool_choice,
                          const std::string& tool_call_parser, SamplingParams& params) {
  check_tool_choice(tools, enable_auto_tool_choice, tool_call_parser);
  if (tools.choice == ToolChoice::kRequired || tools.choice == ToolChoice::kNamed) {
    // A forced tool call's grammar replaces response_format (vLLM clears it: its
    // test_response_format_with_tool_choice_required); explicit grammars still conflict.
    if (params.structured_outputs.active() && params.structured_outputs.field == "response_format")
      params.structured_outputs = StructuredOutputParams{};
    if (params.structured_outputs.active())
      throw bad_request("You can only either use constraints for structured outputs or tools, "
                        "not both.",
                        params.structured_outputs.field);
    params.structured_outputs = tool_choice_structured_outputs(tools);
    check_structured_outputs(params.structured_outputs);
  } else if (tools.choice == ToolChoice::kAuto) {
    params.skip_special_tokens = false;
  }
}

std::string tool_call_id(bool mistral) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = mistral ? "" : "call_";
  const int n = mistral ? 9 : 24;
  for (int i = 0; i < n; ++i) id += alnum[rng() % 62];
  return id;
}

ChoiceTools::ChoiceTools(const ToolRequest& request, std::optional<ToolParserKind> parser)
    : choice_(request.choice), named_(request.named), parallel_(request.parallel_tool_calls),
      parser_(parser) {}

PartialToolOutput ChoiceTools::partial(const std::string& text) const {
  PartialToolOutput p;
  switch (choice_) {
    case ToolChoice::kNone: p.content_end = text.size(); break;
    case ToolChoice::kAuto:
      if (parser_) p = parse_partial_tool_calls(*parser_, text);
      else p.content_end = text.size();
      break;
    case ToolChoice::kRequired: p = parse_partial_required(text); break;
    case ToolChoice::kNamed: {
      // The whole output is the arguments (constrained to the parameters schema).
      PartialToolCall call;
      call.name = named_;
      call.arguments = text;
      p.calls.push_back(std::move(call));
      break;
    }
  }
  if (!parallel_ && p.calls.size() > 1) p.calls.resize(1);
  return p;
}

std::vector<json> ChoiceTools::stream_deltas(const std::string& text, bool finished) {
  std::vector<json> deltas;
  const PartialToolOutput p = partial(text);
  if (p.content_end > content_sent_) {
    deltas.push_back(json{{"content", text.substr(content_sent_, p.content_end - content_sent_)}});
    content_sent_ = p.content_end;
  }
  const bool mistral = choice_ == ToolChoice::kAuto && parser_ == ToolParserKind::kMistral;
  for (size_t i = 0; i < p.calls.size(); ++i) {
    const PartialToolCall& call = p.calls[i];
    if (i >= sent_.size()) {
      if (!call.name) break;  // calls are sent in order, each once its name is complete
      sent_.push_back(SentCall{tool_call_id(mistral), 0});
      deltas.push_back(json{{"tool_calls", json::array({json{
                                               {"index", i},
                                               {"id", sent_[i].id},
                                               {"type", "function"},
                                               {"function", {{"name", *call.name}, {"arguments", ""}}}}})}});
    }
    if (call.arguments.size() > sent_[i].arguments_sent) {
      deltas.push_back(json{
          {"tool_calls",
           json::array({json{{"index", i},
                             {"function",
                              {{"arguments", call.arguments.substr(sent_[i].arguments_sent)}}}}})}});
      sent_[i].arguments_sent = call.arguments.size();
    }
  }
  // The end of an output that held text back (a tag prefix, or JSON that was no call): vLLM's
  // non-streaming reading decides, and what it calls content is sent if no call went out.
  if (finished && sent_.empty() && content_sent_ < text.size() && choice_ == ToolChoice::kAuto) {
    deltas.push_back(json{{"content", text.substr(content_sent_)}});
    content_sent_ = text.size();
  }
  return deltas;
}

std::string ChoiceTools::stream_finish_reason(const std::string& engine_reason) const {
  if (!sent_.empty() && (choice_ == ToolChoice::kAuto || choice_ == ToolChoice::kRequired))
    return "tool_calls";
  return engine_reason;
}

json ChoiceTools::final_message(const std::string& text, std::string* finish_reason) const {
  json message{{"role", "assistant"}, {"content", text}};
  std::vector<ParsedToolCall> calls;
  std::optional<std::string> content = text;
  switch (choice_) {
    case ToolChoice::kNone: return message;
    case ToolChoice::kAuto: {
      if (!parser_) return message;
      ExtractedToolCalls e = extract_tool_calls(*parser_, text);
      calls = std::move(e.calls);
      content = std::move(e.content);
      break;
    }
    case ToolChoice::kRequired:
      calls = parse_required_tool_calls(text);
      if (calls.empty()) {
        // Cut off (finish_reason "length"): the calls that are complete, not none.
        for (const PartialToolCall& c : parse_partial_required(text).calls) {
          if (!c.complete || !c.name || c.arguments.empty()) break;
          const std::optional<std::string> arguments = python_json_text(c.arguments);
          if (!arguments) break;
          calls.push_back(ParsedToolCall{*c.name, *arguments});
        }
      }
      if (!calls.empty()) content = std::nullopt;
      break;
    case ToolChoice::kNamed:
      // Cut off by max_tokens before its arguments are whole JSON: no call and empty content,
      // as vLLM (and OpenAI) answer.
      if (*finish_reason == "length" && !python_json_text(text)) {
        message["content"] = "";
        return message;
      }
      calls.push_back(ParsedToolCall{named_, text});
      content = std::nullopt;
      break;
  }
  if (calls.empty()) return message;
  if (!parallel_ && calls.size() > 1) calls.resize(1);
  const bool mistral = choice_ == ToolChoice::kAuto && parser_ == ToolParserKind::kMistral;
  json tool_calls = json::array();
  for (const ParsedToolCall& c : calls)
    tool_calls.push_back(json{{"id", tool_call_id(mistral)},
                              {"type", "function"},
                              {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  message["content"] = content ? json(*content) : json(nullptr);
  message["tool_calls"] = std::move(tool_calls);
  if (choice_ == ToolChoice::kAuto ||
      (choice_ == ToolChoice::kRequired && *finish_reason == "stop"))
    *finish_reason = "tool_calls";
  return message;
}

}  // namespace octet::server

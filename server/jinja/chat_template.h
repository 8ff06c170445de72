#pragma once
// Chat templates: the Jinja programs in tokenizer_config.json ("chat_template") and GGUF
// metadata ("tokenizer.chat_template") that turn OpenAI-style messages into a prompt string.
// octet renders them with its own Jinja interpreter (server/jinja/jinja_*), compatible with what
// transformers' apply_chat_template does (utils/chat_template_utils.py): jinja2's
// ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True, the loopcontrols
// extension ({% break %}, {% continue %}), the {% generation %} tag, a tojson filter that keeps
// non-ASCII text, and the globals raise_exception(message), strftime_now(format), namespace(),
// dict() and range(). Undefined values behave like jinja2's default Undefined: printing one
// gives "", `is defined` is false, and using an attribute of one is an error.
// Limits: no {% include %}/{% extends %}/{% import %}, no recursive loops, dict keys are strings,
// str.upper()/lower() know Latin, Greek and Cyrillic letters only, a namespace cannot hold a
// namespace, macro or loop object, integers are 64-bit (overflow is an error, not a bigint).
// Budgets (server/jinja/jinja_budget.h): parsing and rendering are bounded in steps, output and value
// size and nesting depth; exceeding one throws ChatTemplateError kind Limit.
#include <ctime>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "server/jinja/chat_template_error.h"

namespace octet {

namespace jinja {
struct Stmt;
}

struct ChatTemplateOptions {
  /// The instant strftime_now() formats (broken-down local time); the current local time when
  /// absent. Tests pin it.
  std::optional<std::tm> now;
};

/// A parsed chat template. Immutable and cheap to copy; render() may run from many threads.
class ChatTemplate {
 public:
  /// An empty template (renders ""); use parse() to make a real one.
  ChatTemplate() = default;

  /// Parses `source`. Throws ChatTemplateError (kind Syntax, with the line) when it is malformed,
  /// kind Limit when it nests deeper than kMaxParseDepth.
  static ChatTemplate parse(const std::string& source);

  /// Renders with `context`, a JSON object whose keys become template variables. The usual
  /// ones: messages (list of {role, content}, content a string or a list of {type: "text",
  /// text}), add_generation_prompt (bool), bos_token, eos_token, tools (list or null), plus any
  /// extra keys the template reads. Object key order is kept (it shows in tojson output), so
  /// parse request bodies into nlohmann::ordered_json. Throws ChatTemplateError: kind Raised
  /// when the template called raise_exception (message() is its text), kind Render for other
  /// runtime errors, kind Limit when a budget is exceeded (steps, output or value bytes, depth,
  /// integer overflow; the context itself may nest kMaxJsonDepth deep); std::invalid_argument
  /// when context is not an object.
  std::string render(const nlohmann::ordered_json& context, const ChatTemplateOptions& options = {}) const;
  /// Same, from a nlohmann::json (its object keys are sorted, so tojson output is too).
  std::string render(const nlohmann::json& context, const ChatTemplateOptions& options = {}) const;

  /// The source text given to parse() ("" for an empty template).
  const std::string& source() const;

  /// Every variable name the template reads anywhere (jinja2's Name nodes in load context:
  /// `{{ x }}`, `x.attr`, `x | f`, `x is defined`, ...), a superset of jinja2.meta's
  /// find_undeclared_variables (names the template also sets or loops over stay in). A context
  /// key outside this set cannot change the rendering. Empty for an empty template.
  const std::set<std::string>& variable_names() const;

 private:
  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const std::set<std::string>> variable_names_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Stmt>>> body_;
};

/// transformers' preprocessing of the messages before rendering (apply_chat_template):
/// drops the keys of each message whose value is null (OpenAI clients send "content": null with
/// tool calls; templates handle a missing key better), then, when a message carries reasoning
/// under "reasoning_content", "thinking" or "reasoning" (first found, in that order), copies it
/// to "thinking" (as first key, unless already present) and "reasoning_content".
/// Throws std::invalid_argument when messages is not an array of objects.
nlohmann::ordered_json prepare_chat_messages(const nlohmann::ordered_json& messages);

}  // namespace octet

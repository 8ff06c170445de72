#pragma once
// The one error type of the chat-template interpreter (server/jinja/chat_template.h, server/jinja/jinja_*).
#include <stdexcept>
#include <string>

namespace octet {

/// A chat template failed to parse or to render. Derives from std::invalid_argument so that the
/// HTTP edge answers 400: a render error is nearly always caused by the request (a template
/// that rejects a system role, roles that do not alternate, content of the wrong type).
///   kind() == Syntax: the template source is malformed (found by ChatTemplate::parse).
///   kind() == Raised: the template called raise_exception(message); message() is its text.
///   kind() == Render: a runtime error (undefined value used, type error, unknown filter ...).
///   kind() == Limit: parsing or rendering exceeded a budget of server/jinja/jinja_budget.h (steps,
///     output or value size, nesting depth, integer overflow); message() names it and its value.
/// line() is the 1-based line of the template source where it happened (0 when unknown).
/// what() is "chat template line N: message" (or just the message when the line is unknown).
class ChatTemplateError : public std::invalid_argument {
 public:
  enum class Kind { Syntax, Raised, Render, Limit };

  ChatTemplateError(Kind kind, std::string message, int line)
      : std::invalid_argument(line > 0 ? "chat template line " + std::to_string(line) + ": " + message
                                       : message),
        kind_(kind),
        message_(std::move(message)),
        line_(line) {}

  Kind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  int line() const { return line_; }

 private:
  Kind kind_;
  std::string message_;
  int line_;
};

}  // namespace octet

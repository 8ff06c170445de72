#pragma once
// Tree-walking renderer of octet's Jinja interpreter. Scoping follows jinja2 3.1: a for-loop body
// gets a fresh scope each iteration (a {% set %} inside it is gone after the iteration; use a
// namespace() to carry state out), macros see the scope they were defined in as it is when
// called, `if` opens no scope, and the top-level template scope shadows the context.
#include <ctime>
#include <optional>
#include <string>

#include "server/jinja/jinja_ast.h"

namespace octet::jinja {

struct RenderOptions {
  /// What strftime_now() formats; the current local time when absent.
  std::optional<std::tm> now;
};

/// Renders a parsed template with `context` (a Dict of variables) on top of the globals.
/// Throws ChatTemplateError (Raised or Render) with the line of the failing tag.
std::string render(const Body& body, const Dict& context, const RenderOptions& options);

}  // namespace octet::jinja

#pragma once
// Built-ins of octet's Jinja interpreter: jinja2 3.1's filters and tests (filters.py, tests.py),
// attribute and item access with the methods of Python str / dict / list that chat templates
// call, and the globals of transformers' chat-template environment (range, dict, namespace,
// raise_exception, strftime_now). As in jinja2's ImmutableSandboxedEnvironment, methods that
// modify a list or dict (append, pop, update ...) are refused.
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "server/jinja/jinja_strings.h"
#include "server/jinja/jinja_value.h"

namespace octet::jinja {

/// Binds call arguments to named parameters like a Python signature: positional first, then by
/// keyword. Throws on too many positional arguments or an unknown keyword.
class Params {
 public:
  Params(const std::string& fn, const CallArgs& args, std::vector<std::string> names);
  /// The i-th parameter, or nullptr when not given.
  const Value* get(std::size_t i) const { return bound_[i]; }
  Value get_or(std::size_t i, Value fallback) const { return bound_[i] ? *bound_[i] : fallback; }

 private:
  std::vector<const Value*> bound_;
};

/// `value | name(args)`; throws "No filter named 'x'." for unknown filters.
Value apply_filter(const std::string& name, const Value& value, CallArgs& args);
/// `value is name(args)`; throws "No test named 'x'." for unknown tests.
bool apply_test(const std::string& name, const Value& value, CallArgs& args);

/// jinja2 Environment.getattr: `obj.name` (methods first, then dict keys); missing gives an
/// Undefined with jinja2's hint. Throws when obj is Undefined.
Value get_attr(const Value& obj, const std::string& name);
/// jinja2 Environment.getitem: `obj[key]` (dict key, list index, str char; else attribute).
Value get_item(const Value& obj, const Value& key);
/// Python slicing obj[start:stop:step] of str, list or tuple (absent bounds are Undefined).
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

/// The globals of transformers' environment. `now` pins strftime_now (local time when absent).
Dict make_globals(const std::optional<std::tm>& now);

}  // namespace octet::jinja

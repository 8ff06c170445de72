#pragma once
// Values of octet's Jinja interpreter, with Python's semantics where chat templates can see them
// (jinja2 runs on Python objects): str() and repr() of numbers, lists and dicts, ==, <, truth,
// `in`, and json.dumps as transformers' `tojson` filter calls it. Dicts keep insertion order.
// Reference: jinja2 3.1 (runtime.py Undefined, utils.py Namespace), CPython 3 object repr.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/jinja/chat_template_error.h"
#include "server/jinja/jinja_budget.h"

namespace octet::jinja {

class Value;

enum class Kind : std::uint8_t {
  Undefined,  // jinja2's default Undefined: prints "", iterates empty, is false; other uses fail
  None,
  Bool,
  Int,
  Float,
  String,     // UTF-8
  List,
  Tuple,
  Dict,       // string keys, insertion order
  Namespace,  // jinja2 namespace(): attributes assignable with {% set ns.x = ... %}
  Function,   // builtins, bound methods, macros
  Object,     // read-only attribute bag (the `loop` variable)
};

/// Insertion-ordered map (Python dict). Keys are usually strings; numbers, bools, None and
/// tuples work too (Python's equality decides: 1, 1.0 and True are the same key).
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  const Value* find_key(const Value& key) const;
  void set(const std::string& key, Value value);
  /// Throws "unhashable type" for list, dict and namespace keys.
  void set_key(const Value& key, Value value);
};

/// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

/// Attribute provider (loop objects); attr() returns Undefined for unknown names.
struct Object {
  virtual ~Object() = default;
  virtual Value attr(const std::string& name) const = 0;
  virtual std::string repr() const = 0;
};

/// Throws ChatTemplateError(Render, message, line 0); the interpreter adds the line.
[[noreturn]] void fail(const std::string& message);

class Value {
 public:
  Value() = default;  // Undefined without a hint
  Value(bool b) : kind_(Kind::Bool), i_(b) {}
  Value(int v) : kind_(Kind::Int), i_(v) {}
  Value(std::int64_t v) : kind_(Kind::Int), i_(v) {}
  Value(double v) : kind_(Kind::Float), f_(v) {}
  /// Strings are shared, immutable: copying a Value is O(1). Charges the render's budgets
  /// (jinja_budget.h) and throws past kMaxValueBytes.
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}

  /// An Undefined whose use fails with `hint` (e.g. "'x' is undefined").
  static Value undefined(std::string hint);
  static Value none();
  /// A markupsafe.Markup string (made by the safe and escape filters): adding a plain string to
  /// it, on either side, HTML-escapes the plain one, as Python's Markup.__add__/__radd__ do.
  static Value markup(std::string s);
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value dict(Dict d = {});
  static Value ns(Dict d = {});
  static Value function(std::string name, std::function<Value(CallArgs&)> fn);
  static Value object(std::shared_ptr<Object> o);
  /// The JSON value as a template value. Throws ChatTemplateError(Limit) when it nests deeper
  /// than kMaxJsonDepth.
  static Value from_json(const nlohmann::ordered_json& j);
  static Value from_json(const nlohmann::json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_markup() const { return kind_ == Kind::String && i_ != 0; }
  bool is_int() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }  // Python: bool is int
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Bool || kind_ == Kind::Float; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_mapping() const { return kind_ == Kind::Dict; }

  bool as_bool() const { return i_ != 0; }
  std::int64_t as_int() const { return i_; }  // Int or Bool
  double as_double() const { return kind_ == Kind::Float ? f_ : static_cast<double>(i_); }
  const std::string& as_string() const { return s_ ? *s_ : empty_string(); }
  std::vector<Value>& items() const { return *static_cast<std::vector<Value>*>(ptr_.get()); }
  Dict& dict_ref() const { return *static_cast<Dict*>(ptr_.get()); }
  Function& function_ref() const { return *static_cast<Function*>(ptr_.get()); }
  const Object& object_ref() const { return *static_cast<Object*>(ptr_.get()); }
  const void* identity() const { return ptr_.get(); }
  /// The failure message of an Undefined.
  const std::string& undefined_hint() const { return as_string(); }
  /// Nesting depth: 0 for scalars, 1 + the deepest element for containers (as built).
  int depth() const { return depth_; }
  /// Approximate bytes held: string length, or elements' sizes plus sizeof(Value) each.
  std::uint64_t size_bytes() const { return kind_ == Kind::String ? as_string().size() : bytes_; }
  /// True when this value is or holds a namespace, function or object: things whose contents
  /// change or are not tracked by depth(), which therefore cannot be stored in a namespace.
  bool holds_reference() const { return has_ref_; }
  /// Throws the UndefinedError this Undefined stands for.
  [[noreturn]] void fail_undefined() const;

 private:
  static const std::string& empty_string();
  struct Measure;

  Kind kind_ = Kind::Undefined;
  bool has_ref_ = false;
  int depth_ = 0;
  std::int64_t i_ = 0;
  double f_ = 0;
  std::uint64_t bytes_ = 0;
  std::shared_ptr<const std::string> s_;  // String, or the hint of an Undefined
  std::shared_ptr<void> ptr_;
};

// --- Python semantics ------------------------------------------------------------------------
/// Python type name as in error messages: "str", "int", "list", "dict", "NoneType" ...
std::string type_name(const Value& v);
/// Python bool(v); Undefined is false.
bool truthy(const Value& v);
/// Python str(v); Undefined gives "".
std::string to_str(const Value& v);
/// Python repr(v).
std::string repr(const Value& v);
/// Python repr of a float: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf".
std::string float_repr(double d);
/// Python ==.
bool equals(const Value& a, const Value& b);
/// Python a < b for numbers, strings, lists and tuples; throws a TypeError-like error otherwise.
bool less(const Value& a, const Value& b, const char* op = "<");
/// Python `needle in container` (str substring, list element, dict key; Undefined -> false).
bool contains(const Value& container, const Value& needle);
/// Elements of an iterable: list/tuple items, dict keys, str characters; Undefined is empty.
std::vector<Value> iterate(const Value& v);

/// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...):
/// indent < 0 means None; item/key separators default as in Python (", " / ": ", or "," with indent).
struct JsonOptions {
  int indent = -1;
  std::string indent_str;  // used when non-empty (indent given as a string)
  std::string item_sep;    // empty: Python's default
  std::string key_sep;
  bool sort_keys = false;
  bool ensure_ascii = false;  // escape non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
};
std::string to_json(const Value& v, const JsonOptions& opts = {});

// --- UTF-8 -------------------------------------------------------------------------------------
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
bool is_ascii(std::string_view s);
/// Number of code points (Python len()).
std::size_t utf8_length(std::string_view s);

}  // namespace octet::jinja

#include "server/jinja/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace octet::jinja {

void fail(const std::string& message) {
  throw ChatTemplateError(ChatTemplateError::Kind::Render, message, 0);
}

// --- Dict ----------------------------------------------------------------------------------------
const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}
Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : entries)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}
const Value* Dict::find_key(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : entries)
    if (!k.is_string() && equals(k, key)) return &v;
  return nullptr;
}
void Dict::set(const std::string& key, Value value) {
  if (Value* v = find(std::string_view(key))) {
    *v = std::move(value);
  } else {
    entries.emplace_back(Value(key), std::move(value));
  }
}
void Dict::set_key(const Value& key, Value value) {
  if (key.is_string()) return set(key.as_string(), std::move(value));
  if (key.kind() == Kind::List || key.kind() == Kind::Dict || key.kind() == Kind::Namespace ||
      key.is_undefined())
    fail("unhashable type: '" + type_name(key) + "'");
  for (auto& [k, v] : entries) {
    if (!k.is_string() && equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

// --- Value construction ----------------------------------------------------------------------
// Depth, size and reference-holding of a container, from its elements; checked against the
// limits when done. Every container is built through list()/tuple()/dict()/ns(), so a value's
// recorded depth bounds the recursion of repr, tojson, == and the destructor on it.
struct Value::Measure {
  int depth = 0;
  std::uint64_t bytes = 0;
  bool has_ref = false;
  void add(const Value& e) {
    depth = std::max(depth, e.depth_);
    bytes += sizeof(Value) + e.size_bytes();
    has_ref = has_ref || e.has_ref_;
  }
  void apply(Value& v, std::size_t elements) const {
    charge_steps(elements);
    if (depth + 1 > kMaxValueDepth) fail_limit("a value nested " + std::to_string(depth + 1) + " deep", std::to_string(kMaxValueDepth) + " levels");
    check_value_bytes(bytes);
    v.depth_ = depth + 1;
    v.bytes_ = bytes;
    v.has_ref_ = has_ref || v.kind_ == Kind::Namespace;
  }
};

const std::string& Value::empty_string() {
  static const std::string empty;
  return empty;
}
Value::Value(std::string s) : kind_(Kind::String) {
  charge_string_bytes(s.size());
  s_ = std::make_shared<const std::string>(std::move(s));
}
Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.i_ = 1;
  return v;
}
Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::List;
  Measure m;
  for (const Value& e : items) m.add(e);
  m.apply(v, items.size());
  v.ptr_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::Dict;
  Measure m;
  for (const auto& [k, e] : d.entries) {
    m.add(k);
    m.add(e);
  }
  m.apply(v, d.entries.size());
  v.ptr_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::ns(Dict d) {
  for (const auto& [k, e] : d.entries)
    if (e.has_ref_) fail("a namespace cannot hold a namespace, function or loop object");
  Value v = dict(std::move(d));
  v.kind_ = Kind::Namespace;
  v.has_ref_ = true;
  return v;
}
Value Value::function(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.has_ref_ = true;
  v.ptr_ = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}
Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::Object;
  v.has_ref_ = true;
  v.ptr_ = std::move(o);
  return v;
}

namespace {
template <class Json>
Value value_from_json(const Json& j, int depth) {
  if (depth > kMaxJsonDepth)
    fail_limit("the template context nested more than " + std::to_string(kMaxJsonDepth) + " deep",
               std::to_string(kMaxJsonDepth) + " levels");
  switch (j.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value(j.template get<std::int64_t>());
    case Json::value_t::number_unsigned: {
      const auto u = j.template get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<std::int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value(j.template get<double>());
    case Json::value_t::string:
      return Value(j.template get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(value_from_json(e, depth + 1));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      Dict d;
      d.entries.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.entries.emplace_back(Value(k), value_from_json(e, depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      fail("unsupported JSON value in the template context");
  }
}
}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j, 1); }
Value Value::from_json(const nlohmann::json& j) { return value_from_json(j, 1); }

void Value::fail_undefined() const { fail(as_string().empty() ? "value is undefined" : as_string()); }

// --- UTF-8 ---------------------------------------------------------------------------------------
bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    char32_t cp = c;
    int extra = 0;
    if (c >= 0xF0) {
      cp = c & 0x07;
      extra = 3;
    } else if (c >= 0xE0) {
      cp = c & 0x0F;
      extra = 2;
    } else if (c >= 0xC0) {
      cp = c & 0x1F;
      extra = 1;
    }
    ++i;
    for (int k = 0; k < extra && i < s.size(); ++k, ++i) cp = (cp << 6) | (s[i] & 0x3F);
    out.push_back(cp);
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

std::size_t utf8_length(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

// --- str / repr ------------------------------------------------------------------------------------
std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Function: return "function";
    case Kind::Object: return "LoopContext";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool:
    case Kind::Int: return v.as_int() != 0;
    case Kind::Float: return v.as_double() != 0.0;
    case Kind::String: return !v.as_string().empty();
    case Kind::List:
    case Kind::Tuple: return !v.items().empty();
    case Kind::Dict: return !v.dict_ref().entries.empty();
    default: return true;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+05"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const std::size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(sci.substr(e + 1));
  const int decpt = exp10 + 1;  // value = 0.DIGITS x 10^decpt
  const int n = static_cast<int>(digits.size());
  std::string out;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out = "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= n) {
      out = digits + std::string(decpt - n, '0') + ".0";
    } else {
      out = digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out = digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    const int x = decpt - 1;
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    out += eb;
  }
  return sign + out;
}

namespace {

// Python's str.isprintable() for a code point, close enough for chat text: control characters,
// separators other than ' ', format characters and private-use code points are not printable.
bool printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || c == 0x061C || c == 0x180E)
    return false;
  if ((c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000 || (c >= 0xD800 && c <= 0xDFFF)) return false;
  return true;
}

std::string str_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (printable(c)) {
      out += utf8_encode(std::u32string_view(&c, 1));
    } else {
      if (c < 0x100) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string dict_repr(const Dict& d) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : d.entries) {
    if (!first) out += ", ";
    first = false;
    out += repr(k) + ": " + repr(v);
  }
  return out + "}";
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return "";
    case Kind::String: return v.as_string();
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "None";
    case Kind::Bool: return v.as_bool() ? "True" : "False";
    case Kind::Int: return std::to_string(v.as_int());
    case Kind::Float: return float_repr(v.as_double());
    case Kind::String: return str_repr(v.as_string());
    case Kind::List:
    case Kind::Tuple: {
      const bool tuple = v.kind() == Kind::Tuple;
      std::string out = tuple ? "(" : "[";
      const auto& items = v.items();
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += repr(items[i]);
      }
      if (tuple && items.size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Kind::Dict: return dict_repr(v.dict_ref());
    case Kind::Namespace: return "<Namespace " + dict_repr(v.dict_ref()) + ">";
    case Kind::Function: return "<function " + v.function_ref().name + ">";
    case Kind::Object: return v.object_ref().repr();
  }
  return "";
}

// --- comparison ------------------------------------------------------------------------------------
bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Kind::Float && b.kind() != Kind::Float) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.as_string() == b.as_string();
    case Kind::List:
    case Kind::Tuple: {
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Kind::Dict: {
      const auto& x = a.dict_ref().entries;
      const Dict& y = b.dict_ref();
      if (x.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* w = y.find_key(k);
        if (!w || !equals(v, *w)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

bool less(const Value& a, const Value& b, const char* op) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Kind::Float && b.kind() != Kind::Float) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 keeps code point order
  if (a.is_sequence() && a.kind() == b.kind()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less(x[i], y[i], op);
    }
    return x.size() < y.size();
  }
  fail(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" +
       type_name(b) + "'");
}

bool contains(const Value& container, const Value& needle) {
  switch (container.kind()) {
    case Kind::Undefined: return false;
    case Kind::String:
      if (!needle.is_string())
        fail("'in <string>' requires string as left operand, not " + type_name(needle));
      return container.as_string().find(needle.as_string()) != std::string::npos;
    case Kind::List:
    case Kind::Tuple:
      for (const auto& item : container.items())
        if (equals(item, needle)) return true;
      return false;
    case Kind::Dict:
    case Kind::Namespace:
      return container.dict_ref().find_key(needle) != nullptr;
    default: fail("argument of type '" + type_name(container) + "' is not iterable");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return {};
    case Kind::List:
    case Kind::Tuple: charge_steps(v.items().size()); return v.items();
    case Kind::Dict: {
      charge_steps(v.dict_ref().entries.size());
      std::vector<Value> keys;
      for (const auto& [k, _] : v.dict_ref().entries) keys.push_back(k);
      return keys;
    }
    case Kind::String: {
      check_value_bytes(mul_size(v.as_string().size(), sizeof(Value)));  // one Value per character
      charge_steps(v.as_string().size());
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.as_string())) chars.emplace_back(utf8_encode(std::u32string_view(&c, 1)));
      return chars;
    }
    default: fail("'" + type_name(v) + "' object is not iterable");
  }
}

// --- json.dumps --------------------------------------------------------------------------------------
namespace {

void json_string(const std::string& s, std::string& out, bool ensure_ascii) {
  if (ensure_ascii && !is_ascii(s)) {
    out.push_back('"');
    for (char32_t c : utf8_decode(s)) {
      char buf[16];
      if (c < 0x7F) {
        std::string one;
        json_string(std::string(1, static_cast<char>(c)), one, false);
        out.append(one, 1, one.size() - 2);
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
        out += buf;
      } else {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
        out += buf;
      }
    }
    out.push_back('"');
    return;
  }
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::String: return k.as_string();
    case Kind::Int: return std::to_string(k.as_int());
    case Kind::Bool: return k.as_bool() ? "true" : "false";
    case Kind::None: return "null";
    case Kind::Float: return float_repr(k.as_double());
    default: fail("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

struct JsonWriter {
  const JsonOptions& o;
  std::string indent_unit;
  bool pretty;
  std::string item_sep, key_sep;

  explicit JsonWriter(const JsonOptions& opts) : o(opts) {
    pretty = opts.indent >= 0 || !opts.indent_str.empty();
    indent_unit = !opts.indent_str.empty() ? opts.indent_str : std::string(std::max(opts.indent, 0), ' ');
    item_sep = !opts.item_sep.empty() ? opts.item_sep : (pretty ? "," : ", ");
    key_sep = !opts.key_sep.empty() ? opts.key_sep : ": ";
  }

  void newline(std::string& out, int level) const {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += indent_unit;
  }

  void write(const Value& v, std::string& out, int level) const {
    switch (v.kind()) {
      case Kind::None: out += "null"; return;
      case Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Kind::Int: out += std::to_string(v.as_int()); return;
      case Kind::Float: {
        const double d = v.as_double();
        if (std::isnan(d)) out += "NaN";
        else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
        else out += float_repr(d);
        return;
      }
      case Kind::String: json_string(v.as_string(), out, o.ensure_ascii); return;
      case Kind::List:
      case Kind::Tuple: {
        const auto& items = v.items();
        if (items.empty()) {
          out += "[]";
          return;
        }
        out.push_back('[');
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (pretty) newline(out, level + 1);
          write(items[i], out, level + 1);
        }
        if (pretty) newline(out, level);
        out.push_back(']');
        return;
      }
      case Kind::Dict: {
        std::vector<std::pair<std::string, const Value*>> entries;  // json.dumps stringifies keys
        for (const auto& [k, val] : v.dict_ref().entries) entries.emplace_back(json_key(k), &val);
        if (entries.empty()) {
          out += "{}";
          return;
        }
        if (o.sort_keys)
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        out.push_back('{');
        for (std::size_t i = 0; i < entries.size(); ++i) {
          if (i) out += item_sep;
          if (pretty) newline(out, level + 1);
          json_string(entries[i].first, out, o.ensure_ascii);
          out += key_sep;
          write(*entries[i].second, out, level + 1);
        }
        if (pretty) newline(out, level);
        out.push_back('}');
        return;
      }
      default: fail("Object of type " + type_name(v) + " is not JSON serializable");
    }
  }
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  JsonWriter(opts).write(v, out, 0);
  return out;
}

}  // namespace octet::jinja

// jinja2 3.1 filters (filters.py) and tests (tests.py), plus transformers' tojson override
// (json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "server/jinja/jinja_builtins.h"

namespace octet::jinja {
namespace {

using FilterFn = Value (*)(const Value&, CallArgs&);
using TestFn = bool (*)(const Value&, CallArgs&);

std::int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return 0;
    case Kind::String: return static_cast<std::int64_t>(utf8_length(v.as_string()));
    case Kind::List:
    case Kind::Tuple: return static_cast<std::int64_t>(v.items().size());
    case Kind::Dict:
    case Kind::Namespace: return static_cast<std::int64_t>(v.dict_ref().entries.size());
    default: fail("object of type '" + type_name(v) + "' has no len()");
  }
}

// jinja2 make_attrgetter: "a.b.0" looks up a, then b, then index 0 (digits become ints).
Value attr_path(const Value& item, const Value& attribute, const Value* default_value = nullptr) {
  Value v = item;
  const std::string path = attribute.is_string() ? attribute.as_string() : to_str(attribute);
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits ? get_item(v, Value(static_cast<std::int64_t>(std::stoll(part)))) : get_item(v, Value(part));
    if (default_value && v.is_undefined()) return *default_value;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return v;
}

// Sort key of jinja2's sort/unique/dictsort/min/max: lowercase strings unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.as_string()));
  return v;
}

CallArgs rest_args(const CallArgs& a, std::size_t skip) {
  CallArgs r;
  if (a.args.size() > skip) r.args.assign(a.args.begin() + static_cast<std::ptrdiff_t>(skip), a.args.end());
  r.kwargs = a.kwargs;
  return r;
}

// select / reject / selectattr / rejectattr (jinja2 _select_or_reject).
Value select_or_reject(const Value& seq, CallArgs& a, bool attr, bool select) {
  if (!truthy(seq)) return Value::list();  // jinja2: `if value:` before iterating, so none gives []
  std::size_t skip = 0;
  Value attribute;
  if (attr) {
    if (a.args.empty()) fail("Missing parameter for attribute name");
    attribute = a.args[0];
    skip = 1;
  }
  std::string test;
  if (a.args.size() > skip) {
    test = to_str(a.args[skip]);
    ++skip;
  }
  CallArgs test_args = rest_args(a, skip);
  std::vector<Value> out;
  for (const auto& item : iterate(seq)) {
    const Value v = attr ? attr_path(item, attribute) : item;
    const bool ok = test.empty() ? truthy(v) : apply_test(test, v, test_args);
    if (ok == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_abs(const Value& v, CallArgs&) {
  if (v.kind() == Kind::Float) return Value(std::fabs(v.as_double()));
  if (v.is_int()) {
    if (v.as_int() == INT64_MIN) fail_limit("the integer result of abs(" + std::to_string(v.as_int()) + ")", "64-bit integers (integer overflow)");
    return Value(static_cast<std::int64_t>(std::llabs(v.as_int())));
  }
  fail("bad operand type for abs(): '" + type_name(v) + "'");
}
Value f_attr(const Value& v, CallArgs& a) {
  Params p("attr", a, {"name"});
  if (!p.get(0)) fail("attr() missing name");
  return get_attr(v, to_str(*p.get(0)));
}
Value f_capitalize(const Value& v, CallArgs&) { return Value(py_capitalize(to_str(v))); }
Value f_default(const Value& v, CallArgs& a) {
  Params p("default", a, {"default_value", "boolean"});
  const bool boolean = truthy(p.get_or(1, Value(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return p.get_or(0, Value(""));
  return v;
}
Value f_dictsort(const Value& v, CallArgs& a) {
  Params p("dictsort", a, {"case_sensitive", "by", "reverse"});
  const bool cs = truthy(p.get_or(0, Value(false)));
  const std::string by = to_str(p.get_or(1, Value("key")));
  const bool rev = truthy(p.get_or(2, Value(false)));
  if (!v.is_mapping()) fail("dictsort: value is not a mapping");
  if (by != "key" && by != "value") fail("You can only sort by either 'key' or 'value'");
  const int pos = by == "key" ? 0 : 1;
  std::vector<Value> items;
  for (const auto& [k, val] : v.dict_ref().entries) items.push_back(Value::tuple({k, val}));
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x.items()[pos], cs), ky = sort_key(y.items()[pos], cs);
    return rev ? less(ky, kx) : less(kx, ky);
  });
  return Value::list(std::move(items));
}
Value f_escape(const Value& v, CallArgs&) { return v.is_markup() ? v : Value::markup(html_escape(to_str(v))); }
Value f_forceescape(const Value& v, CallArgs&) { return Value::markup(html_escape(to_str(v))); }
Value f_first(const Value& v, CallArgs&) {
  const auto items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}
Value f_last(const Value& v, CallArgs&) {
  const auto items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}
Value f_float(const Value& v, CallArgs& a) {
  Params p("float", a, {"default"});
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    const std::string s = py_strip(v.as_string(), nullptr, true, true);
    try {
      std::size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return p.get_or(0, Value(0.0));
}
Value f_format(const Value& v, CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty()) fail("can't handle positional and keyword arguments at the same time");
  if (!a.kwargs.empty()) {
    Dict d;
    for (const auto& [k, val] : a.kwargs) d.set(k, val);
    return Value(py_percent_format(to_str(v), Value::dict(std::move(d))));
  }
  return Value(py_percent_format(to_str(v), Value::tuple(a.args)));
}
Value f_indent(const Value& v, CallArgs& a) {
  Params p("indent", a, {"width", "first", "blank"});
  const Value width = p.get_or(0, Value(4));
  if (width.is_int() && width.as_int() > 0) check_value_bytes(static_cast<std::uint64_t>(width.as_int()));
  const std::string ind = width.is_string() ? width.as_string() : std::string(static_cast<std::size_t>(std::max<std::int64_t>(width.as_int(), 0)), ' ');
  const bool first = truthy(p.get_or(1, Value(false)));
  const bool blank = truthy(p.get_or(2, Value(false)));
  std::string s = to_str(v) + "\n";
  std::vector<std::string> lines;  // str.splitlines() of s
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r' || s[i] == '\v' || s[i] == '\f') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  check_value_bytes(s.size() + mul_size(lines.size() + 1, ind.size()));
  std::string rv;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) rv += "\n";
    if (i > 0 && (blank || !lines[i].empty())) rv += ind;
    rv += lines[i];
  }
  if (first) rv = ind + rv;
  return Value(rv);
}
// Python int(d) of a finite double; past the int64 range it is an overflow error.
std::int64_t double_to_int(double d) {
  if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0))
    fail_limit("the integer result of int(" + float_repr(d) + ")", "64-bit integers (integer overflow)");
  return static_cast<std::int64_t>(d);
}
Value f_int(const Value& v, CallArgs& a) {
  Params p("int", a, {"default", "base"});
  const int base = static_cast<int>(p.get_or(1, Value(10)).as_int());
  if (v.kind() == Kind::Float) {
    if (std::isfinite(v.as_double())) return Value(double_to_int(v.as_double()));
  } else if (v.is_int()) {
    return Value(v.as_int());
  } else if (v.is_string()) {
    std::string s = py_strip(v.as_string(), nullptr, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    try {
      std::size_t used = 0;
      const long long x = std::stoll(s, &used, base);
      if (used == s.size() && !s.empty()) return Value(static_cast<std::int64_t>(x));
    } catch (const std::exception&) {
    }
    try {
      std::size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return Value(double_to_int(d));
    } catch (const std::exception&) {
    }
  }
  return p.get_or(0, Value(0));
}
Value f_items(const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list();
  if (!v.is_mapping()) fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict_ref().entries) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}
Value f_join(const Value& v, CallArgs& a) {
  Params p("join", a, {"d", "attribute"});
  const std::string sep = to_str(p.get_or(0, Value("")));
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(p.get(1) && !p.get(1)->is_none() ? attr_path(item, *p.get(1)) : item);
    check_value_bytes(out.size());
  }
  return Value(out);
}
Value f_length(const Value& v, CallArgs&) { return Value(length_of(v)); }
Value f_list(const Value& v, CallArgs&) { return Value::list(iterate(v)); }
Value f_lower(const Value& v, CallArgs&) { return Value(py_lower(to_str(v))); }
Value f_map(const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return Value::list();  // jinja2: `if value:` before iterating
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, val] : a.kwargs) {
    if (k == "attribute") attribute = &val;
    else if (k == "default") dflt = &val;
  }
  if (attribute) {
    for (const auto& item : iterate(v)) out.push_back(attr_path(item, *attribute, dflt));
    return Value::list(std::move(out));
  }
  if (a.args.empty()) fail("map requires a filter argument");
  const std::string filter = to_str(a.args[0]);
  CallArgs fa = rest_args(a, 1);
  for (const auto& item : iterate(v)) out.push_back(apply_filter(filter, item, fa));
  return Value::list(std::move(out));
}
Value min_max(const Value& v, CallArgs& a, bool want_max) {
  Params p(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  const bool cs = truthy(p.get_or(0, Value(false)));
  const auto items = iterate(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  auto key = [&](const Value& x) { return sort_key(p.get(1) && !p.get(1)->is_none() ? attr_path(x, *p.get(1)) : x, cs); };
  std::size_t best = 0;
  for (std::size_t i = 1; i < items.size(); ++i)
    if (want_max ? less(key(items[best]), key(items[i])) : less(key(items[i]), key(items[best]))) best = i;
  return items[best];
}
Value f_max(const Value& v, CallArgs& a) { return min_max(v, a, true); }
Value f_min(const Value& v, CallArgs& a) { return min_max(v, a, false); }
Value f_reject(const Value& v, CallArgs& a) { return select_or_reject(v, a, false, false); }
Value f_rejectattr(const Value& v, CallArgs& a) { return select_or_reject(v, a, true, false); }
Value f_select(const Value& v, CallArgs& a) { return select_or_reject(v, a, false, true); }
Value f_selectattr(const Value& v, CallArgs& a) { return select_or_reject(v, a, true, true); }
Value f_replace(const Value& v, CallArgs& a) {
  Params p("replace", a, {"old", "new", "count"});
  if (!p.get(0) || !p.get(1)) fail("replace() missing arguments");
  const Value count = p.get_or(2, Value::none());
  return Value(py_replace(to_str(v), to_str(*p.get(0)), to_str(*p.get(1)),
                          count.is_none() ? -1 : static_cast<long>(count.as_int())));
}
Value f_reverse(const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.as_string());
    std::reverse(u.begin(), u.end());
    return Value(utf8_encode(u));
  }
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}
Value f_round(const Value& v, CallArgs& a) {
  Params p("round", a, {"precision", "method"});
  const std::int64_t precision = p.get_or(0, Value(0)).as_int();
  const std::string method = to_str(p.get_or(1, Value("common")));
  if (!v.is_number()) fail("type " + type_name(v) + " doesn't define __round__ method");
  const double x = v.as_double();
  const double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "common") {
    if (v.kind() != Kind::Float) return v;  // round(int, n) keeps the int
    // Python round(): correctly rounded, ties to even; printf does the same from the exact binary value.
    char buf[400];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::max<std::int64_t>(precision, 0)), x);
    return Value(std::stod(buf));
  }
  if (method == "ceil") return Value(std::ceil(x * scale) / scale);
  if (method == "floor") return Value(std::floor(x * scale) / scale);
  fail("method must be common, ceil or floor");
}
Value f_sort(const Value& v, CallArgs& a) {
  Params p("sort", a, {"reverse", "case_sensitive", "attribute"});
  const bool rev = truthy(p.get_or(0, Value(false)));
  const bool cs = truthy(p.get_or(1, Value(false)));
  auto items = iterate(v);
  auto key = [&](const Value& x) { return sort_key(p.get(2) && !p.get(2)->is_none() ? attr_path(x, *p.get(2)) : x, cs); };
  std::stable_sort(items.begin(), items.end(),
                   [&](const Value& x, const Value& y) { return rev ? less(key(y), key(x)) : less(key(x), key(y)); });
  return Value::list(std::move(items));
}
Value f_string(const Value& v, CallArgs&) { return Value(to_str(v)); }
Value f_sum(const Value& v, CallArgs& a) {
  Params p("sum", a, {"attribute", "start"});
  Value total = p.get_or(1, Value(0));
  for (const auto& item : iterate(v)) {
    const Value x = p.get(0) && !p.get(0)->is_none() ? attr_path(item, *p.get(0)) : item;
    if (!x.is_number() || !total.is_number()) fail("unsupported operand type(s) for +: '" + type_name(total) + "' and '" + type_name(x) + "'");
    if (x.kind() == Kind::Float || total.kind() == Kind::Float) total = Value(total.as_double() + x.as_double());
    else {
      std::int64_t r = 0;
      if (__builtin_add_overflow(total.as_int(), x.as_int(), &r))
        fail_limit("the integer result of sum()", "64-bit integers (integer overflow)");
      total = Value(r);
    }
  }
  return total;
}
Value f_title(const Value& v, CallArgs&) {
  // jinja2 do_title: split before runs of [-\s({[<], capitalize the first char of each piece.
  const std::u32string u = utf8_decode(to_str(v));
  auto sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' || (c >= 9 && c <= 13); };
  std::string out;
  bool at_start = true;
  for (char32_t c : u) {
    const std::string ch = utf8_encode(std::u32string_view(&c, 1));
    if (sep(c)) {
      out += ch;
      at_start = true;
    } else {
      out += at_start ? py_upper(ch) : py_lower(ch);
      at_start = false;
    }
  }
  return Value(out);
}
Value f_tojson(const Value& v, CallArgs& a) {
  Params p("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = truthy(p.get_or(0, Value(false)));
  const Value indent = p.get_or(1, Value::none());
  if (indent.is_string()) o.indent_str = indent.as_string();
  else if (indent.is_int()) {
    if (indent.as_int() > 1024) fail_limit("tojson indent " + std::to_string(indent.as_int()), "1024");
    o.indent = static_cast<int>(std::max<std::int64_t>(indent.as_int(), -1));
  }
  else if (!indent.is_none()) fail("tojson: indent must be an int or a string");
  const Value seps = p.get_or(2, Value::none());
  if (!seps.is_none()) {
    if (!seps.is_sequence() || seps.items().size() != 2) fail("tojson: separators must be a (item, key) pair");
    o.item_sep = to_str(seps.items()[0]);
    o.key_sep = to_str(seps.items()[1]);
  }
  o.sort_keys = truthy(p.get_or(3, Value(false)));
  return Value(to_json(v, o));
}
Value f_trim(const Value& v, CallArgs& a) {
  Params p("trim", a, {"chars"});
  return Value(py_strip(to_str(v), p.get(0), true, true));
}
Value f_unique(const Value& v, CallArgs& a) {
  Params p("unique", a, {"case_sensitive", "attribute"});
  const bool cs = truthy(p.get_or(0, Value(false)));
  std::vector<Value> out, seen;
  for (const auto& item : iterate(v)) {
    const Value k = sort_key(p.get(1) && !p.get(1)->is_none() ? attr_path(item, *p.get(1)) : item, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_upper(const Value& v, CallArgs&) { return Value(py_upper(to_str(v))); }
Value f_wordcount(const Value& v, CallArgs&) {
  // len(re.findall(r"\w+", s)): runs of letters, digits and '_' (non-ASCII letters count).
  std::int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(to_str(v))) {
    const bool w = (c < 0x80) ? (std::isalnum(static_cast<int>(c)) || c == '_')
                              : !(c <= 0xBF || (c >= 0x2000 && c <= 0x2BFF) || (c >= 0x3000 && c <= 0x303F) ||
                                  (c >= 0xFF00 && c <= 0xFF0F) || c >= 0x1F000 || c == 0xD7 || c == 0xF7);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}
Value f_safe(const Value& v, CallArgs&) { return v.is_markup() ? v : Value::markup(to_str(v)); }

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = {
      {"abs", f_abs}, {"attr", f_attr}, {"capitalize", f_capitalize}, {"count", f_length},
      {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"forceescape", f_forceescape},
      {"format", f_format}, {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join},
      {"last", f_last}, {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map},
      {"max", f_max}, {"min", f_min}, {"reject", f_reject}, {"rejectattr", f_rejectattr},
      {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe},
      {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string},
      {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"unique", f_unique},
      {"upper", f_upper}, {"wordcount", f_wordcount},
  };
  return table;
}

// --- tests ---------------------------------------------------------------------------------------
const Value& arg0(const CallArgs& a, const char* test) {
  if (a.args.empty()) fail(std::string("test '") + test + "' needs an argument");
  return a.args[0];
}
bool t_boolean(const Value& v, CallArgs&) { return v.kind() == Kind::Bool; }
bool t_callable(const Value& v, CallArgs&) { return v.kind() == Kind::Function; }
bool t_defined(const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_divisibleby(const Value& v, CallArgs& a) {
  const Value& n = arg0(a, "divisibleby");
  if (v.is_int() && n.is_int()) {
    if (n.as_int() == 0) fail("integer division or modulo by zero");
    return v.as_int() % n.as_int() == 0;
  }
  if (!v.is_number() || !n.is_number()) fail("unsupported operand type(s) for %");
  return std::fmod(v.as_double(), n.as_double()) == 0.0;
}
bool t_eq(const Value& v, CallArgs& a) { return equals(v, arg0(a, "eq")); }
bool t_ne(const Value& v, CallArgs& a) { return !equals(v, arg0(a, "ne")); }
bool t_lt(const Value& v, CallArgs& a) { return less(v, arg0(a, "lt"), "<"); }
bool t_le(const Value& v, CallArgs& a) { return !less(arg0(a, "le"), v, "<="); }
bool t_gt(const Value& v, CallArgs& a) { return less(arg0(a, "gt"), v, ">"); }
bool t_ge(const Value& v, CallArgs& a) { return !less(v, arg0(a, "ge"), ">="); }
bool t_escaped(const Value&, CallArgs&) { return false; }
bool t_even(const Value& v, CallArgs&) {
  if (!v.is_int()) fail("even: value is not an integer");
  return v.as_int() % 2 == 0;
}
bool t_odd(const Value& v, CallArgs&) {
  if (!v.is_int()) fail("odd: value is not an integer");
  return v.as_int() % 2 != 0;
}
bool t_false(const Value& v, CallArgs&) { return v.kind() == Kind::Bool && !v.as_bool(); }
bool t_true(const Value& v, CallArgs&) { return v.kind() == Kind::Bool && v.as_bool(); }
bool t_float(const Value& v, CallArgs&) { return v.kind() == Kind::Float; }
bool t_in(const Value& v, CallArgs& a) { return contains(arg0(a, "in"), v); }
bool t_integer(const Value& v, CallArgs&) { return v.kind() == Kind::Int; }
bool t_iterable(const Value& v, CallArgs&) {
  switch (v.kind()) {
    case Kind::Undefined:
    case Kind::String:
    case Kind::List:
    case Kind::Tuple:
    case Kind::Dict:
    case Kind::Object: return true;
    default: return false;
  }
}
bool t_lower(const Value& v, CallArgs&) {
  const std::string s = to_str(v);
  return py_lower(s) == s && py_upper(s) != s;
}
bool t_upper(const Value& v, CallArgs&) {
  const std::string s = to_str(v);
  return py_upper(s) == s && py_lower(s) != s;
}
bool t_mapping(const Value& v, CallArgs&) { return v.kind() == Kind::Dict; }
bool t_none(const Value& v, CallArgs&) { return v.is_none(); }
bool t_number(const Value& v, CallArgs&) { return v.is_number(); }
bool t_sameas(const Value& v, CallArgs& a) {
  const Value& o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::None:
    case Kind::Undefined: return true;
    case Kind::Bool:
    case Kind::Int: return v.as_int() == o.as_int();
    case Kind::Float: return v.as_double() == o.as_double();
    case Kind::String: return v.as_string() == o.as_string();
    default: return v.identity() == o.identity();
  }
}
bool t_sequence(const Value& v, CallArgs&) {
  switch (v.kind()) {
    case Kind::Undefined:
    case Kind::String:
    case Kind::List:
    case Kind::Tuple:
    case Kind::Dict: return true;
    default: return false;
  }
}
bool t_string(const Value& v, CallArgs&) { return v.is_string(); }
bool t_undefined(const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_filter(const Value& v, CallArgs&) { return v.is_string() && filters().count(v.as_string()); }
bool t_test(const Value& v, CallArgs&);

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = {
      {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},
      {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq},
      {"escaped", t_escaped}, {"even", t_even}, {"false", t_false}, {"filter", t_filter},
      {"float", t_float}, {"ge", t_ge}, {">=", t_ge}, {"gt", t_gt}, {">", t_gt},
      {"greaterthan", t_gt}, {"in", t_in}, {"integer", t_integer}, {"iterable", t_iterable},
      {"le", t_le}, {"<=", t_le}, {"lower", t_lower}, {"lt", t_lt}, {"<", t_lt},
      {"lessthan", t_lt}, {"mapping", t_mapping}, {"ne", t_ne}, {"!=", t_ne}, {"none", t_none},
      {"number", t_number}, {"odd", t_odd}, {"sameas", t_sameas}, {"sequence", t_sequence},
      {"string", t_string}, {"test", t_test}, {"true", t_true}, {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return table;
}
bool t_test(const Value& v, CallArgs&) { return v.is_string() && tests().count(v.as_string()); }

}  // namespace

Value apply_filter(const std::string& name, const Value& value, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) fail("No filter named '" + name + "'.");
  return it->second(value, args);
}

bool apply_test(const std::string& name, const Value& value, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) fail("No test named '" + name + "'.");
  return it->second(value, args);
}

}  // namespace octet::jinja

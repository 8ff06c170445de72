// Attribute/item access, Python str/dict/list methods, string helpers and the globals of
// transformers' chat-template environment (utils/chat_template_utils.py _compile_jinja_template).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "server/jinja_builtins.h"

namespace octet::jinja {

// --- Params --------------------------------------------------------------------------------------
Params::Params(const std::string& fn, const CallArgs& args, std::vector<std::string> names)
    : bound_(names.size(), nullptr) {
  if (args.args.size() > names.size())
    fail(fn + "() takes at most " + std::to_string(names.size()) + " argument(s) (" +
         std::to_string(args.args.size()) + " given)");
  for (std::size_t i = 0; i < args.args.size(); ++i) bound_[i] = &args.args[i];
  for (const auto& [key, value] : args.kwargs) {
    auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) fail(fn + "() got an unexpected keyword argument '" + key + "'");
    const std::size_t i = static_cast<std::size_t>(it - names.begin());
    if (bound_[i]) fail(fn + "() got multiple values for argument '" + key + "'");
    bound_[i] = &value;
  }
}

// --- string helpers -------------------------------------------------------------------------------
namespace {

bool py_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Simple case mappings for Latin-1, Latin Extended-A, Greek and Cyrillic (Python's str.upper /
// str.lower agree on these; other scripts are left unchanged).
char32_t to_upper_cp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x138 || c == 0x149) return c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t to_lower_cp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x130) return 'i';
    if (c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased(char32_t c) { return to_upper_cp(c) != c || to_lower_cp(c) != c; }

std::string upper_cp(char32_t c) {
  if (c == 0xDF) return "SS";  // ß
  const char32_t u = to_upper_cp(c);
  return utf8_encode(std::u32string_view(&u, 1));
}

std::string lower_cp(char32_t c) {
  const char32_t l = to_lower_cp(c);
  return utf8_encode(std::u32string_view(&l, 1));
}

}  // namespace

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  const std::u32string u = utf8_decode(s);
  std::u32string set;
  const bool custom = chars && !chars->is_none() && !chars->is_undefined();
  if (custom) {
    if (!chars->is_string()) fail("strip arg must be None or str");
    set = utf8_decode(chars->as_string());
  }
  auto strip_it = [&](char32_t c) { return custom ? set.find(c) != std::u32string::npos : py_space(c); };
  std::size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::string py_upper(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) out += upper_cp(c);
  return out;
}

std::string py_lower(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) out += lower_cp(c);
  return out;
}

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    out += prev_cased ? lower_cp(c) : upper_cp(c);
    prev_cased = is_cased(c);
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::string out;
  bool first = true;
  for (char32_t c : utf8_decode(s)) {
    out += first ? upper_cp(c) : lower_cp(c);
    first = false;
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, long count) {
  std::string out;
  if (old.empty()) {  // "abc".replace("", "-") == "-a-b-c-"
    const std::u32string u = utf8_decode(s);
    long n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      out += utf8_encode(std::u32string_view(&c, 1));
    }
    if (count < 0 || n < count) out += repl;
    return out;
  }
  std::size_t pos = 0;
  long n = 0;
  while (count < 0 || n < count) {
    const std::size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += repl;
    pos = hit + old.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string py_percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> list = args.kind() == Kind::Tuple ? args.items() : std::vector<Value>{args};
  const Dict* mapping = args.is_mapping() ? &args.dict_ref() : nullptr;
  std::size_t next = 0;
  std::string out;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) fail("incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      const std::size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) fail("format requires a mapping");
      arg = mapping->find(fmt.substr(i + 1, close - i - 1));
      if (!arg) fail("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      i = close + 1;
    }
    std::string spec = "%";
    while (i < fmt.size() && std::string("-+ #0123456789.").find(fmt[i]) != std::string::npos) spec += fmt[i++];
    if (i >= fmt.size()) fail("incomplete format");
    const char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!arg) {
      if (mapping) {
        arg = &args;
      } else {
        if (next >= list.size()) fail("not enough arguments for format string");
        arg = &list[next++];
      }
    }
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        const std::string s = conv == 's' ? to_str(*arg) : repr(*arg);
        std::snprintf(buf, sizeof buf, (spec + "s").c_str(), s.c_str());
        out += s.size() < 256 ? std::string(buf) : s;
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!arg->is_number()) fail("%" + std::string(1, conv) + " format: a number is required, not " + type_name(*arg));
        const long long v = arg->kind() == Kind::Float ? static_cast<long long>(arg->as_double()) : arg->as_int();
        std::snprintf(buf, sizeof buf, (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), v);
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg->is_number()) fail("must be real number, not " + type_name(*arg));
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), arg->as_double());
        out += buf;
        break;
      }
      default: fail(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (!mapping && next < list.size()) fail("not all arguments converted during string formatting");
  return out;
}

namespace {

// str.format with "{}", "{0}", "{name}" fields and "{{" / "}}" (no format specs).
std::string py_str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out.push_back('}');
      ++i;
    } else if (c == '{') {
      const std::size_t close = fmt.find('}', i);
      if (close == std::string::npos) fail("Single '{' encountered in format string");
      const std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!") != std::string::npos) fail("format specs in str.format are not supported");
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_index >= a.args.size()) fail("Replacement index " + std::to_string(auto_index) + " out of range");
        v = &a.args[auto_index++];
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        const std::size_t k = std::stoul(field);
        if (k >= a.args.size()) fail("Replacement index " + field + " out of range");
        v = &a.args[k];
      } else {
        for (const auto& [key, value] : a.kwargs)
          if (key == field) v = &value;
        if (!v) fail("KeyError: '" + field + "'");
      }
      out += to_str(*v);
      i = close;
    } else if (c == '}') {
      fail("Single '}' encountered in format string");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, long maxsplit) {
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {  // runs of whitespace, no empty strings
    const std::u32string u = utf8_decode(s);
    std::size_t i = 0;
    while (true) {
      while (i < u.size() && py_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<long>(parts.size()) >= maxsplit) {
        std::size_t e = u.size();
        while (e > i && py_space(u[e - 1])) --e;
        parts.push_back(utf8_encode(std::u32string_view(u).substr(i, e - i)));
        break;
      }
      std::size_t j = i;
      while (j < u.size() && !py_space(u[j])) ++j;
      parts.push_back(utf8_encode(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  if (!sep->is_string()) fail("must be str or None, not " + type_name(*sep));
  const std::string& d = sep->as_string();
  if (d.empty()) fail("empty separator");
  std::size_t pos = 0;
  while (maxsplit < 0 || static_cast<long>(parts.size()) < maxsplit) {
    const std::size_t hit = s.find(d, pos);
    if (hit == std::string::npos) break;
    parts.push_back(s.substr(pos, hit - pos));
    pos = hit + d.size();
  }
  parts.push_back(s.substr(pos));
  return parts;
}

std::vector<std::string> py_rsplit(const std::string& s, const Value* sep, long maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, -1);
  if (!sep || sep->is_none()) {
    // Split from the right on whitespace runs.
    std::u32string u = utf8_decode(s);
    std::vector<std::string> parts;
    std::size_t e = u.size();
    while (true) {
      while (e > 0 && py_space(u[e - 1])) --e;
      if (e == 0) break;
      if (static_cast<long>(parts.size()) >= maxsplit) {
        std::size_t b = 0;
        while (b < e && py_space(u[b])) ++b;
        parts.push_back(utf8_encode(std::u32string_view(u).substr(b, e - b)));
        break;
      }
      std::size_t b = e;
      while (b > 0 && !py_space(u[b - 1])) --b;
      parts.push_back(utf8_encode(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  if (!sep->is_string() || sep->as_string().empty()) fail("empty separator");
  const std::string& d = sep->as_string();
  std::vector<std::string> parts;
  std::size_t end = s.size();
  while (static_cast<long>(parts.size()) < maxsplit) {
    if (end < d.size()) break;
    const std::size_t hit = s.rfind(d, end - d.size());
    if (hit == std::string::npos) break;
    parts.push_back(s.substr(hit + d.size(), end - hit - d.size()));
    end = hit;
  }
  parts.push_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.emplace_back(p);
  return Value::list(std::move(items));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) fail(std::string(prefix ? "startswith" : "endswith") + " first arg must be str or a tuple of str");
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.kind() == Kind::Tuple) {
    for (const auto& a : affix.items())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

long count_arg(const Value* v) {
  if (!v || v->is_none()) return -1;
  if (!v->is_int()) fail("'" + type_name(*v) + "' object cannot be interpreted as an integer");
  return static_cast<long>(v->as_int());
}

Value method(const std::string& owner, const std::string& name, std::function<Value(CallArgs&)> fn) {
  return Value::function(owner + "." + name, std::move(fn));
}

Value unsafe(const std::string& type, const std::string& name) {
  return Value::function(type + "." + name, [type, name](CallArgs&) -> Value {
    fail("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
  });
}

Value str_method(const std::string& s, const std::string& name) {
  auto m = [&](std::function<Value(CallArgs&)> fn) { return method("str", name, std::move(fn)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return m([s, name, l, r](CallArgs& a) {
      Params p(name, a, {"chars"});
      return Value(py_strip(s, p.get(0), l, r));
    });
  }
  if (name == "split" || name == "rsplit") {
    return m([s, name](CallArgs& a) {
      Params p(name, a, {"sep", "maxsplit"});
      const long maxsplit = count_arg(p.get(1));
      return string_list(name == "split" ? py_split(s, p.get(0), maxsplit) : py_rsplit(s, p.get(0), maxsplit));
    });
  }
  if (name == "splitlines") {
    return m([s](CallArgs& a) {
      Params p("splitlines", a, {"keepends"});
      const bool keep = truthy(p.get_or(0, Value(false)));
      std::vector<std::string> parts;
      std::size_t start = 0;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r' || s[i] == '\v' || s[i] == '\f') {
          std::size_t end = i;
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          parts.push_back(s.substr(start, (keep ? i + 1 : end) - start));
          start = i + 1;
        }
      }
      if (start < s.size()) parts.push_back(s.substr(start));
      return string_list(parts);
    });
  }
  if (name == "startswith" || name == "endswith") {
    return m([s, name](CallArgs& a) {
      Params p(name, a, {"prefix"});
      if (!p.get(0)) fail(name + "() takes at least 1 argument (0 given)");
      return Value(affix_match(s, *p.get(0), name == "startswith"));
    });
  }
  if (name == "replace") {
    return m([s](CallArgs& a) {
      Params p("replace", a, {"old", "new", "count"});
      if (!p.get(0) || !p.get(1) || !p.get(0)->is_string() || !p.get(1)->is_string())
        fail("replace() arguments must be str");
      return Value(py_replace(s, p.get(0)->as_string(), p.get(1)->as_string(), count_arg(p.get(2))));
    });
  }
  if (name == "upper") return m([s](CallArgs&) { return Value(py_upper(s)); });
  if (name == "lower") return m([s](CallArgs&) { return Value(py_lower(s)); });
  if (name == "title") return m([s](CallArgs&) { return Value(py_title(s)); });
  if (name == "capitalize") return m([s](CallArgs&) { return Value(py_capitalize(s)); });
  if (name == "format") return m([s](CallArgs& a) { return Value(py_str_format(s, a)); });
  if (name == "join") {
    return m([s](CallArgs& a) {
      Params p("join", a, {"iterable"});
      if (!p.get(0)) fail("join() takes exactly one argument (0 given)");
      std::string out;
      bool first = true;
      for (const auto& item : iterate(*p.get(0))) {
        if (!item.is_string()) fail("sequence item: expected str instance, " + type_name(item) + " found");
        if (!first) out += s;
        out += item.as_string();
        first = false;
      }
      return Value(out);
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return m([s, name](CallArgs& a) {
      Params p(name, a, {"sub"});
      if (!p.get(0) || !p.get(0)->is_string()) fail(name + "() argument must be str");
      const std::string& sub = p.get(0)->as_string();
      if (name == "count") {
        if (sub.empty()) return Value(static_cast<std::int64_t>(utf8_length(s) + 1));
        std::int64_t n = 0;
        for (std::size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
        return Value(n);
      }
      const std::size_t hit = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
      if (hit == std::string::npos) {
        if (name == "index" || name == "rindex") fail("substring not found");
        return Value(-1);
      }
      return Value(static_cast<std::int64_t>(utf8_length(std::string_view(s).substr(0, hit))));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    return m([s, name](CallArgs& a) {
      Params p(name, a, {"affix"});
      if (!p.get(0) || !p.get(0)->is_string()) fail(name + "() argument must be str");
      const std::string& x = p.get(0)->as_string();
      if (name == "removeprefix") return Value(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
      if (x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value(s.substr(0, s.size() - x.size()));
      return Value(s);
    });
  }
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal" || name == "isalpha" || name == "isalnum" ||
      name == "isspace" || name == "islower" || name == "isupper") {
    return m([s, name](CallArgs&) {
      const std::u32string u = utf8_decode(s);
      if (u.empty()) return Value(false);
      if (name == "islower" || name == "isupper") {
        bool any = false;
        for (char32_t c : u) {
          if (!is_cased(c)) continue;
          any = true;
          if (name == "islower" ? to_lower_cp(c) != c : to_upper_cp(c) != c) return Value(false);
        }
        return Value(any);
      }
      for (char32_t c : u) {
        const bool digit = c >= '0' && c <= '9';
        const bool alpha = is_cased(c) || c > 0x2E7F;  // letters of uncased scripts count as alpha
        bool ok = false;
        if (name == "isspace") ok = py_space(c);
        else if (name == "isalpha") ok = alpha;
        else if (name == "isalnum") ok = alpha || digit;
        else ok = digit;
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "get") {
    return method("dict", name, [d](CallArgs& a) {
      Params p("get", a, {"key", "default"});
      if (!p.get(0)) fail("get expected at least 1 argument, got 0");
      if (const Value* v = d.dict_ref().find_key(*p.get(0))) return *v;
      return p.get_or(1, Value::none());
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return method("dict", name, [d, name](CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d.dict_ref().entries) {
        if (name == "items") out.push_back(Value::tuple({k, v}));
        else if (name == "keys") out.push_back(k);
        else out.push_back(v);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "copy") return method("dict", name, [d](CallArgs&) { return Value::dict(d.dict_ref()); });
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear")
    return unsafe("dict", name);
  return Value();
}

Value list_method(const Value& l, const std::string& name) {
  const std::string type = type_name(l);
  if (name == "index" || name == "count") {
    return method(type, name, [l, name](CallArgs& a) {
      Params p(name, a, {"value"});
      if (!p.get(0)) fail(name + "() takes exactly one argument (0 given)");
      std::int64_t n = 0;
      const auto& items = l.items();
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (!equals(items[i], *p.get(0))) continue;
        if (name == "index") return Value(static_cast<std::int64_t>(i));
        ++n;
      }
      if (name == "index") fail(repr(*p.get(0)) + " is not in list");
      return Value(n);
    });
  }
  if (l.kind() == Kind::List && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                                 name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
    return unsafe("list", name);
  return Value();
}

std::string type_repr(const Value& v) { return v.is_none() ? "None" : type_name(v) + " object"; }

}  // namespace

// --- access --------------------------------------------------------------------------------------
Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::Undefined: obj.fail_undefined();
    case Kind::String: return str_method(obj.as_string(), name);
    case Kind::Dict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      if (const Value* v = obj.dict_ref().find(name)) return *v;
      break;
    }
    case Kind::Namespace:
      if (const Value* v = obj.dict_ref().find(name)) return *v;
      break;
    case Kind::List:
    case Kind::Tuple: {
      Value m = list_method(obj, name);
      if (!m.is_undefined()) return m;
      break;
    }
    case Kind::Object: return obj.object_ref().attr(name);
    default: break;
  }
  return Value::undefined("'" + type_repr(obj) + "' has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::Undefined: obj.fail_undefined();
    case Kind::Dict:
    case Kind::Namespace:
      if (const Value* v = obj.dict_ref().find_key(key)) return *v;
      if (key.is_string()) return get_attr(obj, key.as_string());
      return Value::undefined("'" + type_repr(obj) + "' has no attribute " + repr(key));
    case Kind::List:
    case Kind::Tuple:
    case Kind::String: {
      if (key.is_string()) return get_attr(obj, key.as_string());
      if (!key.is_int()) return Value::undefined(type_repr(obj) + " has no element " + repr(key));
      std::int64_t i = key.as_int();
      if (obj.is_string()) {
        const std::u32string u = utf8_decode(obj.as_string());
        const auto n = static_cast<std::int64_t>(u.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(type_repr(obj) + " has no element " + repr(key));
        return Value(utf8_encode(std::u32string_view(u).substr(static_cast<std::size_t>(i), 1)));
      }
      const auto& items = obj.items();
      const auto n = static_cast<std::int64_t>(items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(type_repr(obj) + " has no element " + repr(key));
      return items[static_cast<std::size_t>(i)];
    }
    default:
      if (key.is_string()) return get_attr(obj, key.as_string());
      return Value::undefined("'" + type_repr(obj) + "' has no attribute " + repr(key));
  }
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) obj.fail_undefined();
  auto bound = [](const Value& v, const char* what) -> std::optional<std::int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int()) fail(std::string("slice ") + what + " must be an integer or None");
    return v.as_int();
  };
  const std::int64_t st = bound(step, "step").value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  std::u32string chars;
  std::int64_t n;
  if (obj.is_string()) {
    chars = utf8_decode(obj.as_string());
    n = static_cast<std::int64_t>(chars.size());
  } else if (obj.is_sequence()) {
    n = static_cast<std::int64_t>(obj.items().size());
  } else {
    fail("'" + type_name(obj) + "' object is not subscriptable");
  }
  // CPython PySlice_AdjustIndices.
  auto adjust = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
    if (!v) return dflt;
    std::int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const std::int64_t b = adjust(bound(start, "start"), st < 0 ? n - 1 : 0);
  const std::int64_t e = adjust(bound(stop, "stop"), st < 0 ? -1 : n);
  std::vector<std::size_t> idx;
  for (std::int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(static_cast<std::size_t>(i));
  if (obj.is_string()) {
    std::u32string out;
    for (std::size_t i : idx) out.push_back(chars[i]);
    return Value(utf8_encode(out));
  }
  std::vector<Value> out;
  for (std::size_t i : idx) out.push_back(obj.items()[i]);
  return obj.kind() == Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

// --- globals --------------------------------------------------------------------------------------
Dict make_globals(const std::optional<std::tm>& now) {
  Dict g;
  g.set("range", Value::function("range", [](CallArgs& a) {
          if (!a.kwargs.empty() || a.args.empty() || a.args.size() > 3) fail("range expected 1 to 3 arguments");
          for (const auto& v : a.args)
            if (!v.is_int()) fail("'" + type_name(v) + "' object cannot be interpreted as an integer");
          std::int64_t start = 0, stop, step = 1;
          if (a.args.size() == 1) {
            stop = a.args[0].as_int();
          } else {
            start = a.args[0].as_int();
            stop = a.args[1].as_int();
            if (a.args.size() == 3) step = a.args[2].as_int();
          }
          if (step == 0) fail("range() arg 3 must not be zero");
          std::vector<Value> out;
          for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (out.size() >= 100000) fail("range too big, max 100000 items");  // jinja2's sandbox limit
            out.emplace_back(i);
          }
          return Value::list(std::move(out));
        }));
  g.set("dict", Value::function("dict", [](CallArgs& a) {
          Dict d;
          if (a.args.size() > 1) fail("dict expected at most 1 argument");
          if (!a.args.empty()) {
            const Value& src = a.args[0];
            if (src.is_mapping()) {
              d = src.dict_ref();
            } else {
              for (const auto& pair : iterate(src)) {
                if (!pair.is_sequence() || pair.items().size() != 2) fail("dict() needs (key, value) pairs");
                d.set_key(pair.items()[0], pair.items()[1]);
              }
            }
          }
          for (const auto& [k, v] : a.kwargs) d.set(k, v);
          return Value::dict(std::move(d));
        }));
  g.set("namespace", Value::function("namespace", [](CallArgs& a) {
          Dict d;
          for (const auto& arg : a.args) {
            if (!arg.is_mapping()) fail("namespace() positional argument must be a mapping");
            for (const auto& [k, v] : arg.dict_ref().entries) d.set_key(k, v);
          }
          for (const auto& [k, v] : a.kwargs) d.set(k, v);
          for (const auto& [k, _] : d.entries)
            if (k.is_string() && !k.as_string().empty() && k.as_string()[0] == '_')
              fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                   k.as_string() + "'. Please rename the attribute.");
          return Value::ns(std::move(d));
        }));
  g.set("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
          Params p("raise_exception", a, {"message"});
          throw ChatTemplateError(ChatTemplateError::Kind::Raised, p.get(0) ? to_str(*p.get(0)) : "", 0);
        }));
  g.set("strftime_now", Value::function("strftime_now", [now](CallArgs& a) {
          Params p("strftime_now", a, {"format"});
          if (!p.get(0) || !p.get(0)->is_string()) fail("strftime_now() argument must be str");
          std::tm tm{};
          if (now) {
            tm = *now;
          } else {
            const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
            localtime_r(&t, &tm);
          }
          char buf[512];
          const std::size_t n = std::strftime(buf, sizeof buf, p.get(0)->as_string().c_str(), &tm);
          return Value(std::string(buf, n));
        }));
  return g;
}

}  // namespace octet::jinja

// Attribute/item access, Python str/dict/list methods and the globals of
// transformers' chat-template environment (utils/chat_template_utils.py _compile_jinja_template).
#include <algorithm>
#include <climits>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "server/jinja/jinja_builtins.h"

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

namespace {

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
        check_value_bytes(out.size());
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

// jinja2's hint "'dict object' has no attribute 'x'", built piecewise: GCC 12 warns falsely
// (-Wrestrict) on "'" + std::string&&.
Value no_attribute(const Value& obj, const std::string& what) {
  std::string hint(1, '\'');
  hint += type_repr(obj);
  hint += "' has no attribute ";
  hint += what;
  return Value::undefined(std::move(hint));
}

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
  return no_attribute(obj, "'" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::Undefined: obj.fail_undefined();
    case Kind::Dict:
    case Kind::Namespace:
      if (const Value* v = obj.dict_ref().find_key(key)) return *v;
      if (key.is_string()) return get_attr(obj, key.as_string());
      return no_attribute(obj, repr(key));
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
      return no_attribute(obj, repr(key));
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
          for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
            if (out.size() >= 100000) fail_limit("range()", "100000 items");  // jinja2's sandbox limit
            out.emplace_back(i);
            if (__builtin_add_overflow(i, step, &i)) break;  // past INT64 range: the range ends
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
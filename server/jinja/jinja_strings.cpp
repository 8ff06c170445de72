// Python str semantics on UTF-8 text for the Jinja interpreter: strip/split/replace, case
// mapping, %-formatting and str.format (CPython 3 str methods; Unicode whitespace as str.isspace).
#include "server/jinja/jinja_strings.h"

#include <algorithm>
#include <cstdio>

namespace octet::jinja {

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
      check_value_bytes(out.size());
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
    check_value_bytes(out.size());
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


std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace octet::jinja

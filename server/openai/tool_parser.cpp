#include "server/openai/tool_parser.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace octet::server {

namespace {

using nlohmann::json;

constexpr const char* kHermesStart = "<tool_call>";
constexpr const char* kHermesEnd = "</tool_call>";
constexpr const char* kLlamaBot = "<|python_tag|>";
constexpr const char* kMistralBot = "[TOOL_CALLS]";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_ws(const std::string& s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

/// One past the closing quote of the string starting at s[i] == '"', or npos.
size_t string_end(const std::string& s, size_t i) {
  for (size_t k = i + 1; k < s.size(); ++k) {
    if (s[k] == '\\') {
      ++k;
    } else if (s[k] == '"') {
      return k + 1;
    }
  }
  return std::string::npos;
}

/// The longest suffix of `text` that is a proper prefix of `tag` (vLLM's partial_tag_overlap).
size_t partial_tag_overlap(const std::string& text, const std::string& tag) {
  const size_t max = std::min(text.size(), tag.size() - 1);
  for (size_t k = max; k > 0; --k)
    if (text.compare(text.size() - k, k, tag, 0, k) == 0) return k;
  return 0;
}

std::optional<std::string> decode_string(const std::string& s, size_t begin, size_t end) {
  try {
    json v = json::parse(s.begin() + static_cast<std::ptrdiff_t>(begin),
                         s.begin() + static_cast<std::ptrdiff_t>(end));
    if (v.is_string()) return v.get<std::string>();
  } catch (const json::exception&) {
  }
  return std::nullopt;
}

/// Scans the (possibly incomplete) object starting at s[pos] == '{': its "name" string and the
/// raw text of its first key in `args_keys`. Returns one past the closing brace, or npos when
/// incomplete; *malformed is set for text that cannot become such an object.
size_t scan_call_object(const std::string& s, size_t pos, const std::vector<std::string>& args_keys,
                        PartialToolCall* call, bool* malformed) {
  *malformed = false;
  size_t i = pos + 1;
  bool have_args = false;
  while (true) {
    i = skip_ws(s, i);
    if (i >= s.size()) return std::string::npos;
    if (s[i] == '}') {
      call->complete = true;
      return i + 1;
    }
    if (s[i] == ',') {
      ++i;
      continue;
    }
    if (s[i] != '"') {
      *malformed = true;
      return std::string::npos;
    }
    const size_t ke = string_end(s, i);
    if (ke == std::string::npos) return std::string::npos;
    const std::optional<std::string> key = decode_string(s, i, ke);
    i = skip_ws(s, ke);
    if (i >= s.size()) return std::string::npos;
    if (!key || s[i] != ':') {
      *malformed = true;
      return std::string::npos;
    }
    i = skip_ws(s, i + 1);
    if (i >= s.size()) return std::string::npos;
    const bool is_args =
        !have_args && std::find(args_keys.begin(), args_keys.end(), *key) != args_keys.end();
    const size_t ve = json_value_end(s, i);
    if (*key == "name" && s[i] == '"') {
      if (ve == std::string::npos) return std::string::npos;
      call->name = decode_string(s, i, ve);
      if (!call->name) {
        *malformed = true;
        return std::string::npos;
      }
    } else if (is_args) {
      have_args = true;
      if (ve == std::string::npos) {
        // Partial: the raw text so far of an object or array value (a scalar only whole).
        if (s[i] == '{' || s[i] == '[') call->arguments = s.substr(i);
        return std::string::npos;
      }
      call->arguments = s.substr(i, ve - i);
    } else if (ve == std::string::npos) {
      return std::string::npos;
    }
    i = ve;
  }
}

/// The raw text of member `key` of the JSON object text `obj` (which json::parse accepted): its
/// last occurrence, the one a Python dict (and nlohmann) keeps. nullopt when absent.
std::optional<std::string> raw_member(const std::string& obj, const std::string& key) {
  size_t i = skip_ws(obj, 0);
  if (i >= obj.size() || obj[i] != '{') return std::nullopt;
  ++i;
  std::optional<std::string> found;
  while (true) {
    i = skip_ws(obj, i);
    if (i >= obj.size() || obj[i] == '}') return found;
    if (obj[i] == ',') {
      ++i;
      continue;
    }
    const size_t ke = string_end(obj, i);
    if (ke == std::string::npos) return found;
    const std::optional<std::string> k = decode_string(obj, i, ke);
    i = skip_ws(obj, ke);
    if (i >= obj.size() || obj[i] != ':') return found;
    i = skip_ws(obj, i + 1);
    const size_t ve = json_value_end(obj, i);
    if (ve == std::string::npos) return found;
    if (k && *k == key) found = obj.substr(i, ve - i);
    i = ve;
  }
}

/// The raw texts of the elements of the JSON array text `arr` (which json::parse accepted).
std::vector<std::string> raw_elements(const std::string& arr) {
  std::vector<std::string> out;
  size_t i = skip_ws(arr, 0);
  if (i >= arr.size() || arr[i] != '[') return out;
  ++i;
  while (true) {
    i = skip_ws(arr, i);
    if (i >= arr.size() || arr[i] == ']') return out;
    if (arr[i] == ',') {
      ++i;
      continue;
    }
    const size_t e = json_value_end(arr, i);
    if (e == std::string::npos) return out;
    out.push_back(arr.substr(i, e - i));
    i = e;
  }
}

/// A call from its parsed object `obj` and that object's text: the name, and the arguments
/// value's own text (python_json_text), never re-serialized through doubles. Throws (vLLM's
/// fallback to content) when the name or the arguments are missing.
ParsedToolCall call_from(const json& obj, const std::string& obj_text, const char* args_key) {
  ParsedToolCall c;
  c.name = obj.at("name").get<std::string>();
  obj.at(args_key);
  const std::optional<std::string> raw = raw_member(obj_text, args_key);
  const std::optional<std::string> text = raw ? python_json_text(*raw) : std::nullopt;
  if (!text) throw std::runtime_error("the tool call's arguments are not JSON");
  c.arguments = *text;
  return c;
}

const char* args_key_of(const json& obj) {
  return obj.contains("arguments") ? "arguments" : "parameters";
}

ExtractedToolCalls as_content(const std::string& text) {
  ExtractedToolCalls out;
  out.content = text;
  return out;
}

ExtractedToolCalls extract_hermes(const std::string& text) {
  const size_t first = text.find(kHermesStart);
  if (first == std::string::npos) return as_content(text);
  ExtractedToolCalls out;
  try {
    size_t pos = first;
    while (pos != std::string::npos) {
      const size_t body = pos + std::string(kHermesStart).size();
      const size_t end = text.find(kHermesEnd, body);
      const std::string obj_text =
          text.substr(body, end == std::string::npos ? std::string::npos : end - body);
      out.calls.push_back(call_from(json::parse(obj_text), obj_text, "arguments"));
      if (end == std::string::npos) break;
      pos = text.find(kHermesStart, end + std::string(kHermesEnd).size());
    }
  } catch (const std::exception&) {  // json parse / type / missing key: vLLM's fallback
    return as_content(text);
  }
  if (first > 0) out.content = text.substr(0, first);
  return out;
}

ExtractedToolCalls extract_llama3(const std::string& text) {
  if (text.find(kLlamaBot) == std::string::npos && text.find('{') == std::string::npos)
    return as_content(text);
  ExtractedToolCalls out;
  size_t end_index = 0;
  bool any = false;
  for (size_t start = text.find('{'); start != std::string::npos; start = text.find('{', start + 1)) {
    if (any && start < end_index) continue;  // inside a parsed object
    const size_t end = json_value_end(text, start);
    if (end == std::string::npos) return as_content(text);
    try {
      const std::string obj_text = text.substr(start, end - start);
      const json obj = json::parse(obj_text);
      if (!obj.is_object() || !obj.contains("name") ||
          !(obj.contains("arguments") || obj.contains("parameters")))
        return as_content(text);
      out.calls.push_back(call_from(obj, obj_text, args_key_of(obj)));
    } catch (const std::exception&) {
      return as_content(text);
    }
    end_index = end;
    any = true;
  }
  if (out.calls.empty()) return as_content(text);
  return out;  // content null, as vLLM
}

ExtractedToolCalls extract_mistral(const std::string& text) {
  const size_t bot = text.find(kMistralBot);
  if (bot == std::string::npos) return as_content(text);
  ExtractedToolCalls out;
  std::string rest;
  for (size_t pos = bot; pos != std::string::npos;) {  // every [TOOL_CALLS] removed
    const size_t from = pos + std::string(kMistralBot).size();
    const size_t next = text.find(kMistralBot, from);
    rest += text.substr(from, next == std::string::npos ? std::string::npos : next - from);
    pos = next;
  }
  try {
    json calls = json::parse(rest);
    std::vector<std::string> texts;
    if (calls.is_object()) {
      calls = json::array({calls});
      texts.push_back(rest);
    } else {
      texts = raw_elements(rest);
    }
    if (!calls.is_array() || texts.size() != calls.size())
      throw std::runtime_error("not a list of calls");
    for (size_t k = 0; k < calls.size(); ++k)
      out.calls.push_back(call_from(calls[k], texts[k], args_key_of(calls[k])));
  } catch (const std::exception&) {
    return as_content(text);
  }
  if (out.calls.empty()) return as_content(text);
  if (bot > 0) out.content = text.substr(0, bot);
  return out;
}

/// One past the end of the JSON number literal at s[i], or npos when there is none.
size_t number_end(const std::string& s, size_t i) {
  const auto digits = [&](size_t k) {
    while (k < s.size() && s[k] >= '0' && s[k] <= '9') ++k;
    return k;
  };
  size_t k = i;
  if (k < s.size() && s[k] == '-') ++k;
  if (k >= s.size()) return std::string::npos;
  if (s[k] == '0') {
    ++k;
  } else if (s[k] >= '1' && s[k] <= '9') {
    k = digits(k);
  } else {
    return std::string::npos;
  }
  if (k < s.size() && s[k] == '.') {
    const size_t d = k + 1;
    k = digits(d);
    if (k == d) return std::string::npos;
  }
  if (k < s.size() && (s[k] == 'e' || s[k] == 'E')) {
    size_t d = k + 1;
    if (d < s.size() && (s[d] == '+' || s[d] == '-')) ++d;
    k = digits(d);
    if (k == d) return std::string::npos;
  }
  return k;
}

/// A decimal number literal's value as 0.digits x 10^point: significant digits without leading
/// or trailing zeros ("" for zero, then point 0). nullopt for an exponent past 10^9 digits.
struct Decimal {
  bool negative = false;
  std::string digits;
  int64_t point = 0;
};
std::optional<Decimal> decimal_of(const std::string& lit) {
  Decimal d;
  size_t i = 0;
  if (i < lit.size() && lit[i] == '-') {
    d.negative = true;
    ++i;
  }
  bool fraction = false;
  for (; i < lit.size() && lit[i] != 'e' && lit[i] != 'E'; ++i) {
    if (lit[i] == '.') {
      fraction = true;
      continue;
    }
    d.digits += lit[i];
    if (!fraction) ++d.point;
  }
  if (i < lit.size()) {
    ++i;
    bool negative_exp = false;
    if (i < lit.size() && (lit[i] == '+' || lit[i] == '-')) negative_exp = lit[i++] == '-';
    while (i + 1 < lit.size() && lit[i] == '0') ++i;
    if (lit.size() - i > 9) return std::nullopt;
    const int64_t e = std::stoll(lit.substr(i));
    d.point += negative_exp ? -e : e;
  }
  const size_t lead = d.digits.find_first_not_of('0');
  if (lead == std::string::npos) return Decimal{d.negative, "", 0};
  d.point -= static_cast<int64_t>(lead);
  d.digits.erase(0, lead);
  d.digits.erase(d.digits.find_last_not_of('0') + 1);
  return d;
}

/// Python's repr() of a finite double: the shortest digits that round-trip, fixed notation
/// for 1e-4 <= |v| < 1e16 (with ".0" when integral), else d.ddde+XX.
std::string python_float_repr(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-1.25e+17", "0e+00"
  std::string out;
  if (sci[0] == '-') {
    out = "-";
    sci.erase(0, 1);
  }
  const size_t epos = sci.find('e');
  std::string digits;
  for (size_t k = 0; k < epos; ++k)
    if (sci[k] != '.') digits += sci[k];
  if (digits == "0") return out + "0.0";
  const int decpt = std::stoi(sci.substr(epos + 1)) + 1;  // v = 0.digits x 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return out + "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    if (decpt >= n) return out + digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
    return out + digits.substr(0, static_cast<size_t>(decpt)) + "." +
           digits.substr(static_cast<size_t>(decpt));
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  const int e = decpt - 1;
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
  return out + eb;
}

/// A number literal as Python's json.dumps(json.loads(lit)) writes it, when that keeps its
/// value exactly; the literal otherwise.
std::string python_number(const std::string& lit) {
  if (lit.find_first_of(".eE") == std::string::npos) return lit == "-0" ? "0" : lit;  // int
  double v = 0.0;
  const auto r = std::from_chars(lit.data(), lit.data() + lit.size(), v);
  if (r.ec != std::errc() || r.ptr != lit.data() + lit.size() || !std::isfinite(v)) return lit;
  const std::string repr = python_float_repr(v);
  const std::optional<Decimal> a = decimal_of(lit), b = decimal_of(repr);
  if (a && b && a->negative == b->negative && a->digits == b->digits && a->point == b->point)
    return repr;
  return lit;
}

/// Scans call objects separated by `sep` (',' in an array, ';' for llama3) from `pos`; stops at
/// `close` (or the end). Appends to out->calls.
void scan_calls(const std::string& s, size_t pos, char sep, char close,
                const std::vector<std::string>& args_keys, PartialToolOutput* out) {
  while (true) {
    pos = skip_ws(s, pos);
    if (pos >= s.size() || s[pos] == close) return;
    if (s[pos] == sep) {
      ++pos;
      continue;
    }
    if (s[pos] != '{') return;
    PartialToolCall call;
    bool malformed = false;
    const size_t end = scan_call_object(s, pos, args_keys, &call, &malformed);
    if (malformed) return;
    out->calls.push_back(std::move(call));
    if (end == std::string::npos) return;
    pos = end;
  }
}

}  // namespace

std::optional<ToolParserKind> tool_parser_from_name(const std::string& name) {
  if (name == "hermes") return ToolParserKind::kHermes;
  if (name == "llama3_json") return ToolParserKind::kLlama3Json;
  if (name == "mistral") return ToolParserKind::kMistral;
  return std::nullopt;
}

const char* tool_parser_names() { return "hermes, llama3_json, mistral"; }

size_t json_value_end(const std::string& s, size_t pos) {
  size_t i = skip_ws(s, pos);
  if (i >= s.size()) return std::string::npos;
  const char c = s[i];
  if (c == '"') return string_end(s, i);
  if (c == '{' || c == '[') {
    std::vector<char> stack;
    for (; i < s.size(); ++i) {
      const char d = s[i];
      if (d == '"') {
        const size_t e = string_end(s, i);
        if (e == std::string::npos) return std::string::npos;
        i = e - 1;
      } else if (d == '{' || d == '[') {
        stack.push_back(d == '{' ? '}' : ']');
      } else if (d == '}' || d == ']') {
        if (stack.empty() || stack.back() != d) return std::string::npos;
        stack.pop_back();
        if (stack.empty()) return i + 1;
      }
    }
    return std::string::npos;
  }
  // A scalar: up to a delimiter; one that reaches the end of the text may still grow.
  while (i < s.size() && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ';')
    ++i;
  return i >= s.size() ? std::string::npos : i;
}

std::optional<std::string> python_json_text(const std::string& raw) {
  enum class Want { kValue, kValueOrClose, kKeyOrClose, kKey, kColon, kCommaOrClose, kEnd };
  std::vector<char> open;  // '{' / '[' of the containers around the position
  std::string out;
  out.reserve(raw.size() + raw.size() / 4);
  Want want = Want::kValue;
  const auto after_value = [&] { want = open.empty() ? Want::kEnd : Want::kCommaOrClose; };
  const auto close = [&](char c) {
    out += c;
    open.pop_back();
    after_value();
  };
  for (size_t i = skip_ws(raw, 0); i < raw.size(); i = skip_ws(raw, i)) {
    const char c = raw[i];
    switch (want) {
      case Want::kEnd: return std::nullopt;  // text after the value
      case Want::kColon:
        if (c != ':') return std::nullopt;
        out += ": ";
        ++i;
        want = Want::kValue;
        continue;
      case Want::kCommaOrClose:
        if (c == ',') {
          out += ", ";
          ++i;
          want = open.back() == '{' ? Want::kKey : Want::kValue;
        } else if (c == (open.back() == '{' ? '}' : ']')) {
          close(c);
          ++i;
        } else {
          return std::nullopt;
        }
        continue;
      case Want::kKeyOrClose:
      case Want::kKey: {
        if (c == '}' && want == Want::kKeyOrClose) {
          close(c);
          ++i;
          continue;
        }
        if (c != '"') return std::nullopt;
        const size_t e = string_end(raw, i);
        if (e == std::string::npos) return std::nullopt;
        const std::optional<std::string> key = decode_string(raw, i, e);
        if (!key) return std::nullopt;
        out += json(*key).dump(-1, ' ', false, json::error_handler_t::replace);
        i = e;
        want = Want::kColon;
        continue;
      }
      case Want::kValueOrClose:
      case Want::kValue:
        break;
    }
    if (c == ']' && want == Want::kValueOrClose) {
      close(c);
      ++i;
    } else if (c == '{' || c == '[') {
      open.push_back(c);
      out += c;
      ++i;
      want = c == '{' ? Want::kKeyOrClose : Want::kValueOrClose;
    } else if (c == '"') {
      const size_t e = string_end(raw, i);
      if (e == std::string::npos) return std::nullopt;
      const std::optional<std::string> v = decode_string(raw, i, e);
      if (!v) return std::nullopt;
      out += json(*v).dump(-1, ' ', false, json::error_handler_t::replace);
      i = e;
      after_value();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t e = number_end(raw, i);
      if (e == std::string::npos) return std::nullopt;
      out += python_number(raw.substr(i, e - i));
      i = e;
      after_value();
    } else {
      bool literal = false;
      for (const char* word : {"true", "false", "null"}) {
        const size_t n = std::char_traits<char>::length(word);
        if (raw.compare(i, n, word) == 0) {
          out += word;
          i += n;
          literal = true;
          break;
        }
      }
      if (!literal) return std::nullopt;
      after_value();
    }
  }
  if (want != Want::kEnd) return std::nullopt;
  return out;
}

ExtractedToolCalls extract_tool_calls(ToolParserKind kind, const std::string& text) {
  switch (kind) {
    case ToolParserKind::kHermes: return extract_hermes(text);
    case ToolParserKind::kLlama3Json: return extract_llama3(text);
    case ToolParserKind::kMistral: return extract_mistral(text);
  }
  return as_content(text);
}

std::vector<ParsedToolCall> parse_required_tool_calls(const std::string& text) {
  std::vector<ParsedToolCall> calls;
  try {
    const json arr = json::parse(text);
    if (!arr.is_array()) return {};
    const std::vector<std::string> texts = raw_elements(text);
    if (texts.size() != arr.size()) return {};
    for (size_t k = 0; k < arr.size(); ++k) calls.push_back(call_from(arr[k], texts[k], "parameters"));
  } catch (const std::exception&) {
    return {};
  }
  return calls;
}

PartialToolOutput parse_partial_tool_calls(ToolParserKind kind, const std::string& text) {
  PartialToolOutput out;
  if (kind == ToolParserKind::kHermes) {
    const std::string start(kHermesStart), end(kHermesEnd);
    const size_t first = text.find(start);
    out.content_end =
        first != std::string::npos ? first : text.size() - partial_tag_overlap(text, start);
    for (size_t pos = first; pos != std::string::npos;) {
      const size_t body = pos + start.size();
      const size_t close = text.find(end, body);
      std::string region = close != std::string::npos ? text.substr(body, close - body)
                                                      : text.substr(body);
      if (close == std::string::npos) region.resize(region.size() - partial_tag_overlap(region, end));
      const size_t brace = skip_ws(region, 0);
      if (brace >= region.size() || region[brace] != '{') break;  // nothing to show yet
      PartialToolCall call;
      bool malformed = false;
      scan_call_object(region, brace, {"arguments"}, &call, &malformed);
      if (malformed) break;
      out.calls.push_back(std::move(call));
      if (close == std::string::npos) break;
      pos = text.find(start, close + end.size());
    }
    return out;
  }
  if (kind == ToolParserKind::kLlama3Json) {
    const std::string bot(kLlamaBot);
    size_t pos = 0;
    if (text.compare(0, bot.size(), bot) == 0) {
      pos = bot.size();
    } else if (text.empty() || text[0] != '{') {
      // Not a tool call (vLLM streams it as content); a possible bot-token prefix waits.
      out.content_end =
          text.size() < bot.size() && bot.compare(0, text.size(), text) == 0 ? 0 : text.size();
      return out;
    }
    scan_calls(text, pos, ';', '\0', {"parameters", "arguments"}, &out);
    return out;
  }
  // mistral
  const std::string bot(kMistralBot);
  const size_t at = text.find(bot);
  if (at == std::string::npos) {
    out.content_end = text.size() - partial_tag_overlap(text, bot);
    return out;
  }
  out.content_end = at;
  size_t pos = skip_ws(text, at + bot.size());
  if (pos < text.size() && text[pos] == '[') scan_calls(text, pos + 1, ',', ']', {"arguments", "parameters"}, &out);
  else if (pos < text.size() && text[pos] == '{') scan_calls(text, pos, ',', ']', {"arguments", "parameters"}, &out);
  return out;
}

PartialToolOutput parse_partial_required(const std::string& text) {
  PartialToolOutput out;
  const size_t pos = skip_ws(text, 0);
  if (pos < text.size() && text[pos] == '[') scan_calls(text, pos + 1, ',', ']', {"parameters"}, &out);
  return out;
}

}  // namespace octet::server

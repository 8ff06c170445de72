#include "server/openai/tool_parser.h"

#include <algorithm>

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

ParsedToolCall call_from(const json& obj, const char* args_key) {
  ParsedToolCall c;
  c.name = obj.at("name").get<std::string>();
  c.arguments = python_json_dumps(obj.at(args_key));
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
      const json obj = json::parse(text.substr(body, end == std::string::npos ? std::string::npos
                                                                              : end - body));
      out.calls.push_back(call_from(obj, "arguments"));
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
      const json obj = json::parse(text.substr(start, end - start));
      if (!obj.is_object() || !obj.contains("name") ||
          !(obj.contains("arguments") || obj.contains("parameters")))
        return as_content(text);
      out.calls.push_back(call_from(obj, args_key_of(obj)));
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
    if (calls.is_object()) calls = json::array({calls});
    for (const json& obj : calls) out.calls.push_back(call_from(obj, args_key_of(obj)));
  } catch (const std::exception&) {
    return as_content(text);
  }
  if (out.calls.empty()) return as_content(text);
  if (bot > 0) out.content = text.substr(0, bot);
  return out;
}

void dumps(const json& v, std::string& out, int depth) {
  if (depth > 256) {  // deeper than any schema: compact, still valid JSON
    out += v.dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace);
      out += ": ";
      dumps(it.value(), out, depth + 1);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t k = 0; k < v.size(); ++k) {
      if (k) out += ", ";
      dumps(v[k], out, depth + 1);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
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

std::string python_json_dumps(const json& v) {
  std::string out;
  dumps(v, out, 0);
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
    for (const json& obj : arr) calls.push_back(call_from(obj, "parameters"));
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

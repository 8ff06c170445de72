// Structured-output specs -> xgrammar grammars, and their validation (structured_output.h).
#include "engine/structured_output.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <picojson.h>

#include "config/file_read.h"
#include "engine/grammar_compiler.h"
#include "engine/json_schema_compat.h"
#include "engine/request_error.h"
#include "engine/xgrammar_log.h"

namespace octet {
namespace {

/// `s` as an xgrammar EBNF string literal: '"' and '\' escaped, control bytes as \uXXXX (fixed
/// width: \x takes any number of hex digits), other bytes (UTF-8) as they are.
std::string ebnf_literal(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

[[noreturn]] void invalid(const StructuredOutputParams& p, const std::string& what) {
  throw RequestError(RequestErrorKind::InvalidRequest,
                     std::string("invalid ") + structured_output_kind_name(p.kind) + " for '" +
                         p.field + "': " + what,
                     p.field);
}

/// Bytes of JSON text in the enum and const values of schema `v`, at any depth (stops counting
/// past `limit`).
size_t literal_bytes(const picojson::value& v, size_t limit) {
  size_t n = 0;
  if (v.is<picojson::object>()) {
    for (const auto& [key, child] : v.get<picojson::object>()) {
      if (n > limit) break;
      if (key == "enum" && child.is<picojson::array>()) {
        for (const picojson::value& e : child.get<picojson::array>()) n += e.serialize().size();
      } else if (key == "const") {
        n += child.serialize().size();
      } else {
        n += literal_bytes(child, limit);
      }
    }
  } else if (v.is<picojson::array>()) {
    for (const picojson::value& e : v.get<picojson::array>()) {
      if (n > limit) break;
      n += literal_bytes(e, limit);
    }
  }
  return n;
}

/// The largest count of a counted repetition ({n}, {n,}, {n,m}) in regex `re` and the sum of
/// all its counts (each saturating at limit + 1). Escapes and bracket classes are skipped.
std::pair<int64_t, int64_t> repeat_counts(const std::string& re, int64_t limit) {
  int64_t max = 0, sum = 0;
  const auto number = [&](size_t& i) {
    int64_t n = 0;
    while (i < re.size() && re[i] >= '0' && re[i] <= '9') n = std::min(limit + 1, n * 10 + (re[i++] - '0'));
    return n;
  };
  for (size_t i = 0; i < re.size(); ++i) {
    if (re[i] == '\\') {
      ++i;
    } else if (re[i] == '[') {
      size_t j = i + 1;
      if (j < re.size() && re[j] == '^') ++j;
      if (j < re.size() && re[j] == ']') ++j;  // a leading ']' is a member
      for (; j < re.size() && re[j] != ']'; ++j)
        if (re[j] == '\\') ++j;
      i = j;
    } else if (re[i] == '{') {
      size_t j = i + 1;
      const size_t digits = j;
      int64_t n = number(j);
      if (j == digits) continue;  // a literal '{'
      if (j < re.size() && re[j] == ',') {
        ++j;
        n = std::max(n, number(j));
      }
      if (j >= re.size() || re[j] != '}') continue;
      max = std::max(max, n);
      sum = std::min(limit + 1, sum + n);
      i = j;
    }
  }
  return {max, sum};
}

/// The regexes of the `pattern` keywords in schema `v`, at any depth, appended to `out`.
void patterns(const picojson::value& v, std::vector<std::string>* out) {
  if (v.is<picojson::object>()) {
    for (const auto& [key, child] : v.get<picojson::object>()) {
      if (key == "pattern" && child.is<std::string>())
        out->push_back(child.get<std::string>());
      else if (key != "enum" && key != "const" && key != "default" && key != "examples")
        patterns(child, out);
    }
  } else if (v.is<picojson::array>()) {
    for (const picojson::value& e : v.get<picojson::array>()) patterns(e, out);
  }
}

/// A JSON schema beyond the bounds of structured_output.h (nesting, enum and const bytes,
/// pattern repetition counts): invalid. A text that does not parse is left to xgrammar's error.
void check_json_schema_cost(const StructuredOutputParams& p) {
  if (json_nesting_depth(p.spec, kMaxStructuredSpecDepth) > kMaxStructuredSpecDepth)
    invalid(p, "the schema is nested deeper than " + std::to_string(kMaxStructuredSpecDepth) +
                   " levels");
  picojson::value v;
  if (!picojson::parse(v, p.spec).empty()) return;
  const size_t n = literal_bytes(v, kMaxStructuredChoiceBytes);
  if (n > kMaxStructuredChoiceBytes)
    invalid(p, "enum and const values of at most " + std::to_string(kMaxStructuredChoiceBytes) +
                   " bytes in all are supported (compiling more takes too long), got more than " +
                   std::to_string(kMaxStructuredChoiceBytes));
  std::vector<std::string> res;
  patterns(v, &res);
  int64_t total = 0;
  for (const std::string& re : res) {
    const auto [max, sum] = repeat_counts(re, kMaxPatternRepeatTotal);
    if (max > kMaxPatternRepeat)
      invalid(p, "a pattern's repetition counts ({n,m}) of at most " +
                     std::to_string(kMaxPatternRepeat) +
                     " are supported (compiling more takes too long), got " +
                     (max > kMaxPatternRepeatTotal ? "more than " + std::to_string(kMaxPatternRepeatTotal)
                                                   : std::to_string(max)) +
                     " in " + (re.size() > 80 ? re.substr(0, 80) + "..." : re));
    total = std::min(kMaxPatternRepeatTotal + 1, total + sum);
  }
  if (total > kMaxPatternRepeatTotal)
    invalid(p, "patterns' repetition counts ({n,m}) of at most " +
                   std::to_string(kMaxPatternRepeatTotal) +
                   " in all are supported (compiling more takes too long), got more");
}

/// With any_whitespace, at most kMaxJsonWhitespace whitespace characters between two JSON
/// tokens (llama.cpp's JSON-schema grammars allow a newline and 20 more): unbounded, a small
/// model at temperature 0 may emit newlines until max_tokens (seen with SmolLM2-135M).
std::optional<int> whitespace_bound(const StructuredOutputParams& p) {
  return p.any_whitespace ? std::optional<int>(kMaxJsonWhitespace) : std::nullopt;
}

xgrammar::Grammar build(const StructuredOutputParams& p, const xgrammar::TokenizerInfo* info) {
  switch (p.kind) {
    case StructuredOutputKind::Json: {
      check_json_schema_cost(p);
      const std::optional<std::string> rewritten = rewrite_tuple_items(p.spec);
      return xgrammar::Grammar::FromJSONSchema(rewritten ? *rewritten : p.spec, p.any_whitespace,
                                               std::nullopt, std::nullopt, true,
                                               whitespace_bound(p));
    }
    case StructuredOutputKind::JsonObject:
      // As vLLM's xgrammar backend: any JSON object.
      return xgrammar::Grammar::FromJSONSchema("{\"type\": \"object\"}", p.any_whitespace,
                                               std::nullopt, std::nullopt, true,
                                               whitespace_bound(p));
    case StructuredOutputKind::Regex:
      return xgrammar::Grammar::FromRegex(p.spec);
    case StructuredOutputKind::Choice: {
      if (p.choice.empty()) invalid(p, "the choice list is empty");
      std::string ebnf = "root ::= ";
      for (size_t i = 0; i < p.choice.size(); ++i)
        ebnf += (i ? " | " : "") + ebnf_literal(p.choice[i]);
      return xgrammar::Grammar::FromEBNF(ebnf);
    }
    case StructuredOutputKind::Grammar:
      return xgrammar::Grammar::FromEBNF(p.spec);
    case StructuredOutputKind::StructuralTag: {
      check_json_schema_cost(p);  // its json_schema and regex formats compile as these do
      auto r = info ? xgrammar::Grammar::FromStructuralTag(p.spec, *info)
                    : xgrammar::Grammar::FromStructuralTag(p.spec);
      if (auto* g = std::get_if<xgrammar::Grammar>(&r)) return *g;
      std::string msg;
      std::visit([&](const auto& e) { msg = xgrammar_error_message(e.what()); }, std::get<1>(r));
      invalid(p, msg);
    }
    case StructuredOutputKind::None:
      break;
  }
  invalid(p, "no constraint given");
}

}  // namespace

const char* structured_output_kind_name(StructuredOutputKind kind) {
  switch (kind) {
    case StructuredOutputKind::None: return "none";
    case StructuredOutputKind::Json: return "json";
    case StructuredOutputKind::JsonObject: return "json_object";
    case StructuredOutputKind::Regex: return "regex";
    case StructuredOutputKind::Choice: return "choice";
    case StructuredOutputKind::Grammar: return "grammar";
    case StructuredOutputKind::StructuralTag: return "structural_tag";
  }
  return "unknown";
}

std::string structured_output_key(const StructuredOutputParams& p) {
  std::string key = structured_output_kind_name(p.kind);
  key += p.any_whitespace ? ":ws:" : ":compact:";
  if (p.kind == StructuredOutputKind::Choice) {
    // Length-prefixed, so no two lists share a key.
    for (const std::string& c : p.choice) key += std::to_string(c.size()) + ":" + c;
  } else {
    key += p.spec;
  }
  return key;
}

xgrammar::Grammar build_grammar(const StructuredOutputParams& p,
                                const xgrammar::TokenizerInfo* tokenizer_info) {
  try {
    return build(p, tokenizer_info);
  } catch (const RequestError&) {
    throw;
  } catch (const std::exception& e) {
    // xgrammar's errors are std::runtime_error; LogFatalError's text carries a time and a source
    // path, which the client gets without.
    invalid(p, xgrammar_error_message(e.what()));
  }
}

void validate_structured_output(const StructuredOutputParams& p) {
  if (!p.active()) return;
  (void)build_grammar(p);
}

}  // namespace octet

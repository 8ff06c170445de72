// Structured-output specs -> xgrammar grammars, and their validation (structured_output.h).
#include "engine/structured_output.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
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

/// What a regex costs xgrammar to build and compile (each figure saturating at limit + 1).
struct RegexCost {
  int64_t max_count = 0;   // largest count of a counted repetition {n}, {n,}, {n,m}
  int64_t sum_counts = 0;  // all those counts
  int64_t nested = 0;      // largest count product of a quantified group holding quantifiers
  int64_t variable = 0;    // variable-length copies beyond the largest run (see regex_cost)
};

/// The cost figures of regex `re`, in one pass with a stack of groups (no recursion). Escapes
/// (\u{...} included) and bracket classes are atoms. A quantifier's count is m of {n,m} (n of
/// {n,}), 1 for ?, 2 for * and +; its variable copies are m - n (1 for ?, *, + and {n,}), times
/// the counts of the quantified groups around it; each '|' is one variable copy (branches of
/// other lengths: `(|.)` is `.?`). Adjacent variable-length runs are what make
/// xgrammar slow (24 x `.{0,3}` 23 s, 24 x `.?` 1.1 s, one `.{0,1000}` 0.4 s), so `variable`
/// sums them all but the largest.
RegexCost regex_cost(const std::string& re, int64_t limit) {
  RegexCost c;
  const auto cap = [&](int64_t v) { return std::min(limit + 1, v); };
  const auto number = [&](size_t& i) {
    int64_t n = 0;
    while (i < re.size() && re[i] >= '0' && re[i] <= '9') n = cap(n * 10 + (re[i++] - '0'));
    return n;
  };
  struct Part {
    int64_t inner = 0;  // largest quantifier product inside (0: no quantifier)
    int64_t var_sum = 0, var_max = 0;
  };
  std::vector<Part> groups(1);  // the open groups, outermost first
  Part last;                    // the last atom or group, not yet added to its group
  const auto flush = [&] {
    Part& g = groups.back();
    g.inner = std::max(g.inner, last.inner);
    g.var_sum = cap(g.var_sum + last.var_sum);
    g.var_max = std::max(g.var_max, last.var_max);
    last = Part{};
  };
  const auto quantify = [&](int64_t k, int64_t variable) {
    k = std::max<int64_t>(k, 1);
    const int64_t product = cap(k * std::max<int64_t>(last.inner, 1));
    if (last.inner > 0) c.nested = std::max(c.nested, product);
    last.inner = product;
    last.var_sum = cap(last.var_sum * k + variable);
    last.var_max = std::max(last.var_max, variable);  // one copy of a repeated group
    flush();
  };
  for (size_t i = 0; i < re.size(); ++i) {
    const char ch = re[i];
    if (ch == '?' || ch == '*' || ch == '+') {
      quantify(ch == '?' ? 1 : 2, 1);
      if (i + 1 < re.size() && (re[i + 1] == '?' || re[i + 1] == '+')) ++i;  // lazy, possessive
      continue;
    }
    if (ch == '{') {
      const auto spaces = [&](size_t& j) {
        while (j < re.size() && re[j] == ' ') ++j;  // xgrammar reads {0, 3} as {0,3}
      };
      size_t j = i + 1;
      spaces(j);
      const size_t digits = j;
      const int64_t n = number(j);
      spaces(j);
      if (j != digits) {
        int64_t m = n;
        bool open_ended = false;
        if (j < re.size() && re[j] == ',') {
          ++j;
          spaces(j);
          const size_t m_digits = j;
          m = number(j);
          open_ended = j == m_digits;
          spaces(j);
        }
        if (j < re.size() && re[j] == '}') {
          const int64_t k = open_ended ? n : std::max(n, m);
          c.max_count = std::max(c.max_count, k);
          c.sum_counts = cap(c.sum_counts + k);
          quantify(k, open_ended ? 1 : std::max<int64_t>(m - n, 0));
          i = j;
          if (i + 1 < re.size() && (re[i + 1] == '?' || re[i + 1] == '+')) ++i;
          continue;
        }
      }
      // Not a count: a literal '{', an atom.
    }
    flush();
    if (ch == '|') {  // branches of other lengths: one variable copy, as a '?'
      groups.back().var_sum = cap(groups.back().var_sum + 1);
      groups.back().var_max = std::max<int64_t>(groups.back().var_max, 1);
    } else if (ch == '\\') {
      ++i;
      // \u{10FFFF}, \x{41}, \p{L}: the braces are part of the escape.
      if (i + 1 < re.size() && std::string_view("uxpP").find(re[i]) != std::string_view::npos &&
          re[i + 1] == '{') {
        const size_t close = re.find('}', i + 1);
        i = close == std::string::npos ? re.size() : close;
      }
    } else if (ch == '[') {
      size_t j = i + 1;
      if (j < re.size() && re[j] == '^') ++j;
      if (j < re.size() && re[j] == ']') ++j;  // a leading ']' is a member
      for (; j < re.size() && re[j] != ']'; ++j)
        if (re[j] == '\\') ++j;
      i = j;
    } else if (ch == '(') {
      groups.emplace_back();
      if (i + 1 < re.size() && re[i + 1] == '?') {  // (?:, (?=, (?!, (?<=, (?<!, (?<name>
        i += 2;
        if (i < re.size() && re[i] == '<') {
          if (i + 1 < re.size() && (re[i + 1] == '=' || re[i + 1] == '!')) ++i;
          else i = std::min(re.size(), re.find('>', i));
        }
      }
    } else if (ch == ')' && groups.size() > 1) {
      last = groups.back();
      groups.pop_back();
    }
  }
  flush();
  while (groups.size() > 1) {  // unclosed groups (xgrammar rejects them)
    last = groups.back();
    groups.pop_back();
    flush();
  }
  c.variable = groups[0].var_sum - groups[0].var_max;
  return c;
}

/// The regexes of schema `v`, at any depth: `pattern` values and `patternProperties` keys.
/// `names`: `v` maps names to schemas (properties, $defs, ...), so its keys are not keywords.
void patterns(const picojson::value& v, bool names, std::vector<std::string>* out) {
  if (v.is<picojson::object>()) {
    for (const auto& [key, child] : v.get<picojson::object>()) {
      if (names) {
        patterns(child, false, out);
      } else if (key == "pattern" && child.is<std::string>()) {
        out->push_back(child.get<std::string>());
      } else if (key == "patternProperties" && child.is<picojson::object>()) {
        for (const auto& [re, schema] : child.get<picojson::object>()) {
          out->push_back(re);
          patterns(schema, false, out);
        }
      } else if (key != "enum" && key != "const" && key != "default" && key != "examples") {
        patterns(child,
                 key == "properties" || key == "$defs" || key == "definitions" ||
                     key == "dependentSchemas",
                 out);
      }
    }
  } else if (v.is<picojson::array>()) {
    for (const picojson::value& e : v.get<picojson::array>()) patterns(e, false, out);
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
  patterns(v, false, &res);
  const auto cut = [](const std::string& re) { return re.size() > 80 ? re.substr(0, 80) + "..." : re; };
  const auto too_costly = [&](const std::string& what, int64_t bound, int64_t got,
                              const std::string& re) {
    invalid(p, what + " of at most " + std::to_string(bound) +
                   " are supported (compiling more takes too long), got " +
                   (got > kMaxPatternRepeatTotal ? "more than " + std::to_string(kMaxPatternRepeatTotal)
                                                 : std::to_string(got)) +
                   (re.empty() ? "" : " in " + cut(re)));
  };
  int64_t total = 0, variable = 0;
  for (const std::string& re : res) {
    const RegexCost c = regex_cost(re, kMaxPatternRepeatTotal);
    if (c.max_count > kMaxPatternRepeat)
      too_costly("a pattern's repetition counts ({n,m})", kMaxPatternRepeat, c.max_count, re);
    if (c.nested > kMaxPatternNestedRepeat)
      too_costly("nested repetitions (a quantified group holding quantifiers) with a count product",
                 kMaxPatternNestedRepeat, c.nested, re);
    if (c.variable > kMaxPatternVariable)
      too_costly("variable-length repetitions (?, *, +, {n,m} with n < m) beyond the longest one, "
                 "counted in copies,",
                 kMaxPatternVariable, c.variable, re);
    total = std::min(kMaxPatternRepeatTotal + 1, total + c.sum_counts);
    variable = std::min(kMaxPatternRepeatTotal + 1, variable + c.variable);
  }
  if (total > kMaxPatternRepeatTotal)
    too_costly("patterns' repetition counts ({n,m}) in all", kMaxPatternRepeatTotal, total, "");
  if (variable > kMaxPatternVariableTotal)
    too_costly("patterns' variable-length repetitions beyond each one's longest, in all",
               kMaxPatternVariableTotal, variable, "");
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

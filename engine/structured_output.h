#pragma once
// Structured outputs (vLLM's StructuredOutputsParams; OpenAI's response_format json_schema /
// json_object, vLLM's structured_outputs regex / choice / grammar / structural_tag): what a
// request's output is constrained to. The engine compiles it with xgrammar
// (engine/grammar_compiler.h) off the engine thread and masks each step's logits with the
// grammar's allowed tokens (docs/structured_outputs.md). Std types only, so server/ may include it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace octet {

enum class StructuredOutputKind : uint8_t { None, Json, JsonObject, Regex, Choice, Grammar, StructuralTag };

/// "none", "json", "json_object", "regex", "choice", "grammar", "structural_tag".
const char* structured_output_kind_name(StructuredOutputKind kind);

/// Bounds SamplingParams::validate() enforces (compiling costs CPU time per distinct spec; the
/// compiled grammar's memory grows with its size): a spec of at most kMaxStructuredSpecBytes
/// (1 MiB), at most kMaxStructuredChoices choices of at most kMaxStructuredChoiceBytes bytes in
/// all (256 KiB), and at least one choice for kind Choice. Literal alternatives are what make a
/// compile slow: on SmolLM2's 49152-token vocabulary (2 shared cores) 1024 choices of 1000
/// bytes took 53 s, a JSON schema with two enums of 5000 20-byte strings (230 KB) 4.5 s, of
/// 1000 (46 KB) 0.4 s. So a JSON schema's enum and const values are bounded as choices are:
/// kMaxStructuredChoiceBytes of JSON text in all (build_grammar, validate_structured_output).
inline constexpr size_t kMaxStructuredSpecBytes = size_t{1} << 20;
inline constexpr size_t kMaxStructuredChoices = 1024;
inline constexpr size_t kMaxStructuredChoiceBytes = size_t{256} << 10;
/// A JSON schema's regexes (`pattern`, `patternProperties` keys) compile in time that grows
/// fast with repetition, uncancellable (SmolLM2, one thread: ^a{2000}$ 0.4 s and a{50000}
/// minutes to build; (.{0,8}){0,8} 15 s and 24 x `.{0,3}` 23 s to compile), so per regex: a
/// count {n,m} at most kMaxPatternRepeat, a quantified group holding quantifiers at most
/// kMaxPatternNestedRepeat as the product of the counts, variable-length copies beyond the
/// longest run at most kMaxPatternVariable (regex_cost in structured_output.cpp); over the
/// schema: counts at most kMaxPatternRepeatTotal, variable copies kMaxPatternVariableTotal.
/// A JSON schema (text) nests at most kMaxStructuredSpecDepth arrays and objects deep (the
/// parsers recurse; the server's own limit is lower).
inline constexpr int64_t kMaxPatternRepeat = 1000;
inline constexpr int64_t kMaxPatternRepeatTotal = 4000;
inline constexpr int64_t kMaxPatternNestedRepeat = 16;
inline constexpr int64_t kMaxPatternVariable = 32;
inline constexpr int64_t kMaxPatternVariableTotal = 64;
inline constexpr int kMaxStructuredSpecDepth = 128;

/// Json / JsonObject with any_whitespace: the most whitespace characters allowed between two
/// JSON tokens (xgrammar's max_whitespace_cnt), so that whitespace cannot loop to max_tokens.
inline constexpr int kMaxJsonWhitespace = 20;

/// What a request's output is constrained to (vLLM's StructuredOutputsParams).
struct StructuredOutputParams {
  StructuredOutputKind kind = StructuredOutputKind::None;
  // Json: JSON-schema text; Regex: the pattern; Grammar: EBNF (xgrammar's EBNF, GBNF-compatible,
  // root rule "root"); StructuralTag: xgrammar structural-tag JSON text. Unused otherwise.
  std::string spec;
  std::vector<std::string> choice;  // Choice: the allowed outputs (exact strings)
  // Json / JsonObject: allow any whitespace between JSON tokens (vLLM's default for xgrammar:
  // true, i.e. not disable_any_whitespace); false = compact separators (", " and ": ").
  bool any_whitespace = true;
  // The request field named in errors ("response_format", "json_schema", "grammar", ...).
  std::string field = "structured_outputs";
  bool active() const { return kind != StructuredOutputKind::None; }
};

/// Throws RequestError(InvalidRequest, message, field) when the spec does not parse or convert
/// (a bad JSON schema, regex, EBNF or structural tag, or an empty choice list), or a JSON
/// schema exceeds the bounds above (enum and const bytes, pattern repetition counts, depth).
/// Cheap: builds
/// xgrammar's Grammar without a tokenizer (no token masks). Thread-safe. The server calls it on
/// its own thread before submitting, so a bad schema is a 400; the engine compiles again
/// against the tokenizer and fails the request alone if that fails.
void validate_structured_output(const StructuredOutputParams& p);

/// The cache key of `p`: its kind, any_whitespace and spec or choices, unambiguously encoded
/// (field is not part of it).
std::string structured_output_key(const StructuredOutputParams& p);

}  // namespace octet

#pragma once
// JSON Schema forms that older drafts define and xgrammar (draft 2020-12) rejects, rewritten
// into their 2020-12 equivalents before a schema is compiled.
#include <optional>
#include <string>

namespace octet {

/// Rewrites the tuple form of drafts 4-2019 ("items": [s0, s1, ...], "additionalItems": a; e.g.
/// what pydantic v1 emits for Tuple fields, and what llama.cpp's server accepts) into 2020-12's
/// "prefixItems": [s0, s1, ...], "items": a, in every subschema (not inside enum, const,
/// default or examples values). Returns the rewritten schema text, or nullopt when the schema
/// has no such form or is not valid JSON (left to the compiler's own error).
std::optional<std::string> rewrite_tuple_items(const std::string& schema);

}  // namespace octet

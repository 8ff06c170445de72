#pragma once
// The structured-output fields of a request body -> the engine's StructuredOutputParams
// (engine/structured_output.h). Accepted, as vLLM and llama.cpp accept them:
// - OpenAI's response_format: {"type": "text"} (none), {"type": "json_object"},
//   {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}} and
//   vLLM's {"type": "structural_tag", ...} (the whole object is xgrammar's structural tag);
// - vLLM's structured_outputs {json | regex | choice | grammar | json_object | structural_tag,
//   disable_any_whitespace, disable_fallback} and its older guided_json / guided_regex /
//   guided_choice / guided_grammar fields (vLLM <= 0.10);
// - llama.cpp's json_schema (a JSON schema) and grammar (GBNF; "" = none).
// structured_outputs {"disable_any_whitespace": true} alone applies to the constraint another
// field gives (compact JSON: ", " and ": " only; small models may otherwise emit whitespace
// until max_tokens, under vLLM too). One constraint per request: two or more (in one field or across fields) get 400, as vLLM's
// "You can only use one kind of constraints for structured outputs". Every failure is an
// ApiError 400 naming the field; a schema / regex / grammar that does not compile is one too
// (validate_structured_output, called here on the request's thread).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/structured_output.h"
#include "server/openai/openai_request.h"

namespace octet::server {

/// The top-level request fields parse_structured_outputs() reads (the caller's unknown-field
/// bookkeeping marks them as known).
const std::vector<std::string>& structured_output_fields();

/// The constraint `body` (a request object) asks for; kind None when none. Throws ApiError 400
/// naming the field (e.g. "response_format", "structured_outputs", "guided_regex",
/// "json_schema") for a malformed value, two constraints, an unsupported option, or a spec the
/// engine's grammar compiler rejects.
StructuredOutputParams parse_structured_outputs(const nlohmann::json& body);

/// validate_structured_output() with its RequestError turned into ApiError 400 naming p.field;
/// also refuses a spec or choice list beyond the engine's kMaxStructured* bounds first (so that
/// nothing large is compiled only to be refused).
void check_structured_outputs(const StructuredOutputParams& p);

/// Re-reads `body_text` (the body `r` was parsed from) in the client's key order and puts it
/// back where order matters, since nlohmann::json sorts object keys: the JSON schema of
/// r.params.structured_outputs (xgrammar generates properties in the schema's order, as vLLM)
/// and r.tools.tools (their tojson in chat templates; the tool constraints' schemas). Only when
/// the request has a JSON-schema constraint or tools (one more parse of the body).
void keep_key_order(GenerateRequest& r, const std::string& body_text);

}  // namespace octet::server

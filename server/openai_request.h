#pragma once
// Parsing and validation of OpenAI request bodies (POST /v1/completions and
// /v1/chat/completions) into one GenerateRequest. Field names, types, defaults and ranges follow
// OpenAI's API reference (https://platform.openai.com/docs/api-reference/completions/create,
// .../chat/create) plus vLLM's extra sampling fields (top_k, min_p, repetition_penalty,
// stop_token_ids, ignore_eos, min_tokens, skip_special_tokens, include_stop_str_in_output,
// priority). Every failure is an ApiError 400 naming the field (`param`).
//
// - A field octet recognises but cannot honour (tools, response_format other than text,
//   best_of > 1, suffix, ...) is rejected with 400 naming it, never silently dropped.
// - A field octet does not know is listed in `unknown_fields` (the caller logs one warning) and
//   otherwise ignored, as OpenAI-compatible servers do.
// - null means "the default" for every optional field; for max_tokens/max_completion_tokens it
//   means "up to the context limit".
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling_params.h"

namespace octet::server {

enum class Endpoint { kCompletions, kChatCompletions };

/// One prompt of a completion request: text (tokenized by the server) or token ids.
struct PromptInput {
  bool is_token_ids = false;
  std::string text;
  std::vector<int32_t> token_ids;
};

/// A validated generation request. `params` holds every sampling field except max_tokens,
/// which is resolved against the prompt length and the context limit later.
struct GenerateRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                  // "" when absent or null
  std::vector<PromptInput> prompts;   // completions: one or more prompts
  nlohmann::json messages;            // chat: [{"role", "content" (string), ["name"]}]
  bool add_generation_prompt = true;  // chat (vLLM extra)
  bool add_special_tokens = true;     // completions: BOS when the model wants it
  SamplingParams params;              // max_tokens left at its default here
  std::optional<int64_t> max_tokens;  // nullopt = up to the context limit
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool echo = false;                  // completions
  int64_t logprobs = -1;              // top-k count for the sampled tokens; -1 = none
  bool chat_logprobs = false;         // chat: logprobs: true (then top_logprobs = `logprobs`)
  int64_t prompt_logprobs = -1;       // completions (vLLM extra): top-k per prompt token; -1 = none
  int64_t priority = 0;
  std::string user;
  std::vector<std::string> unknown_fields;  // ignored; the caller logs them once
};

/// Largest n accepted per request, and the largest logprobs / top_logprobs (vLLM's default
/// max_logprobs).
inline constexpr int64_t kMaxN = 128;
inline constexpr int64_t kMaxLogprobs = 20;

/// Parses a /v1/completions body. Throws ApiError 400 naming the field for a body that is not
/// an object, a missing or malformed prompt, a wrong type, a value out of range or an
/// unsupported field.
GenerateRequest parse_completion_request(const nlohmann::json& body);

/// Parses a /v1/chat/completions body. messages: a non-empty list of {"role": string,
/// "content": string | null | [{"type": "text", "text": string}, ...]}; text parts are joined
/// with "\n" (vLLM's "string" content format). Other part types get 400.
GenerateRequest parse_chat_request(const nlohmann::json& body);

/// Parses JSON text; throws ApiError 400 "malformed JSON: ..." on a syntax error.
nlohmann::json parse_json_body(const std::string& text);

}  // namespace octet::server

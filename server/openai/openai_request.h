#pragma once
// Parsing and validation of OpenAI request bodies (POST /v1/completions and
// /v1/chat/completions) into one GenerateRequest. Field names, types, defaults and ranges follow
// OpenAI's API reference (https://platform.openai.com/docs/api-reference/completions/create,
// .../chat/create) plus vLLM's extra sampling fields (top_k, min_p, repetition_penalty,
// stop_token_ids, ignore_eos, min_tokens, skip_special_tokens, include_stop_str_in_output,
// priority). Every failure is an ApiError 400 naming the field (`param`).
//
// - A field octet recognises but cannot honour, one that would change what is generated
//   (functions, best_of other than n, suffix, vLLM's use_beam_search / allowed_token_ids,
//   llama.cpp's n_predict / mirostat, ...), is rejected with 400 naming it, never silently
//   dropped; the values that request nothing (null, use_beam_search false) pass.
// - Structured outputs (response_format, structured_outputs, guided_*, llama.cpp's json_schema /
//   grammar): server/openai/structured_request.h, into params.structured_outputs. Tools (chat
//   only): server/openai/tool_request.h, into `tools`.
// - A field octet does not know is listed in `unknown_fields` (the caller logs one warning) and
//   otherwise ignored, as OpenAI-compatible servers do.
// - null means "the default" for every optional field; for max_tokens/max_completion_tokens it
//   means "up to the context limit".
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling_params.h"
#include "server/openai/json_literals.h"
#include "server/openai/request_fields.h"  // kMaxJsonDepth
#include "server/openai/tool_request.h"

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
  nlohmann::json messages;            // chat: [{"role", "content" (string), ["name"],
                                      //   ["tool_calls"], ["tool_call_id"]}]
  ToolRequest tools;                  // chat: tools, tool_choice, parallel_tool_calls
  bool add_generation_prompt = true;  // chat (vLLM extra)
  bool add_special_tokens = true;     // BOS when the model wants it (chat: default false)
  SamplingParams params;              // max_tokens left at its default here
  std::optional<int64_t> max_tokens;  // nullopt = up to the context limit
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool echo = false;                  // completions
  int64_t logprobs = -1;              // top-k count for the sampled tokens; -1 = none
  bool chat_logprobs = false;         // chat: logprobs: true (then top_logprobs = `logprobs`)
  int64_t prompt_logprobs = -1;       // completions (vLLM extra): top-k per prompt token; -1 = none
  int64_t priority = 0;               // any int64 (compared only, never summed)
  std::string user;
  // vLLM extras (docs: README.md's API section; resolved by GenerationJob::prepare):
  bool continuous_usage = false;      // stream_options.continuous_usage_stats (with include_usage)
  bool return_token_ids = false;      // token_ids per choice, prompt_token_ids
  bool return_tokens_as_token_ids = false;  // logprob tokens as "token_id:N"
  std::optional<int64_t> truncate_prompt_tokens;  // keep k prompt tokens; -1 = max_model_len -
                                                  // max_tokens (vLLM's max_input_tokens)
  bool truncate_left = true;          // truncation_side "left" (keep the last k; vLLM's default)
  bool continue_final_message = false;  // chat: the last message stays open (no end of turn)
  // chat (vLLM extra): extra chat template variables, e.g. {"enable_thinking": false}; values
  // null or "auto" dropped (vLLM: unset), reserved keys (is_reserved_chat_template_kwarg)
  // listed in unknown_fields instead; in the client's key order after
  // keep_chat_template_kwargs_order().
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  std::vector<std::string> unknown_fields;  // ignored; the caller logs them once
};

/// Largest n accepted per request, and the largest logprobs / top_logprobs / prompt_logprobs
/// the parser accepts (token ids are int32: no vocabulary is larger). --max-logprobs (default
/// 20, as vLLM) and the vocabulary size bound it when the job starts (resolve_logprobs).
inline constexpr int64_t kMaxN = 128;
inline constexpr int64_t kMaxLogprobCount = std::numeric_limits<int32_t>::max();
/// logprobs / top_logprobs / prompt_logprobs -1 (vLLM): the whole vocabulary, resolved against
/// the model's vocabulary size and --max-logprobs when the job starts (then 400 unless the
/// vocabulary is at most --max-logprobs, as vLLM).
inline constexpr int64_t kLogprobsWholeVocab = std::numeric_limits<int64_t>::max();

/// Parses a /v1/completions body. Throws ApiError 400 naming the field for a body that is not
/// an object, a missing or malformed prompt, a wrong type, a value out of range or an
/// unsupported field.
/// `literals` (parse_json_body's): the text of top-level numbers, quoted as sent in errors.
GenerateRequest parse_completion_request(const nlohmann::json& body,
                                         const NumberLiterals* literals = nullptr);

/// Parses a /v1/chat/completions body. messages: a non-empty list of {"role": string,
/// "content": string | null | [{"type": "text", "text": string}, ...]}; text parts are joined
/// with "\n" (vLLM's "string" content format). Other part types get 400.
GenerateRequest parse_chat_request(const nlohmann::json& body,
                                   const NumberLiterals* literals = nullptr);

/// Puts r.chat_template_kwargs back in the client's key order (nlohmann::json sorts keys; a
/// template's tojson shows the order): re-reads `body_text`, the body `r` was parsed from, only
/// when there are kwargs.
void keep_chat_template_kwargs_order(GenerateRequest& r, const std::string& body_text);

/// Parses JSON text. Throws ApiError 400 for a body nested deeper than kMaxJsonDepth (checked
/// first, without recursion), "malformed JSON: ..." for a syntax error or a number literal out
/// of a double's range (1e999999). Messages are bounded (they never quote the whole body).
/// `literals` (optional) receives the text of the top-level floating-point members.
nlohmann::json parse_json_body(const std::string& text, NumberLiterals* literals = nullptr);

/// The seed of choice i of a request seeded with `seed` (vLLM: seed + i), wrapping from 2^63 - 1
/// to -2^63 (the RNG seed, the two's complement, is seed's + i mod 2^64); none stays none.
std::optional<int64_t> choice_seed(std::optional<int64_t> seed, int64_t i);

/// max_tokens for one prompt of n_prompt tokens: `requested` (>= 0) as given (the Engine checks
/// it against the context at add_requests), or all the context left (max_tokens_left(), which
/// throws RequestError ContextLengthExceeded when the prompt leaves no room) when nullopt.
int64_t resolve_max_tokens(int64_t n_prompt, std::optional<int64_t> requested,
                           int64_t max_model_len);

}  // namespace octet::server

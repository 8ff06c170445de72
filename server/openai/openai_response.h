#pragma once
// OpenAI response bodies and server-sent-event chunks for /v1/completions and
// /v1/chat/completions (https://platform.openai.com/docs/api-reference/completions/object,
// .../chat/object, .../chat-streaming). Pure formatting: no engine, no sockets.
//
// Streams: every chunk of one response has the same id, created and model; a choice's
// finish_reason is null until its last chunk; the first chat chunk of each choice carries
// delta.role = "assistant"; with stream_options.include_usage every chunk has "usage": null and
// one last chunk has "choices": [] and the usage; "data: [DONE]" ends the stream.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace octet::server {

/// The string a token id shows in logprobs (the token decoded alone, special tokens kept).
using TokenText = std::function<std::string(int32_t)>;

/// What every object and chunk of one response shares.
struct ResponseMeta {
  std::string id;       // "cmpl-<hex>" or "chatcmpl-<hex>"
  int64_t created = 0;  // Unix seconds
  std::string model;
};

/// OpenAI's usage object: prompt_tokens counts each distinct prompt once (not once per n),
/// completion_tokens sums over every choice; prompt_tokens_details.cached_tokens are the
/// prompt tokens served by the prefix cache (only when `details`; vLLM sends it only with
/// --enable-prompt-tokens-details).
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  bool details = true;  // carry prompt_tokens_details (octet serve: --enable-prompt-tokens-details)
};
nlohmann::ordered_json usage_json(const Usage& u);

/// A random response id: prefix + 32 lowercase hex digits.
std::string random_id(const std::string& prefix);

/// One SSE event: "data: <json>\n\n".
std::string sse_data(const nlohmann::ordered_json& j);
std::string sse_data(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

/// Legacy completions logprobs {"tokens", "token_logprobs", "top_logprobs", "text_offset"} for
/// `entries` in order. `text_offset` (in/out) is the character offset of the first token in the
/// choice's text, advanced by each token's string length. When `first_has_no_logprob` (the
/// first prompt token under echo), entry 0 gets token_logprobs null and top_logprobs null.
/// top_logprobs[i] maps token string -> logprob, as vLLM orders it: the chosen (sampled or
/// prompt) token first, then the top entries by rank (a string seen twice keeps its first place
/// and the later logprob, as a Python dict).
nlohmann::ordered_json completion_logprobs(const std::vector<TokenLogprobs>& entries,
                                   const TokenText& text, int64_t* text_offset,
                                   bool first_has_no_logprob);
/// vLLM's prompt_logprobs of a completions choice: [null, {"<token id>": {"logprob", "rank",
/// "decoded_token"}, ...}, ...], one entry per prompt token; entry i > 0 holds the prompt token
/// itself (first) and the `top_k` most likely ids (ranks 1..top_k) at that position.
nlohmann::ordered_json prompt_logprobs_json(const std::vector<TokenLogprobs>& entries,
                                    const TokenText& text, int64_t top_k);
/// Appends completion logprobs object `b` to `acc` in place (acc's entries, then b's); a null
/// `acc` becomes `b`. O(size of b): the accumulator is never copied (pass b as an rvalue to move
/// its entries rather than copy them).
void append_completion_logprobs(nlohmann::ordered_json& acc, nlohmann::ordered_json b);

/// Chat logprobs {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
/// "logprob", "bytes"} x top_k]}], "refusal": null}; bytes are the token string's UTF-8 bytes.
/// top_logprobs is vLLM's: the first top_k of the sampled token followed by the top entries by
/// rank (the sampled token once), so the sampled token always comes first.
nlohmann::ordered_json chat_logprobs(const std::vector<TokenLogprobs>& entries, const TokenText& text,
                             int64_t top_k);

/// finish_reason as OpenAI defines it: "stop" or "length"; null when not finished.
nlohmann::ordered_json finish_reason_json(bool finished, const std::string& reason);

/// vLLM's stop_reason: the matched stop string, the stop token id (an integer), or null (EOS,
/// length, unfinished).
nlohmann::ordered_json stop_reason_json(const std::string& stop_reason,
                                const std::vector<std::string>& stop_strings);

/// {"id","object":"text_completion","created","model","choices":[{"index","text","logprobs",
/// "finish_reason","stop_reason"}]} (+ "usage": null when include_usage).
nlohmann::ordered_json completion_chunk(const ResponseMeta& meta, int64_t index, const std::string& text,
                                nlohmann::ordered_json logprobs, nlohmann::ordered_json finish_reason,
                                nlohmann::ordered_json stop_reason, bool include_usage);

/// {"id","object":"chat.completion.chunk","created","model","choices":[{"index","delta",
/// "logprobs","finish_reason"}]} (+ "usage": null when include_usage).
nlohmann::ordered_json chat_chunk(const ResponseMeta& meta, int64_t index, nlohmann::ordered_json delta,
                          nlohmann::ordered_json logprobs, nlohmann::ordered_json finish_reason,
                          nlohmann::ordered_json stop_reason, bool include_usage);

/// The last chunk under include_usage: "choices": [] and the usage. object is
/// "text_completion" or "chat.completion.chunk".
nlohmann::ordered_json usage_chunk(const ResponseMeta& meta, const std::string& object,
                           const Usage& usage);

/// Non-streaming bodies: object "text_completion" / "chat.completion" with choices in index
/// order, "service_tier": null and "system_fingerprint": null (as vLLM) and usage.
nlohmann::ordered_json completion_response(const ResponseMeta& meta, nlohmann::ordered_json choices,
                                   const Usage& usage);
nlohmann::ordered_json chat_response(const ResponseMeta& meta, nlohmann::ordered_json choices,
                             const Usage& usage);

/// Serialises JSON for the wire: compact, invalid UTF-8 replaced by U+FFFD. Response bodies are
/// nlohmann::ordered_json, so their keys go out in the order they were built (vLLM's
/// top_logprobs dicts start with the sampled or prompt token, and clients read that first key).
std::string dump(const nlohmann::ordered_json& j);
std::string dump(const nlohmann::json& j);

}  // namespace octet::server

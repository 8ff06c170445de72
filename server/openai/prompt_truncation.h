#pragma once
// vLLM's truncate_prompt_tokens / truncation_side on a tokenized prompt (vLLM's
// TokenizeParams: vllm/renderers/params.py), and continue_final_message's cut of a rendered
// chat (Hugging Face's apply_chat_template, which vLLM calls).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace octet::server {

/// Keeps `truncate_prompt_tokens` tokens of `ids`: the last ones when `keep_last`
/// (truncation_side "left", the default) else the first ones; -1 keeps max_input_tokens =
/// max_model_len - max_tokens (max_tokens nullopt counts as 0, as vLLM). nullopt, or a count >=
/// ids.size(), changes nothing; 0 leaves no token. Throws ApiError 400 (param
/// "truncate_prompt_tokens") when the count exceeds max_input_tokens, as vLLM: "... cannot be
/// greater than max_model_len - max_tokens = N". Returns whether tokens were dropped.
bool truncate_prompt(std::vector<int32_t>& ids, std::optional<int64_t> truncate_prompt_tokens,
                     bool keep_last, int64_t max_model_len, std::optional<int64_t> max_tokens);

/// continue_final_message: the length of the prefix of `rendered` (a chat rendered without the
/// generation prompt) that ends with the last message's content, so that the model continues
/// that message (its end-of-turn text is cut off). As Hugging Face: the last occurrence of the
/// content, else of the content without surrounding whitespace (templates that `| trim`).
/// Throws ApiError 400 (param "messages") when neither occurs in the text.
size_t continue_final_message_end(const std::string& rendered, const nlohmann::json& messages);

/// Chat `echo` (vLLM): the text a response repeats before the generated text, the last
/// message's content when that message has the role of the reply (add_generation_prompt:
/// "assistant"; otherwise the last message's own role, i.e. always); "" otherwise.
std::string chat_echo_text(const nlohmann::json& messages, bool add_generation_prompt);

}  // namespace octet::server

#include "engine/request_error.h"

namespace octet {

const char* request_error_kind_name(RequestErrorKind kind) {
  switch (kind) {
    case RequestErrorKind::InvalidRequest: return "invalid_request";
    case RequestErrorKind::ContextLengthExceeded: return "context_length_exceeded";
    case RequestErrorKind::ModelNotFound: return "model_not_found";
  }
  return "?";
}

namespace {

std::string context_head(int64_t max_model_len) {
  return "This model's maximum context length is " + std::to_string(max_model_len) +
         " tokens. However, you requested ";
}

}  // namespace

void check_context_length(int64_t n_prompt, int64_t max_tokens, int64_t max_model_len) {
  // Compared as max_tokens > limit - n_prompt and summed in uint64: the sum may exceed INT64_MAX.
  if (n_prompt <= max_model_len && max_tokens <= max_model_len - n_prompt) return;
  throw RequestError(
      RequestErrorKind::ContextLengthExceeded,
      context_head(max_model_len) +
          std::to_string(static_cast<uint64_t>(n_prompt) + static_cast<uint64_t>(max_tokens)) +
          " tokens (" + std::to_string(n_prompt) + " in the prompt, " +
          std::to_string(max_tokens) +
          " in the completion). Please reduce the length of the prompt or completion.",
      "prompt");
}

int64_t max_tokens_left(int64_t n_prompt, int64_t max_model_len) {
  if (n_prompt >= max_model_len)
    throw RequestError(RequestErrorKind::ContextLengthExceeded,
                       context_head(max_model_len) + std::to_string(n_prompt) +
                           " tokens in the prompt, which leaves no room for the completion. "
                           "Please reduce the length of the prompt.",
                       "prompt");
  return max_model_len - n_prompt;
}

void check_token_ids(const std::vector<int32_t>& ids, int64_t vocab, const std::string& param) {
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      throw RequestError(RequestErrorKind::InvalidRequest,
                         "'" + param + "' token id " + std::to_string(id) +
                             " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
                         param);
}

void check_model_name(const std::string& requested, const std::string& served) {
  if (requested.empty() || requested == served) return;
  size_t keep = requested.size() > 80 ? 80 : requested.size();
  while (keep > 0 && keep < requested.size() &&
         (static_cast<unsigned char>(requested[keep]) & 0xC0) == 0x80)
    --keep;  // not inside a UTF-8 character
  const std::string shown = requested.substr(0, keep) + (keep < requested.size() ? "..." : "");
  throw RequestError(RequestErrorKind::ModelNotFound,
                     "The model `" + shown + "` does not exist.", "model");
}

}  // namespace octet

#pragma once
// RequestError: a request the engine refuses because of the request itself (STYLE.md 9 and 14),
// with a kind that the HTTP edge maps to OpenAI's status, type and code in one place
// (server/openai/api_error.h to_api_error). The request rules that need the model (vocabulary,
// context length) live here once: the Engine checks them at add_requests, front ends trust it.
// Std types only, so server/ may include it.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace octet {

/// Why a request was refused. InvalidRequest: a bad field (OpenAI 400, code null);
/// ContextLengthExceeded: prompt + max_tokens beyond max_model_len (400,
/// "context_length_exceeded"); ModelNotFound: the request names another model (404,
/// "model_not_found").
enum class RequestErrorKind : uint8_t { InvalidRequest, ContextLengthExceeded, ModelNotFound };

/// "invalid_request", "context_length_exceeded", "model_not_found".
const char* request_error_kind_name(RequestErrorKind kind);

/// A refused request: message() is the client-facing message (what() too, up to a NUL byte a
/// quoted field name may hold), param() the request field at fault ("prompt", "max_tokens",
/// "logit_bias", ...; "" = none). A std::invalid_argument, so callers that only know "bad
/// input" (the CLI's exit code 2) keep working.
class RequestError : public std::invalid_argument {
 public:
  RequestError(RequestErrorKind kind, const std::string& message, std::string param = "")
      : std::invalid_argument(message), kind_(kind), message_(message), param_(std::move(param)) {}
  RequestErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  const std::string& param() const { return param_; }

 private:
  RequestErrorKind kind_;
  std::string message_, param_;
};

/// Throws RequestError(ContextLengthExceeded, param "prompt") when n_prompt + max_tokens exceeds
/// max_model_len (both >= 0; summed without overflow). The message gives the limit and the exact
/// requested count: "This model's maximum context length is L tokens. However, you requested N
/// tokens (P in the prompt, M in the completion). Please reduce the length of the prompt or
/// completion."
void check_context_length(int64_t n_prompt, int64_t max_tokens, int64_t max_model_len);

/// The max_tokens of a request that set none (OpenAI null: up to the context limit):
/// max_model_len - n_prompt. Throws RequestError(ContextLengthExceeded, param "prompt") when the
/// prompt leaves no room for one token.
int64_t max_tokens_left(int64_t n_prompt, int64_t max_model_len);

/// Throws RequestError(InvalidRequest, param) naming the first id outside [0, vocab):
/// "'<param>' token id X is outside the vocabulary [0, V)".
void check_token_ids(const std::vector<int32_t>& ids, int64_t vocab, const std::string& param);

/// Throws RequestError(ModelNotFound, param "model") when `requested` is not empty and is not
/// `served` ("The model `X` does not exist.", X cut to 80 bytes at a UTF-8 boundary).
void check_model_name(const std::string& requested, const std::string& served);

}  // namespace octet

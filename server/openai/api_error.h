#pragma once
// ApiError: an expected failure of one HTTP request (bad JSON, a bad parameter, an unknown
// model, a full queue), turned into OpenAI's error body in one place at the HTTP edge
// (STYLE.md 9). OpenAI's shape: {"error": {"message", "type", "param", "code"}}
// (https://platform.openai.com/docs/guides/error-codes).
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request_error.h"

namespace octet::server {

class ApiError : public std::runtime_error {
 public:
  /// status: HTTP status (400, 401, 404, 413, 431, 503, 500); param: the request field at fault
  /// ("" = null); code: OpenAI's machine-readable code ("" = null).
  ApiError(int status, std::string message, std::string param = "", std::string code = "")
      : std::runtime_error(message), status_(status), message_(std::move(message)),
        param_(std::move(param)), code_(std::move(code)) {}

  int status() const { return status_; }
  /// The whole message (what() stops at a NUL byte a quoted value may hold).
  const std::string& message() const { return message_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string message_, param_, code_;
};

/// 400 naming the field: "<param>: <message>" style messages are the caller's choice.
inline ApiError bad_request(const std::string& message, const std::string& param = "") {
  return ApiError(400, message, param);
}

/// The one mapping of the engine's typed request errors to OpenAI's error (STYLE.md 14):
/// InvalidRequest -> 400, code null; ContextLengthExceeded -> 400, code
/// "context_length_exceeded"; ModelNotFound -> 404, code "model_not_found" (all of type
/// invalid_request_error). The message and param are the error's, except that param "prompt"
/// becomes `prompt_field` (a chat request names "messages", as OpenAI does).
ApiError to_api_error(const RequestError& e, const std::string& prompt_field = "prompt");

/// OpenAI's error "type" for an HTTP status: invalid_request_error (4xx, 401 included, as
/// OpenAI answers a bad API key), server_error (5xx).
std::string error_type(int status);

/// {"error": {"message", "type", "param", "code"}}; param and code are null when empty.
nlohmann::json error_json(int status, const std::string& message, const std::string& param = "",
                          const std::string& code = "");
inline nlohmann::json error_json(const ApiError& e) {
  return error_json(e.status(), e.message(), e.param(), e.code());
}

/// A short rendering of a request value for an error message, at most about max_chars bytes
/// ("..." marks a cut, made at a UTF-8 character boundary). Never recursive, so safe on
/// arbitrarily deep values: scalars as JSON (strings quoted and cut), arrays and objects by
/// their first elements with nested containers shown as [...] / {...}.
std::string describe_json(const nlohmann::json& v, size_t max_chars = 80);

/// `text` cut to at most max_bytes bytes at a UTF-8 character boundary, "..." appended when cut
/// (for request strings quoted in messages: model names, keys).
std::string truncate_text(const std::string& text, size_t max_bytes = 80);

/// Request field names for a log line: each cut to kMaxLoggedNameBytes bytes (truncate_text:
/// at a UTF-8 boundary, "..." appended), at most kMaxLoggedNames of them joined by ", ", then
/// "... N more" (a 16 MB key made a 16 MB log line).
inline constexpr size_t kMaxLoggedNameBytes = 64;
inline constexpr size_t kMaxLoggedNames = 8;
std::string field_names_for_log(const std::vector<std::string>& names);

}  // namespace octet::server

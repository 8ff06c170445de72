#pragma once
// Operational logging of `octet serve` through spdlog: text or JSON lines (--log-format), a
// request id on every line logged while a request is handled (RequestLogScope, per thread) and
// in the X-Request-Id response header, and one access-log line per request (log_access).
//
// A client-sent X-Request-Id is honoured (as vLLM's --enable-request-id-headers does) when it
// is 1 to kMaxRequestIdBytes bytes of [A-Za-z0-9._:~+/=-]; any other value (a space, a quote, a
// CR or LF, control or non-ASCII bytes, too long) is replaced by a fresh id, so a client cannot
// forge log lines or response headers. Independently, the text format escapes control bytes
// of every message (\n, \r, \t, \xNN) and the JSON format escapes every string, so one log
// call is always exactly one line.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/formatter.h>

namespace octet::server {

/// Longest client-sent X-Request-Id honoured, in bytes.
inline constexpr size_t kMaxRequestIdBytes = 128;

/// True when `id` may be used as a request id as sent: 1..kMaxRequestIdBytes bytes, each one of
/// A-Z a-z 0-9 . _ : ~ + / = -.
bool valid_request_id(std::string_view id);

/// A fresh request id: 32 lower-case hex digits (128 random bits).
std::string new_request_id();

/// The id of a request whose X-Request-Id header is `client_id` ("" when absent): the header
/// when valid_request_id, else new_request_id().
std::string request_id_for(std::string_view client_id);

/// While alive, every line this thread logs carries `id` (text: "[id] " before the message;
/// JSON: "request_id"). Scopes nest; the inner one wins until it ends. `id` must outlive it.
class RequestLogScope {
 public:
  explicit RequestLogScope(const std::string& id);
  ~RequestLogScope();
  RequestLogScope(const RequestLogScope&) = delete;
  RequestLogScope& operator=(const RequestLogScope&) = delete;

 private:
  const std::string* previous_;
};

/// The request id of the innermost RequestLogScope of this thread ("" when none).
const std::string& current_request_id();

/// What one access-log line says about a finished request.
struct AccessLogEntry {
  std::string method;         // "-" when the request head could not be read
  std::string path;           // without the query string; "-" when unknown
  int status = 0;             // 499: the client closed the connection before the response ended
  int64_t prompt_tokens = 0;  // 0 for requests that generate nothing
  int64_t completion_tokens = 0;
  double ttft_ms = -1;        // time from the request head to the first generated token; < 0: none
  double latency_ms = 0;      // time from the request head to the response's last byte
};

/// The access-log message: `METHOD PATH STATUS prompt_tokens=P completion_tokens=C ttft_ms=T
/// latency_ms=L` (ttft_ms=- when no token was generated; times with one decimal).
std::string access_log_message(const AccessLogEntry& e);

/// Logs `e` at info level under the current request id: the text format writes
/// access_log_message(e); the JSON format adds its fields as keys ("method", "path", "status",
/// "prompt_tokens", "completion_tokens", "ttft_ms" (null when none), "latency_ms").
void log_access(const AccessLogEntry& e);

/// The formatter of --log-format "text" or "json".
///   text: `[2026-12-01 16:52:31.123] [info] [REQUEST_ID] message` (UTC; "[REQUEST_ID] " only
///         inside a request); control bytes of the message escaped.
///   json: `{"time":"2026-12-01T16:52:31.123Z","level":"info","request_id":"...",
///         "message":"...", ...access fields}` on one line ("request_id" only inside a request).
/// Throws std::invalid_argument for another format name.
std::unique_ptr<spdlog::formatter> make_log_formatter(const std::string& format);

/// Applies --log-format and --log-level to spdlog's default logger (and so to every line
/// logged through spdlog:: functions). Throws std::invalid_argument for an unknown format or
/// level (names as ServeConfig::validate accepts them).
void configure_logging(const std::string& format, const std::string& level);

}  // namespace octet::server

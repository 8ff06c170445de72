// The request id and the access log of a Session (http_connection.h): each request's id (the
// client's X-Request-Id when valid, else a new one) goes into its log lines and its response
// head; when the request ends, one access-log line (request_log.h) with its status and timings.
#include "server/http/http_connection.h"

#include "server/http/request_log.h"

namespace octet::server::detail {

namespace {

double ms_since(std::chrono::steady_clock::time_point start,
                std::chrono::steady_clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

}  // namespace

std::string with_request_id(std::string response, const std::string& id) {
  const size_t eol = response.find("\r\n");
  if (eol == std::string::npos || id.empty()) return response;
  response.insert(eol + 2, "X-Request-Id: " + id + "\r\n");
  return response;
}

/// A request head arrived: its id (the client's X-Request-Id when valid, else a new one),
/// method, path and start time, for the log lines and the access-log line of end_request.
void Session::begin_request(std::string method, std::string path, std::string_view client_id) {
  request_active_ = true;
  request_start_ = std::chrono::steady_clock::now();
  request_id_ = request_id_for(client_id);
  method_ = std::move(method);
  path_ = std::move(path);
  status_ = 0;
}

/// The request is over (its response written, or the connection closed first: status 499):
/// one access-log line unless --disable-log-requests. Idempotent until the next request.
void Session::end_request(int status) {
  if (!request_active_) return;
  request_active_ = false;
  if (ctx_.config.disable_log_requests) return;
  const auto now = std::chrono::steady_clock::now();
  AccessLogEntry e;
  e.method = method_;
  e.path = path_;
  e.status = status;
  e.latency_ms = ms_since(request_start_, now);
  if (job_) {
    const Usage u = job_->usage();
    e.prompt_tokens = u.prompt_tokens;
    e.completion_tokens = u.completion_tokens;
    const auto first = job_->first_token_time();
    if (first != std::chrono::steady_clock::time_point{})
      e.ttft_ms = ms_since(request_start_, first);
  }
  RequestLogScope scope(request_id_);
  log_access(e);
}

}  // namespace octet::server::detail

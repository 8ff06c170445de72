// Routing of a Session's request (http_connection.h): at header time, before any body byte
// is read, the CORS fields of its responses, the head checks, the reserved probe slots (GET
// /health and GET /metrics only), the API key, the route and the method; once the request is
// whole, a CORS preflight's answer (before the key and the route), the replies that come at
// once and the hand-off of the others to preparation (http_prepare.cpp).
#include "server/http/http_connection.h"

#include <spdlog/spdlog.h>

#include "server/http/http_message.h"
#include "server/http/request_log.h"

namespace octet::server::detail {

namespace {

std::optional<std::string_view> field_of(const http::request_header<>& head,
                                         std::string_view name) {
  const auto it = head.find(name);
  if (it == head.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

/// What CORS reads of a head (the request's own fields: a trailer is not merged in yet).
CorsRequest cors_request(const http::request_header<>& head) {
  CorsRequest r;
  r.method = std::string_view(head.method_string().data(), head.method_string().size());
  r.origin = field_of(head, "Origin");
  r.request_method = field_of(head, "Access-Control-Request-Method");
  r.request_headers = field_of(head, "Access-Control-Request-Headers");
  r.has_cookie = head.count(http::field::cookie) > 0;
  return r;
}

}  // namespace

void Session::on_header(beast::error_code ec) {
  read_deadline_.cancel();
  if (!ec || ec == http::error::body_limit) {
    // The head parsed (a Content-Length over --max-body-bytes is refused once it has): every
    // answer to an allowed Origin carries the CORS fields, errors included, so that a page can
    // read why it was refused; a preflight is answered in handle().
    const CorsRequest cors = cors_request(parser_->get().base());
    if (CorsPolicy::is_preflight(cors)) preflight_ = shared_.cors.preflight(cors);
    cors_fields_ = shared_.cors.response_fields(cors);
  }
  if (ec) return on_read_error(ec);
  auto& req = parser_->get();
  // Routing, the access log and handle() read the target's origin-form (an absolute-form
  // target, "http://host/v1/models", becomes "/v1/models").
  const std::optional<std::string> origin = origin_form(req.target());
  if (origin && *origin != req.target()) req.target(*origin);
  const std::string target(req.target());
  begin_request(std::string(req.method_string()), target.substr(0, target.find('?')),
                std::string_view(req["X-Request-Id"]));
  RequestLogScope scope(request_id_);
  if (auto error = validate_request_head(req.base()))
    return reply_and_close(error->status, error->message);
  if (!origin)
    return reply_and_close(400, "malformed request target '" + target.substr(0, 200) +
                                    "': a path (/v1/completions) or an http(s) URI is expected");
  // What the head decides is taken from the head alone: a chunked body's trailer fields are
  // merged into the same field list by Beast, and must not authenticate or reframe.
  http10_ = req.version() < 11;
  // Shutting down: this request's answer (a 503) is the connection's last, so a pipelining
  // client sees Connection: close and the rest of its pipeline is read and dropped (linger).
  keep_alive_ = req.keep_alive() && !http10_ && !ctx_.shutting_down.load();
  authorization_ = std::string(req[http::field::authorization]);
  const bool has_body = parser_->chunked() || parser_->content_length().value_or(0) > 0;
  if (probe_only_) {
    keep_alive_ = false;  // one request per reserved slot
    std::string allowed;
    const Route route = route_for(target, &allowed, ctx_.config.root_path);
    if (has_body || (route != Route::kHealth && route != Route::kMetrics))
      return reply_and_close(503, "too many connections (--max-connections " +
                                      std::to_string(ctx_.config.max_connections) +
                                      "); only GET /health and GET /metrics are answered now; "
                                      "retry later");
  }
  if (has_body && !preflight_) {
    // Authentication, route and method before any body byte is read: a client without the
    // key (or on a path that takes no body) holds no body budget. The body is not read, so
    // the connection closes after the answer.
    if (auto error = access_error(req.method_string(), target))
      return reply_and_close(error->status(), error->what(), error->code());
  }
  // The body's bytes are taken from the server-wide budget as they are buffered (not the
  // declared Content-Length up front: idle clients declaring 16 MiB each could hold it all).
  body_lease_ = BodyLease(&shared_.body_budget, 0);
  if (req[http::field::expect] == "100-continue") queue_write("HTTP/1.1 100 Continue\r\n\r\n");
  arm_read_timeout(ctx_.config.read_timeout);
  on_body_part(beast::error_code{});  // no body (is_done already), or body bytes buffered
}

/// The answer to a request without the API key (401), on an unknown path (404) or with a
/// method the path does not take (405); nullopt when it may proceed. Authentication comes
/// first: without the key, unknown paths and methods answer 401 too.
std::optional<ApiError> Session::access_error(std::string_view method_name,
                                              const std::string& target) {
  const std::string path = target.substr(0, target.find('?'));
  std::string method;
  const Route route = route_for(target, &method, ctx_.config.root_path);
  if (!authorized(ctx_, route, authorization_))
    return ApiError(401, "Incorrect API key provided.", "", "invalid_api_key");
  if (route == Route::kNotFound)
    return ApiError(404, "no such endpoint: " + std::string(method_name) + " " + path, "",
                    "not_found");
  // HEAD is GET without the body (RFC 9110 9.3.2): a probe may use it on /health.
  if (method_name != method && !(method_name == "HEAD" && method == "GET"))
    return ApiError(405, "method " + std::string(method_name) + " not allowed on " + path +
                             "; use " + method);
  return std::nullopt;
}

void Session::handle(http::request<http::string_body> req) {
  // http10_, keep_alive_ and authorization_ come from the head (on_header), never a trailer;
  // HTTP/1.0: one request per connection (no chunked framing, no persistent connections).
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  std::string method;
  const Route route = route_for(target, &method, ctx_.config.root_path);
  Reply reply;
  try {
    if (preflight_) {
      // A CORS preflight, on any path: browsers send it without credentials, so before the
      // key. It was decided from the head (on_header), never from a chunked body's trailer.
      cors_fields_ = preflight_->fields;
      reply = Reply{preflight_->status, "text/plain; charset=utf-8", preflight_->body};
    } else {
      if (auto error = access_error(req.method_string(), target)) throw *error;
      switch (route) {
        case Route::kHealth: reply = handle_health(ctx_); break;
        case Route::kMetrics: reply = handle_metrics(ctx_); break;
        case Route::kVersion: reply = handle_version(); break;
        case Route::kModels: reply = handle_models(ctx_); break;
        case Route::kTokenize:
        case Route::kDetokenize:
        case Route::kCompletions:
        case Route::kChatCompletions:
          prepare(route, std::string(req.method_string()) + " " + path, std::move(req.body()));
          return;
        case Route::kNotFound: break;
      }
    }
  } catch (const ApiError& e) {
    if (e.status() >= 500)
      spdlog::warn("{} {}: {} {}", req.method_string(), path, e.status(), e.what());
    reply = error_reply(e);
  }
  body_lease_.reset();
  status_ = reply.status;
  std::string response = serialize_response(reply.status, reply.content_type, reply.body,
                                            keep_alive_);
  if (req.method() == http::verb::head)  // the head alone, with the GET's Content-Length
    response.resize(response.find("\r\n\r\n") + 4);
  queue_write(with_request_fields(std::move(response)));
  response_done_ = true;
}

/// `response` with this request's X-Request-Id and CORS fields after its status line.
std::string Session::with_request_fields(std::string response) const {
  response = with_request_id(std::move(response), request_id_);
  const size_t eol = response.find("\r\n");
  if (eol != std::string::npos) response.insert(eol + 2, cors_fields_);
  return response;
}

}  // namespace octet::server::detail

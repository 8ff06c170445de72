#pragma once
// CORS (https://fetch.spec.whatwg.org/#http-cors-protocol) as vLLM's server has it: Starlette's
// CORSMiddleware configured by --allowed-origins, --allowed-methods, --allowed-headers and
// --allow-credentials. Pure decisions over a request head's fields; the session
// (http_routing.cpp) answers preflights before routing and --api-key, and adds
// response_fields() to every response it writes for the request.
//
// Where octet differs from Starlette 0.47: with --allow-credentials, a response names the
// request's origin even without a Cookie (Starlette sends "*", which browsers refuse for a
// credentialed request), and a disallowed origin's response gets no CORS field at all
// (Starlette still adds Access-Control-Allow-Credentials).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/serve_config.h"

namespace octet::server {

/// What CORS reads of a request head (never of a chunked body's trailer).
struct CorsRequest {
  std::string_view method;                          // "OPTIONS"
  std::optional<std::string_view> origin;           // Origin
  std::optional<std::string_view> request_method;   // Access-Control-Request-Method
  std::optional<std::string_view> request_headers;  // Access-Control-Request-Headers
  bool has_cookie = false;                          // a Cookie field is present
};

/// The answer to a preflight: 200 "OK", or 400 "Disallowed CORS origin, method, headers" (the
/// failures found, in that order), text/plain, with `fields` in its head.
struct CorsPreflight {
  int status = 200;
  std::string body;
  std::string fields;  // header lines, each "Name: value\r\n"
};

class CorsPolicy {
 public:
  /// Starlette's ALL_METHODS: what "*" in --allowed-methods stands for.
  static constexpr const char* kAllMethods[] = {"DELETE", "GET",  "HEAD", "OPTIONS",
                                                "PATCH",  "POST", "PUT"};
  /// Seconds a browser may cache a preflight's answer (Starlette's max_age).
  static constexpr int kMaxAgeSeconds = 600;

  /// "*" in `origins` allows every origin, in `headers` every header; methods are compared
  /// case-sensitively, headers case-insensitively.
  CorsPolicy(std::vector<std::string> origins, std::vector<std::string> methods,
             std::vector<std::string> headers, bool allow_credentials);
  /// The policy of a validated config (its JSON lists parse).
  static CorsPolicy from_config(const ServeConfig& config);

  /// An OPTIONS request with Origin and Access-Control-Request-Method: answered by preflight(),
  /// not routed.
  static bool is_preflight(const CorsRequest& r);
  /// The answer to a preflight (is_preflight(r)).
  CorsPreflight preflight(const CorsRequest& r) const;
  /// The header lines ("Name: value\r\n" each) to add to any other response to `r`: none
  /// without an Origin or for an origin not allowed; else Access-Control-Allow-Origin ("*"
  /// when every origin is allowed, credentials are off and no Cookie was sent; otherwise the
  /// origin, with Vary: Origin) and Access-Control-Allow-Credentials: true when enabled.
  std::string response_fields(const CorsRequest& r) const;

 private:
  bool origin_allowed(std::string_view origin) const;

  std::vector<std::string> origins_;
  std::vector<std::string> methods_;        // "*" expanded to kAllMethods
  std::vector<std::string> headers_lower_;  // with the safelisted ones, lower case
  std::string allow_headers_;  // Access-Control-Allow-Headers unless every header is allowed
  bool all_origins_ = false;
  bool all_headers_ = false;
  bool credentials_ = false;
};

}  // namespace octet::server

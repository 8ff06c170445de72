// CORS as vLLM's server has it (Starlette's CORSMiddleware under --allowed-origins,
// --allowed-methods, --allowed-headers, --allow-credentials): the decisions of CorsPolicy
// (server/http/cors.h) with exact header lines.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "server/http/cors.h"

using octet::server::CorsPolicy;
using octet::server::CorsPreflight;
using octet::server::CorsRequest;

namespace {

const std::vector<std::string> kAll = {"*"};

CorsRequest preflight_request(std::string_view origin, std::string_view method,
                              std::optional<std::string_view> headers = std::nullopt) {
  CorsRequest r;
  r.method = "OPTIONS";
  r.origin = origin;
  r.request_method = method;
  r.request_headers = headers;
  return r;
}

CorsRequest simple_request(std::optional<std::string_view> origin, bool cookie = false) {
  CorsRequest r;
  r.method = "POST";
  r.origin = origin;
  r.has_cookie = cookie;
  return r;
}

constexpr const char* kAllMethodsLine =
    "Access-Control-Allow-Methods: DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT\r\n";

}  // namespace

// ---- CorsPolicy -----------------------------------------------------------------------------

TEST_CASE("CORS: a preflight is an OPTIONS with Origin and Access-Control-Request-Method",
          "[http][cors]") {
  CHECK(CorsPolicy::is_preflight(preflight_request("http://a.example", "POST")));
  CorsRequest r = preflight_request("http://a.example", "POST");
  r.request_method.reset();
  CHECK_FALSE(CorsPolicy::is_preflight(r));  // routed: 405 names the allowed method
  r = preflight_request("http://a.example", "POST");
  r.origin.reset();
  CHECK_FALSE(CorsPolicy::is_preflight(r));
  r = preflight_request("http://a.example", "POST");
  r.method = "GET";
  CHECK_FALSE(CorsPolicy::is_preflight(r));
}

TEST_CASE("CORS defaults (vLLM's): every origin, method and header, no credentials",
          "[http][cors]") {
  const CorsPolicy p(kAll, kAll, kAll, false);
  const CorsPreflight ok =
      p.preflight(preflight_request("http://ui.example", "POST", "content-type, authorization"));
  CHECK(ok.status == 200);
  CHECK(ok.body == "OK");
  CHECK(ok.fields == std::string("Access-Control-Allow-Origin: *\r\n") + kAllMethodsLine +
                         "Access-Control-Allow-Headers: content-type, authorization\r\n"
                         "Access-Control-Max-Age: 600\r\n");
  // No requested headers: no Access-Control-Allow-Headers (every header is allowed).
  CHECK(p.preflight(preflight_request("http://ui.example", "GET")).fields ==
        std::string("Access-Control-Allow-Origin: *\r\n") + kAllMethodsLine +
            "Access-Control-Max-Age: 600\r\n");
  // "*" methods are Starlette's ALL_METHODS, case-sensitive.
  CHECK(p.preflight(preflight_request("http://ui.example", "post")).body ==
        "Disallowed CORS method");
  CHECK(p.response_fields(simple_request("http://ui.example")) ==
        "Access-Control-Allow-Origin: *\r\n");
  CHECK(p.response_fields(simple_request("null")) == "Access-Control-Allow-Origin: *\r\n");
  CHECK(p.response_fields(simple_request(std::nullopt)).empty());
  // A request with cookies must see its own origin (browsers refuse "*" there).
  CHECK(p.response_fields(simple_request("http://ui.example", true)) ==
        "Access-Control-Allow-Origin: http://ui.example\r\nVary: Origin\r\n");
}

TEST_CASE("CORS with listed origins: the origin echoed with Vary, others refused",
          "[http][cors]") {
  const CorsPolicy p({"http://a.example", "https://b.example:8443"}, kAll, kAll, false);
  CHECK(p.response_fields(simple_request("http://a.example")) ==
        "Access-Control-Allow-Origin: http://a.example\r\nVary: Origin\r\n");
  CHECK(p.response_fields(simple_request("https://b.example:8443")) ==
        "Access-Control-Allow-Origin: https://b.example:8443\r\nVary: Origin\r\n");
  for (const char* other : {"http://c.example", "http://a.example/", "HTTP://A.EXAMPLE",
                            "http://a.example:80", "null", ""})
    CHECK(p.response_fields(simple_request(other)).empty());
  const CorsPreflight ok = p.preflight(preflight_request("http://a.example", "POST"));
  CHECK(ok.status == 200);
  CHECK(ok.fields == std::string("Access-Control-Allow-Origin: http://a.example\r\n"
                                 "Vary: Origin\r\n") +
                         kAllMethodsLine + "Access-Control-Max-Age: 600\r\n");
  const CorsPreflight refused = p.preflight(preflight_request("http://c.example", "POST"));
  CHECK(refused.status == 400);
  CHECK(refused.body == "Disallowed CORS origin");
  CHECK(refused.fields ==
        std::string("Vary: Origin\r\n") + kAllMethodsLine + "Access-Control-Max-Age: 600\r\n");
  // "*" anywhere in the list allows every origin; [] allows none.
  CHECK(CorsPolicy({"http://a.example", "*"}, kAll, kAll, false)
            .response_fields(simple_request("http://z.example")) ==
        "Access-Control-Allow-Origin: *\r\n");
  const CorsPolicy none({}, kAll, kAll, false);
  CHECK(none.response_fields(simple_request("http://a.example")).empty());
  CHECK(none.preflight(preflight_request("http://a.example", "GET")).status == 400);
}

TEST_CASE("CORS with listed methods and headers: Starlette's lists and 400 texts",
          "[http][cors]") {
  const CorsPolicy p({"http://a.example"}, {"GET", "POST"}, {"X-Custom"}, false);
  const std::string lists =
      "Access-Control-Allow-Methods: GET, POST\r\n"
      "Access-Control-Allow-Headers: Accept, Accept-Language, Content-Language, Content-Type, "
      "X-Custom\r\n"
      "Access-Control-Max-Age: 600\r\n";
  const CorsPreflight ok =
      p.preflight(preflight_request("http://a.example", "POST", "x-custom,Content-Type , accept"));
  CHECK(ok.status == 200);
  CHECK(ok.fields ==
        "Access-Control-Allow-Origin: http://a.example\r\nVary: Origin\r\n" + lists);
  CHECK(p.preflight(preflight_request("http://a.example", "DELETE")).body ==
        "Disallowed CORS method");
  const CorsPreflight headers =
      p.preflight(preflight_request("http://a.example", "POST", "content-type, authorization"));
  CHECK(headers.status == 400);
  CHECK(headers.body == "Disallowed CORS headers");
  CHECK(headers.fields ==
        "Access-Control-Allow-Origin: http://a.example\r\nVary: Origin\r\n" + lists);
  CHECK(p.preflight(preflight_request("http://c.example", "PUT", "authorization")).body ==
        "Disallowed CORS origin, method, headers");
}

TEST_CASE("CORS with credentials: the origin, never \"*\", and Allow-Credentials",
          "[http][cors]") {
  const CorsPolicy all(kAll, kAll, kAll, true);
  CHECK(all.response_fields(simple_request("http://ui.example")) ==
        "Access-Control-Allow-Origin: http://ui.example\r\nVary: Origin\r\n"
        "Access-Control-Allow-Credentials: true\r\n");
  CHECK(all.preflight(preflight_request("http://ui.example", "POST", "authorization")).fields ==
        std::string("Access-Control-Allow-Origin: http://ui.example\r\nVary: Origin\r\n") +
            kAllMethodsLine +
            "Access-Control-Allow-Headers: authorization\r\n"
            "Access-Control-Max-Age: 600\r\n"
            "Access-Control-Allow-Credentials: true\r\n");
  // An origin not allowed gets nothing, the credentials field included.
  const CorsPolicy listed({"http://a.example"}, kAll, kAll, true);
  CHECK(listed.response_fields(simple_request("http://c.example")).empty());
  CHECK(listed.response_fields(simple_request(std::nullopt)).empty());
}

TEST_CASE("CORS never echoes a value that could split the response head", "[http][cors]") {
  const CorsPolicy p(kAll, kAll, kAll, true);
  const std::string bad_origin("http://a.example\r\nX-Evil: 1", 27);
  CHECK(p.response_fields(simple_request(bad_origin)).empty());
  CHECK(p.preflight(preflight_request(bad_origin, "POST")).body == "Disallowed CORS origin");
  const CorsPreflight h = p.preflight(preflight_request("http://a.example", "POST", "a\nb"));
  CHECK(h.body == "Disallowed CORS headers");
  CHECK(h.fields.find("a\nb") == std::string::npos);
}

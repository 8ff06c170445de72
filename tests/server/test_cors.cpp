// CORS as vLLM's server has it (Starlette's CORSMiddleware under --allowed-origins,
// --allowed-methods, --allowed-headers, --allow-credentials): the decisions of CorsPolicy
// (server/http/cors.h) with exact header lines, then the real `octet serve` on stories260K over
// loopback: preflights answered before --api-key, the fields on every kind of response
// (JSON, SSE, errors from routing and from the limits, probes) and none without an Origin.
#include <catch2/catch.hpp>

#include "cli_run.h"
#include "serve_process.h"

#include <cctype>
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

// ---- the real server --------------------------------------------------------------------------

namespace {

/// The head of a raw response (up to its empty line).
std::string head_of(const std::string& response) {
  return response.substr(0, response.find("\r\n\r\n") + 2);
}

/// The value of header `name` (any case) in the response's head, or nullopt.
std::optional<std::string> header(const std::string& response, std::string name) {
  const std::string head = head_of(response);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t at = head.find("\r\n");
  while (at != std::string::npos && at + 2 < head.size()) {
    const size_t end = head.find("\r\n", at + 2);
    const std::string line = head.substr(at + 2, end - at - 2);
    const size_t colon = line.find(':');
    std::string key = line.substr(0, colon);
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (colon != std::string::npos && key == name) {
      const size_t v = line.find_first_not_of(' ', colon + 1);
      return v == std::string::npos ? "" : line.substr(v);
    }
    at = end;
  }
  return std::nullopt;
}

int status_code(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return -1;
  return std::stoi(response.substr(9, 3));
}

std::string body_of(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

std::string preflight(const std::string& path, const std::string& origin,
                      const std::string& method = "POST", const std::string& headers = "") {
  return "OPTIONS " + path + " HTTP/1.1\r\nHost: t\r\nConnection: close\r\nOrigin: " + origin +
         "\r\nAccess-Control-Request-Method: " + method + "\r\n" +
         (headers.empty() ? "" : "Access-Control-Request-Headers: " + headers + "\r\n") + "\r\n";
}

std::string request(const std::string& method, const std::string& path,
                    const std::string& extra_headers = "") {
  return method + " " + path + " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" + extra_headers +
         "\r\n";
}

const std::string kOrigin = "Origin: http://ui.example\r\n";
const std::string kKey = "Authorization: Bearer sekret\r\n";
const std::string kPrompt = R"({"prompt":"Once","max_tokens":3})";

}  // namespace

TEST_CASE("serve: preflights answered before --api-key, CORS fields on every response",
          "[http][serve][cors]") {
  ServeProcess server({"--api-key", "sekret", "--max-body-bytes", "1024", "--max-total-body-bytes",
                       "1500", "--max-header-bytes", "4096", "--read-timeout", "2"});
  const int p = server.port();

  // Preflight, no key (browsers send none): 200 "OK" with the defaults' fields.
  const std::string pre =
      roundtrip(p, preflight("/v1/completions", "http://ui.example", "POST",
                             "content-type, authorization")).bytes;
  INFO(pre);
  CHECK(status_code(pre) == 200);
  CHECK(body_of(pre) == "OK");
  CHECK(header(pre, "Content-Type") == "text/plain; charset=utf-8");
  CHECK(header(pre, "Access-Control-Allow-Origin") == "*");
  CHECK(header(pre, "Access-Control-Allow-Methods") ==
        "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  CHECK(header(pre, "Access-Control-Allow-Headers") == "content-type, authorization");
  CHECK(header(pre, "Access-Control-Max-Age") == "600");
  CHECK_FALSE(header(pre, "Access-Control-Allow-Credentials"));
  CHECK(header(pre, "X-Request-Id"));
  // Any path; the connection goes on (keep-alive), a body sent with a preflight is read.
  CHECK(status_code(roundtrip(p, preflight("/v1/chat/completions", "http://ui.example")).bytes) ==
        200);
  CHECK(status_code(roundtrip(p, preflight("/no/such/path", "http://ui.example")).bytes) == 200);
  const std::string pipelined = roundtrip(
      p, "OPTIONS /v1/completions HTTP/1.1\r\nHost: t\r\nOrigin: http://ui.example\r\n"
         "Access-Control-Request-Method: POST\r\nContent-Length: 2\r\n\r\n{}" +
             post("/v1/completions", kPrompt, kKey + kOrigin)).bytes;
  CHECK(pipelined.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(pipelined.find("\r\n\r\nOKHTTP/1.1 200 OK\r\n") != std::string::npos);
  CHECK(pipelined.find("\"text_completion\"") != std::string::npos);
  // OPTIONS without Access-Control-Request-Method is routed as before: 405 (with the key),
  // its CORS field added.
  const std::string options = roundtrip(p, request("OPTIONS", "/v1/completions", kKey + kOrigin)).bytes;
  CHECK(status_code(options) == 405);
  CHECK(header(options, "Access-Control-Allow-Origin") == "*");
  CHECK(status_code(roundtrip(p, request("OPTIONS", "/v1/completions", kOrigin)).bytes) == 401);

  // The actual request: JSON, with the key.
  const std::string ok = roundtrip(p, post("/v1/completions", kPrompt, kKey + kOrigin)).bytes;
  CHECK(status_code(ok) == 200);
  CHECK(header(ok, "Access-Control-Allow-Origin") == "*");
  CHECK_FALSE(header(ok, "Vary"));
  // A stream (chunked SSE).
  const std::string sse = roundtrip(
      p, post("/v1/completions", R"({"prompt":"Once","max_tokens":3,"stream":true})",
              kKey + kOrigin)).bytes;
  CHECK(status_code(sse) == 200);
  CHECK(header(sse, "Content-Type") == "text/event-stream");
  CHECK(header(sse, "Access-Control-Allow-Origin") == "*");
  CHECK(sse.find("data: [DONE]") != std::string::npos);
  // Errors: no key (401, refused at header time), unknown path (404), wrong method (405), bad
  // body (400), probes and /v1/models.
  const std::string no_key = roundtrip(p, post("/v1/completions", kPrompt, kOrigin)).bytes;
  CHECK(status_code(no_key) == 401);
  CHECK(header(no_key, "Access-Control-Allow-Origin") == "*");
  for (const auto& [req, status] : std::vector<std::pair<std::string, int>>{
           {request("GET", "/no/such/path", kKey + kOrigin), 404},
           {request("GET", "/v1/completions", kKey + kOrigin), 405},
           {post("/v1/completions", "{", kKey + kOrigin), 400},
           {request("GET", "/v1/models", kKey + kOrigin), 200},
           {request("GET", "/health", kOrigin), 200},
           {request("GET", "/metrics", kOrigin), 200},
           {request("HEAD", "/health", kOrigin), 200}}) {
    const std::string r = roundtrip(p, req).bytes;
    INFO(req << "\n->\n" << head_of(r));
    CHECK(status_code(r) == status);
    CHECK(header(r, "Access-Control-Allow-Origin") == "*");
  }
  // Errors of the limits, answered before routing once the head parsed: 413 (body over
  // --max-body-bytes), 400 (bad framing), 431 (a chunked trailer over --max-header-bytes), 503
  // (bodies over --max-total-body-bytes), 408 (body not complete within --read-timeout).
  const std::string big = roundtrip(p, post("/v1/completions", std::string(2000, 'x'),
                                            kKey + kOrigin)).bytes;
  CHECK(status_code(big) == 413);
  CHECK(header(big, "Access-Control-Allow-Origin") == "*");
  const std::string framing = roundtrip(
      p, "POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + kOrigin +
             "Transfer-Encoding: gzip\r\n\r\n").bytes;
  CHECK(status_code(framing) == 400);
  CHECK(header(framing, "Access-Control-Allow-Origin") == "*");
  std::string trailer;
  while (trailer.size() < (40u << 10)) trailer += "X-T: " + std::string(90, 'v') + "\r\n";
  const std::string large_trailer = roundtrip(
      p, "POST /tokenize HTTP/1.1\r\nHost: t\r\n" + kKey + kOrigin +
             "Transfer-Encoding: chunked\r\n\r\n11\r\n{\"prompt\":\"Once\"}\r\n0\r\n" + trailer +
             "\r\n").bytes;
  CHECK(status_code(large_trailer) == 431);
  CHECK(header(large_trailer, "Access-Control-Allow-Origin") == "*");
  {
    // One connection holds 900 body bytes; the next 1000 do not fit in the 1500.
    const int holder = connect_to(p);
    send_all(holder, "POST /tokenize HTTP/1.1\r\nHost: t\r\n" + kKey +
                         "Content-Length: 1000\r\n\r\n{\"prompt\":\"" + std::string(888, 'a'));
    std::this_thread::sleep_for(300ms);
    const std::string full = roundtrip(
        p, "POST /tokenize HTTP/1.1\r\nHost: t\r\n" + kKey + kOrigin +
               "Content-Length: 1000\r\n\r\n" + std::string(1000, ' ')).bytes;
    close(holder);
    CHECK(status_code(full) == 503);
    CHECK(header(full, "Access-Control-Allow-Origin") == "*");
  }
  const std::string slow = roundtrip(
      p, "POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + kKey + kOrigin +
             "Content-Length: 100\r\n\r\n{\"prompt\"").bytes;
  CHECK(status_code(slow) == 408);
  CHECK(header(slow, "Access-Control-Allow-Origin") == "*");

  // No Origin: no CORS field anywhere, preflight-looking headers or not.
  for (const std::string& req :
       {post("/v1/completions", kPrompt, kKey), request("GET", "/health"),
        request("OPTIONS", "/v1/completions", kKey + "Access-Control-Request-Method: POST\r\n"),
        post("/v1/completions", kPrompt)}) {
    const std::string r = roundtrip(p, req).bytes;
    INFO(head_of(r));
    CHECK(status_code(r) > 0);
    CHECK(head_of(r).find("Access-Control") == std::string::npos);
    CHECK_FALSE(header(r, "Vary"));
  }
}

TEST_CASE("serve --allowed-origins: the listed origin echoed with Vary, others get nothing",
          "[http][serve][cors]") {
  ServeProcess server({"--allowed-origins", R"(["http://a.example"])", "--allowed-methods",
                       R"(["GET", "POST"])"});
  const int p = server.port();
  const std::string a = roundtrip(p, post("/v1/completions", kPrompt,
                                          "Origin: http://a.example\r\n")).bytes;
  CHECK(status_code(a) == 200);
  CHECK(header(a, "Access-Control-Allow-Origin") == "http://a.example");
  CHECK(header(a, "Vary") == "Origin");
  const std::string b = roundtrip(p, post("/v1/completions", kPrompt,
                                          "Origin: http://b.example\r\n")).bytes;
  CHECK(status_code(b) == 200);  // the browser, not the server, withholds the answer
  CHECK(head_of(b).find("Access-Control") == std::string::npos);
  CHECK_FALSE(header(b, "Vary"));

  const std::string pre_a = roundtrip(p, preflight("/v1/completions", "http://a.example")).bytes;
  CHECK(status_code(pre_a) == 200);
  CHECK(header(pre_a, "Access-Control-Allow-Origin") == "http://a.example");
  CHECK(header(pre_a, "Vary") == "Origin");
  CHECK(header(pre_a, "Access-Control-Allow-Methods") == "GET, POST");
  const std::string pre_b = roundtrip(p, preflight("/v1/completions", "http://b.example")).bytes;
  CHECK(status_code(pre_b) == 400);
  CHECK(body_of(pre_b) == "Disallowed CORS origin");
  CHECK_FALSE(header(pre_b, "Access-Control-Allow-Origin"));
  const std::string pre_put =
      roundtrip(p, preflight("/v1/completions", "http://a.example", "PUT")).bytes;
  CHECK(status_code(pre_put) == 400);
  CHECK(body_of(pre_put) == "Disallowed CORS method");
}

TEST_CASE("serve --allow-credentials: the origin, never \"*\", and Allow-Credentials",
          "[http][serve][cors]") {
  ServeProcess server({"--allow-credentials"});
  const int p = server.port();
  const std::string r = roundtrip(p, post("/v1/completions", kPrompt, kOrigin)).bytes;
  CHECK(status_code(r) == 200);
  CHECK(header(r, "Access-Control-Allow-Origin") == "http://ui.example");
  CHECK(header(r, "Vary") == "Origin");
  CHECK(header(r, "Access-Control-Allow-Credentials") == "true");
  const std::string pre =
      roundtrip(p, preflight("/v1/completions", "http://ui.example", "POST", "authorization"))
          .bytes;
  CHECK(status_code(pre) == 200);
  CHECK(header(pre, "Access-Control-Allow-Origin") == "http://ui.example");
  CHECK(header(pre, "Access-Control-Allow-Credentials") == "true");
  CHECK(header(pre, "Access-Control-Allow-Headers") == "authorization");
}

TEST_CASE("serve: a CORS list that is not a JSON list of strings is refused at start-up, exit 2",
          "[http][serve][cors]") {
  // Bounded: a binary that wrongly accepts the value would serve forever.
  const std::string base =
      "timeout 30 " + octet_binary() + " serve --model " + kStories + " --host 127.0.0.1 --port 0 ";
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--allowed-origins", "http://a.example"},  // not JSON
           {"--allowed-origins", R"("*")"},            // not a list
           {"--allowed-origins", R"(["http://a.example", 1])"},
           {"--allowed-methods", R"({"GET": 1})"},
           {"--allowed-headers", R"([["x"]])"},
           {"--allowed-headers", R"(["x\r\ny"])"}}) {
    const octet::testing::RunResult r =
        octet::testing::run_command(base + flag + " '" + value + "' 2>&1");
    INFO(flag << " " << value << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(flag + " must be a JSON list of strings") != std::string::npos);
    CHECK(r.output.find("listening") == std::string::npos);
  }
}

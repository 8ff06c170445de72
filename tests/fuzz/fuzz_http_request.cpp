// fuzz-layer: server
// libFuzzer harness: bytes off the socket -> Boost.Beast http::request_parser<string_body> with
// octet's limits (ServeConfig's max_header_bytes and max_body_bytes, as http_connection.cpp sets
// them), fed in pieces as async reads deliver them; then octet's head validation
// (validate_request_head, origin_form), the CORS fields (CorsPolicy), routing (route_for,
// authorized) on every request that parsed, and the next request on the same buffer (keep-alive
// pipelining). Beast's parse errors are expected; a crash or sanitizer report is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

// Boost <= 1.85 asserts "n >= 5" in basic_parser::parse_chunk_header when a chunked body arrives
// in pieces such as "0\r\n", "\r", "\n" (boostorg/beast#2861, fixed in 1.86): the assertion is
// wrong, the code after it returns need_more. Release builds (NDEBUG) never see it; off here.
#define BOOST_DISABLE_ASSERTS 1
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "config/serve_config.h"
#include "server/http/cors.h"
#include "server/http/http_message.h"
#include "server/openai/routes.h"
#include "server/openai/server_context.h"

namespace http = boost::beast::http;

namespace {

octet::server::ServerContext& context() {
  static octet::server::ServerContext* ctx = [] {
    auto* c = new octet::server::ServerContext;
    c->config.api_key = "sk-fuzz";  // so authorized() compares keys on /v1/*
    c->model_name = "fuzz-model";
    return c;
  }();
  return *ctx;
}

/// CORS fields are whole "Name: value\r\n" lines: no CR, LF or NUL of the request's
/// values inside one (a response head split by an Origin would be a finding).
void check_fields(const std::string& fields) {
  size_t start = 0;
  while (start < fields.size()) {
    const size_t end = fields.find("\r\n", start);
    if (end == std::string::npos) __builtin_trap();
    const std::string_view line(fields.data() + start, end - start);
    if (line.find(": ") == std::string_view::npos ||
        line.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos)
      __builtin_trap();
    start = end + 2;
  }
}

/// What Session::on_header computes for CORS, under vLLM's defaults and under lists.
void cors(const http::request_header<>& head) {
  static const octet::server::CorsPolicy any({"*"}, {"*"}, {"*"}, false);
  static const octet::server::CorsPolicy listed({"http://a.example"}, {"GET", "POST"},
                                                {"X-Custom"}, true);
  auto field = [&](std::string_view name) -> std::optional<std::string_view> {
    const auto it = head.find(name);
    if (it == head.end()) return std::nullopt;
    return std::string_view(it->value().data(), it->value().size());
  };
  octet::server::CorsRequest r;
  r.method = std::string_view(head.method_string().data(), head.method_string().size());
  r.origin = field("Origin");
  r.request_method = field("Access-Control-Request-Method");
  r.request_headers = field("Access-Control-Request-Headers");
  r.has_cookie = head.count(http::field::cookie) > 0;
  for (const octet::server::CorsPolicy* p : {&any, &listed}) {
    check_fields(p->response_fields(r));
    if (!octet::server::CorsPolicy::is_preflight(r)) continue;
    const octet::server::CorsPreflight answer = p->preflight(r);
    if (answer.status != 200 && answer.status != 400) __builtin_trap();
    check_fields(answer.fields);
  }
}

// What the session does with a request that parsed (http_routing.cpp's Session::handle, up to
// the point where a handler would run).
void route(const http::request<http::string_body>& req) {
  const octet::server::ServerContext& ctx = context();
  cors(req.base());  // on every head that parsed, before its checks
  // The RFC 9112 head rules (Host, Transfer-Encoding, Content-Length) run first, as in
  // Session::on_header; a rejected head gets its status and is not routed. Routing reads the
  // target's origin-form (a target of another form gets 400).
  if (const auto err = octet::server::validate_request_head(req)) {
    if (err->status < 400 || err->status > 599 || err->message.empty()) __builtin_trap();
    return;
  }
  const std::optional<std::string> target = octet::server::origin_form(req.target());
  if (!target) return;
  if (target->empty() || (*target)[0] != '/') __builtin_trap();
  std::string method;
  const octet::server::Route r = octet::server::route_for(*target, &method);
  const bool ok = octet::server::authorized(ctx, r, std::string(req[http::field::authorization]));
  if (r == octet::server::Route::kNotFound) return;
  const bool method_ok = std::string(req.method_string()) == method;
  volatile bool sink = method_ok && ok && req.keep_alive() && !req.body().empty();
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const octet::ServeConfig& config = context().config;
  // The first byte picks how many bytes each "read" delivers (1..256), so that the parser's
  // resumption at every split point is exercised, as on a slow socket.
  if (size == 0) return 0;
  const size_t step = size_t(data[0]) + 1;
  ++data;
  --size;
  size_t pos = 0;
  for (int request = 0; request < 8 && pos < size; ++request) {
    http::request_parser<http::string_body> parser;
    parser.eager(true);
    parser.header_limit(static_cast<uint32_t>(config.max_header_bytes));
    parser.body_limit(static_cast<uint64_t>(config.max_body_bytes));
    boost::beast::flat_buffer buffer;
    boost::beast::error_code ec;
    while (!parser.is_done() && pos < size) {
      const size_t n = std::min(step, size - pos);
      auto mb = buffer.prepare(n);
      std::memcpy(mb.data(), data + pos, n);
      buffer.commit(n);
      pos += n;
      while (buffer.size() > 0 && !parser.is_done()) {
        const size_t used = parser.put(buffer.data(), ec);
        buffer.consume(used);
        if (ec == http::error::need_more || (!ec && used == 0)) {
          ec = {};
          break;
        }
        if (ec) return 0;  // a malformed request: the session answers 400/413/431 and closes
      }
    }
    if (!parser.is_done()) {
      parser.put_eof(ec);  // the client closed: a close-delimited body may end here
      if (ec || !parser.is_done()) return 0;
    }
    route(parser.get());
    if (!parser.get().keep_alive()) return 0;
    pos -= buffer.size();  // bytes read past this request belong to the next one
  }
  return 0;
}

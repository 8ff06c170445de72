#include "server/http/http_message.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include <boost/beast/http.hpp>

namespace octet::server {

namespace http = boost::beast::http;

std::string serialize_response(int status, const std::string& content_type,
                               const std::string& body, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::server, "octet");
  res.set(http::field::content_type, content_type);
  res.keep_alive(keep_alive);
  res.body() = body;
  res.prepare_payload();
  std::ostringstream os;
  os << res;
  return os.str();
}

std::string sse_head(bool keep_alive, bool chunked) {
  http::response<http::empty_body> res{http::status::ok, 11};
  res.set(http::field::server, "octet");
  res.set(http::field::content_type, "text/event-stream");
  res.set(http::field::cache_control, "no-cache");
  res.keep_alive(keep_alive && chunked);
  if (chunked) res.chunked(true);
  std::ostringstream os;
  os << res.base();
  return os.str();
}

std::string http_chunk(const std::string& data) {
  if (data.empty()) return "";
  std::ostringstream os;
  os << std::hex << data.size() << "\r\n" << data << "\r\n";
  return os.str();
}

namespace {

bool is_ows(char c) { return c == ' ' || c == '\t'; }

std::string lower_trimmed(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_ows(s[b])) ++b;
  while (e > b && is_ows(s[e - 1])) --e;
  std::string out(s.substr(b, e - b));
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

}  // namespace

std::optional<HeadError> validate_request_head(const http::request_header<>& head) {
  // Transfer-Encoding: every field line, every comma-separated coding (empty list elements
  // are allowed and ignored, RFC 9110 5.6.1). Only a single "chunked" is supported.
  bool has_te = false;
  int codings = 0, chunked = 0;
  for (const auto& f : head) {
    if (f.name() != http::field::transfer_encoding) continue;
    has_te = true;
    const std::string_view v(f.value().data(), f.value().size());
    size_t start = 0;
    while (start <= v.size()) {
      size_t comma = v.find(',', start);
      if (comma == std::string_view::npos) comma = v.size();
      const std::string coding = lower_trimmed(v.substr(start, comma - start));
      if (!coding.empty()) {
        ++codings;
        if (coding != "chunked")
          return HeadError{400, "unsupported Transfer-Encoding '" + coding +
                                    "' (only chunked is accepted)"};
        ++chunked;
      }
      start = comma + 1;
    }
  }
  if (has_te) {
    // RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 message is faulty framing.
    if (head.version() < 11)
      return HeadError{400, "Transfer-Encoding is not allowed in an HTTP/1.0 request"};
    if (codings == 0) return HeadError{400, "empty Transfer-Encoding"};
    if (chunked > 1) return HeadError{400, "Transfer-Encoding lists chunked more than once"};
    if (head.count(http::field::content_length) > 0)
      return HeadError{400, "a request must not carry both Transfer-Encoding and "
                            "Content-Length"};
  }
  const size_t hosts = head.count(http::field::host);
  if (hosts > 1) return HeadError{400, "more than one Host header"};
  if (hosts == 0 && head.version() >= 11)
    return HeadError{400, "an HTTP/1.1 request needs a Host header"};
  return std::nullopt;
}

namespace {

// RFC 3986 3.2: host [":" port], host an IP literal in brackets or a name of unreserved,
// percent-encoded and sub-delimiter characters (no userinfo), port at most 65535.
bool valid_authority(std::string_view a) {
  std::string_view port;
  if (!a.empty() && a[0] == '[') {
    const size_t close = a.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (char c : a.substr(1, close - 1))
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
    const std::string_view after = a.substr(close + 1);
    if (!after.empty() && after[0] != ':') return false;
    port = after.empty() ? after : after.substr(1);
  } else {
    const size_t colon = a.find(':');
    const std::string_view host = a.substr(0, colon);
    if (host.empty()) return false;
    for (char c : host)
      if (!std::isalnum(static_cast<unsigned char>(c)) &&
          std::string_view("-._~%!$&'()*+,;=").find(c) == std::string_view::npos)
        return false;
    port = colon == std::string_view::npos ? std::string_view() : a.substr(colon + 1);
  }
  if (port.size() > 5) return false;
  uint32_t value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  return value <= 65535;
}

}  // namespace

std::optional<std::string> origin_form(std::string_view target) {
  // No fragment in any request target (RFC 9112 3.2: origin-form and absolute-URI have none).
  if (target.find('#') != std::string_view::npos) return std::nullopt;
  if (!target.empty() && target[0] == '/') return std::string(target);
  const size_t colon = target.find("://");
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string scheme = lower_trimmed(target.substr(0, colon));
  if (scheme.size() != colon || (scheme != "http" && scheme != "https")) return std::nullopt;
  const std::string_view rest = target.substr(colon + 3);
  const size_t end = std::min(rest.find('/'), rest.find('?'));  // the authority's end
  if (!valid_authority(rest.substr(0, end))) return std::nullopt;
  if (end == std::string_view::npos) return std::string("/");
  const std::string_view path_and_query = rest.substr(end);
  return path_and_query[0] == '/' ? std::string(path_and_query)
                                  : "/" + std::string(path_and_query);
}

}  // namespace octet::server

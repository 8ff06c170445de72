#pragma once
// Bytes on the wire for HTTP/1.1 responses (RFC 9112): complete responses with a
// Content-Length, server-sent-event streams in chunked transfer coding (HTTP/1.1) or
// close-delimited (HTTP/1.0) (https://html.spec.whatwg.org/multipage/server-sent-events.html),
// and the checks a request head must pass before its body is read (its framing and Host, the
// form of its target).
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/message.hpp>

namespace octet::server {

/// A complete response: status line, Server, Content-Type, Content-Length, Connection
/// (keep-alive or close) and the body.
std::string serialize_response(int status, const std::string& content_type,
                               const std::string& body, bool keep_alive);

/// The head of an SSE response: 200, Content-Type: text/event-stream, Cache-Control: no-cache,
/// Connection (keep-alive or close), and Transfer-Encoding: chunked when `chunked`. Without
/// `chunked` (HTTP/1.0 clients, RFC 9112 6.3) the body is delimited by closing the connection,
/// so keep_alive must be false.
std::string sse_head(bool keep_alive, bool chunked = true);

/// One chunk of chunked transfer coding: "<hex size>\r\n<data>\r\n" ("" for empty data, which
/// would otherwise end the body).
std::string http_chunk(const std::string& data);
/// The last chunk, which ends a chunked body: "0\r\n\r\n".
inline constexpr const char* kLastChunk = "0\r\n\r\n";

/// Why a request head is refused: the status to answer (the connection is closed after it).
struct HeadError {
  int status = 400;
  std::string message;
};

/// Checks a parsed request head against RFC 9112 before its body is read (pure; a fuzz
/// harness may call it on any head): Transfer-Encoding must be exactly "chunked" (any other
/// coding, chunked given twice or not last, or an empty list is refused, 6.1), never together
/// with Content-Length (6.3) nor in an HTTP/1.0 request (6.1: faulty framing); an HTTP/1.1
/// request needs exactly one Host, an HTTP/1.0 request
/// at most one (3.2). Returns the error to answer, or nullopt when the head is acceptable.
std::optional<HeadError> validate_request_head(
    const boost::beast::http::request_header<>& head);

/// The origin-form (path and query) of a request target, which routing reads (RFC 9112 3.2):
/// an origin-form target ("/v1/models?x=1") as it is; an absolute-form one, which servers
/// must accept ("http://host:8000/v1/models?x=1", scheme http or https in any case), as its
/// path ("/" when empty) and query. nullopt for any other target: authority-form
/// ("host:443", CONNECT's), asterisk-form ("*"), another scheme, an empty or malformed host,
/// userinfo (RFC 9110 4.2.1, 4.2.4), a port over 65535, a fragment ('#'), or garbage.
std::optional<std::string> origin_form(std::string_view target);

}  // namespace octet::server

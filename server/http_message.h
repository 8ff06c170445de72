#pragma once
// Bytes on the wire for HTTP/1.1 responses (RFC 9112): complete responses with a
// Content-Length, and server-sent-event streams in chunked transfer coding
// (https://html.spec.whatwg.org/multipage/server-sent-events.html).
#include <string>

namespace octet::server {

/// A complete response: status line, Server, Content-Type, Content-Length, Connection
/// (keep-alive or close) and the body.
std::string serialize_response(int status, const std::string& content_type,
                               const std::string& body, bool keep_alive);

/// The head of an SSE response: 200, Content-Type: text/event-stream, Cache-Control: no-cache,
/// Transfer-Encoding: chunked, Connection (keep-alive or close).
std::string sse_head(bool keep_alive);

/// One chunk of chunked transfer coding: "<hex size>\r\n<data>\r\n" ("" for empty data, which
/// would otherwise end the body).
std::string http_chunk(const std::string& data);
/// The last chunk, which ends a chunked body: "0\r\n\r\n".
inline constexpr const char* kLastChunk = "0\r\n\r\n";

}  // namespace octet::server

#pragma once
// HttpServer: the HTTP/1.1 front end of `octet serve` on Boost.Beast over Boost.Asio.
//
// Threading: a few I/O threads run one io_context; each connection is a session on its own
// strand. A generation request adds its engine requests and returns; the engine thread's
// RequestStream notify callback only posts "poll" to that connection's strand (coalesced by a
// flag), where the session drains the stream without blocking and writes SSE chunks. So 64+
// concurrent streams cost one small heap object and a socket each, never a thread each, and no
// HTTP thread ever waits on the model. While a response is being generated the session keeps
// one read pending on the socket: end-of-file or a reset means the client went away, and its
// engine requests are aborted at once (streaming or not), which frees their KV blocks.
//
// Preparation: parsing a body, rendering the chat template, tokenizing and detokenizing run
// on a pool of num_prepare_threads threads, never on an I/O thread (/health, /metrics and
// streams keep flowing while a 15 MB body is tokenized); the reply or the started
// GenerationJob is posted back to the session's strand. At most max_queued_prepares wait or
// run (503 beyond); a client that leaves meanwhile has its job aborted on arrival.
//
// Protocol: request heads are checked by validate_request_head (http_message.h) before the
// body is read; routing reads the target's origin-form (origin_form: an absolute-form target
// is routed on its path, any other form gets 400); authentication (routes.h authorized) comes
// before routing, and a CORS preflight before both (cors.h; every response to a head with an
// allowed Origin, errors and streams included, carries the CORS fields); HTTP/1.0 clients get
// one response per connection and close-delimited streams.
//
// Limits: request headers over max_header_bytes get 431, bodies over max_body_bytes 413 (both
// close the connection); a chunked body's trailer counts against max_header_bytes too (the read
// buffer holds at most max_header_bytes + 16 KiB not parsed yet: 431 beyond). A keep-alive
// connection idle for idle_timeout seconds is closed; once a request's first byte arrived, its
// head and then its body must each arrive within read_timeout seconds (408 and close beyond),
// and a response write that takes longer than read_timeout closes the connection (slow
// clients cannot pin connections). The API key, route and method are checked at header time
// when a body follows (401/404/405 and close, the body unread). At most max_connections sessions live; beyond,
// kReservedProbeConnections more may ask only GET /health or GET /metrics (http_limits.h), and
// the rest are answered 503 and closed. Request bodies take the bytes actually buffered from a
// server-wide max_total_body_bytes budget (503 beyond) until prepared; while a response is
// produced at most a few KiB of pipelined bytes are buffered (then reading pauses), and a
// stream whose client leaves more than kMaxQueuedWriteBytes unsent is aborted and closed. A
// generation's outputs are turned into bytes a bounded batch per handler, so a disconnect is
// noticed (and its engine requests aborted) between batches. A failing accept() (out of
// descriptors) is retried after a back-off of 10 ms doubling to 1 s, logged at most every 5 s.
#include <cstdint>
#include <memory>

#include "server/openai/server_context.h"

namespace octet::server {

class HttpServer {
 public:
  /// Binds ctx.config.host:port (port 0 = any free port). Throws std::runtime_error naming the
  /// address when it cannot listen.
  explicit HttpServer(ServerContext& ctx);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// The bound port.
  uint16_t port() const;
  /// Starts accepting on ctx.config.http_threads I/O threads.
  void start();
  /// Stops the I/O threads (open connections are dropped) and joins them. Idempotent.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet::server

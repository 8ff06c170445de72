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
// Limits: request headers over max_header_bytes get 431, bodies over max_body_bytes 413 (both
// close the connection); a keep-alive connection idle for idle_timeout seconds is closed; a
// request body or a response write that takes longer than read_timeout seconds closes the
// connection (slow clients cannot pin connections).
#include <cstdint>
#include <memory>

#include "server/server_context.h"

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

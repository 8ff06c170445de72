// The listening side of the HTTP front end (http_server.h): the acceptor and its I/O threads,
// the admission of each accepted connection (a regular Session within --max-connections, a
// probe-only Session in one of kReservedProbeConnections more slots, else a Rejection answered
// 503), the back-off after failed accepts, and stop(). A Session's own work is in
// http_connection.h and the files it names.
#include "server/http/http_server.h"

#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <spdlog/spdlog.h>

#include "server/http/http_connection.h"
#include "server/http/http_limits.h"
#include "server/http/http_message.h"

namespace octet::server {

using detail::Session;
using detail::Shared;
namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

/// A connection over --max-connections: answered 503 without reading its request, then closed
/// after a short linger (so that the unread request does not turn the close into a reset that
/// discards the answer).
class Rejection : public std::enable_shared_from_this<Rejection> {
 public:
  Rejection(tcp::socket&& socket, Shared& shared)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), shared_(shared) {
    shared_.rejecting.fetch_add(1);
  }
  ~Rejection() { shared_.rejecting.fetch_sub(1); }

  void start(int64_t max_connections) {
    response_ = serialize_response(
        503, "application/json",
        dump(error_json(503, "too many connections (--max-connections " +
                                 std::to_string(max_connections) + "); retry later")),
        false);
    timer_.expires_after(std::chrono::seconds(1));
    timer_.async_wait([self = shared_from_this()](beast::error_code) { self->close(); });
    net::async_write(socket_, net::buffer(response_),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->close();
                       beast::error_code ignored;
                       self->socket_.shutdown(tcp::socket::shutdown_send, ignored);
                       self->drain();
                     });
  }

 private:
  void drain() {
    socket_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->close();
                              self->drain();
                            });
  }
  void close() {
    beast::error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
  }

  tcp::socket socket_;
  net::steady_timer timer_;
  Shared& shared_;
  std::string response_;
  std::array<char, 4096> scratch_{};
};

}  // namespace

struct HttpServer::Impl {
  // Destruction runs bottom-up: the pool drops its pending preparations (sessions whose
  // sockets belong to ioc) before ioc goes; every session counts itself out of `shared`,
  // which goes last.
  ServerContext& ctx;
  Shared shared;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  net::steady_timer accept_timer{ioc};
  AcceptBackoff backoff;
  net::thread_pool prepare_pool;
  std::vector<std::thread> threads;
  bool stopped = false;

  explicit Impl(ServerContext& c)
      : ctx(c),
        shared{c, prepare_pool, ByteBudget(c.config.max_total_body_bytes),
               CorsPolicy::from_config(c.config)},
        prepare_pool(static_cast<size_t>(c.config.num_prepare_threads)) {}

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted) return;
      if (ec) return on_accept_error(ec);
      backoff.on_success();
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      const int64_t max_connections = shared.ctx.config.max_connections;
      if (shared.connections.load() < max_connections) {
        std::make_shared<Session>(std::move(socket), shared)->start();
      } else if (shared.probe_connections.load() < kReservedProbeConnections) {
        std::make_shared<Session>(std::move(socket), shared, /*probe_only=*/true)->start();
      } else if (shared.rejecting.load() < max_connections) {
        std::make_shared<Rejection>(std::move(socket), shared)->start(max_connections);
      }  // else: so many rejections in flight that this one is just closed
      accept();
    });
  }

  /// accept() errors are errno values (EMFILE, ENFILE, ...): strerror, not error_code::message(),
  /// whose virtual call on Boost 1.81's constexpr system category UBSan's vptr check rejects.
  static std::string accept_error_text(const beast::error_code& ec) {
    if (ec.category() == boost::system::system_category() ||
        ec.category() == boost::system::generic_category())
      return std::strerror(ec.value());
    return "error " + std::to_string(ec.value());
  }

  /// accept() failed (out of file descriptors, say): retry after a growing delay, logging at
  /// most one line per AcceptBackoff::kLogInterval, instead of spinning.
  void on_accept_error(beast::error_code ec) {
    const auto delay = backoff.on_failure();
    if (backoff.should_log(AcceptBackoff::Clock::now())) {
      const int64_t suppressed = backoff.take_suppressed();
      spdlog::warn("accept failed: {}; retrying in {} ms ({} similar errors not logged)",
                   accept_error_text(ec), delay.count(), suppressed);
    }
    accept_timer.expires_after(delay);
    accept_timer.async_wait([this](beast::error_code e) {
      if (!e) accept();
    });
  }
};

HttpServer::HttpServer(ServerContext& ctx) : impl_(std::make_unique<Impl>(ctx)) {
  const std::string where = ctx.config.host + ":" + std::to_string(ctx.config.port);
  try {
    const auto address = net::ip::make_address(ctx.config.host);
    const tcp::endpoint endpoint(address, static_cast<uint16_t>(ctx.config.port));
    auto& a = impl_->acceptor;
    a.open(endpoint.protocol());
    a.set_option(net::socket_base::reuse_address(true));
    a.bind(endpoint);
    a.listen(net::socket_base::max_listen_connections);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot listen on " + where + ": " + e.what());
  }
}

HttpServer::~HttpServer() { stop(); }

uint16_t HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::start() {
  impl_->accept();
  for (int64_t i = 0; i < impl_->ctx.config.http_threads; ++i)
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
}

void HttpServer::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  {
    std::lock_guard<std::mutex> lock(impl_->ctx.post_mu);
    impl_->ctx.io_open = false;
  }
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  // Preparations still running finish (their results are posted to the stopped io_context
  // and dropped); queued ones are dropped.
  impl_->prepare_pool.stop();
  impl_->prepare_pool.join();
}

}  // namespace octet::server

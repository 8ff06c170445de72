#include "server/http_server.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "server/http_message.h"
#include "server/routes.h"

namespace octet::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

/// A one-shot deadline on the session's strand: when it expires, `on_expire` runs; re-arming
/// or cancelling makes an earlier wait a no-op (generation counter).
class Deadline {
 public:
  explicit Deadline(const net::any_io_executor& ex) : timer_(ex) {}
  template <class F>
  void arm(double seconds, F on_expire) {
    const uint64_t gen = ++gen_;
    timer_.expires_after(ms(seconds));
    timer_.async_wait([this, gen, on_expire](beast::error_code ec) {
      if (!ec && gen == gen_) on_expire();
    });
  }
  void cancel() {
    ++gen_;
    timer_.cancel();
  }

 private:
  net::steady_timer timer_;
  uint64_t gen_ = 0;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, ServerContext& ctx)
      : socket_(std::move(socket)),
        strand_(socket_.get_executor()),
        read_deadline_(strand_),
        write_deadline_(strand_),
        ctx_(ctx),
        notify_pending_(std::make_shared<std::atomic<bool>>(false)) {}

  ~Session() {
    // A job still here means the client went away mid-response: abort its engine requests.
    if (job_) {
      job_->abort();
      job_.reset();
    }
  }

  void start() {
    net::dispatch(strand_, [self = shared_from_this()] { self->read_header(); });
  }

 private:
  // ---- reading a request ---------------------------------------------------------------
  void read_header() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(ctx_.config.max_header_bytes));
    parser_->body_limit(static_cast<uint64_t>(ctx_.config.max_body_bytes));
    read_deadline_.arm(ctx_.config.idle_timeout, [self = shared_from_this()] { self->close(); });
    http::async_read_header(
        socket_, buffer_, *parser_,
        net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
          self->on_header(ec);
        }));
  }

  void on_header(beast::error_code ec) {
    read_deadline_.cancel();
    if (ec) return on_read_error(ec);
    const auto& req = parser_->get();
    if (req[http::field::expect] == "100-continue") queue_write("HTTP/1.1 100 Continue\r\n\r\n");
    read_deadline_.arm(ctx_.config.read_timeout, [self = shared_from_this()] { self->close(); });
    http::async_read(
        socket_, buffer_, *parser_,
        net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
          self->on_read(ec);
        }));
  }

  void on_read(beast::error_code ec) {
    read_deadline_.cancel();
    if (ec) return on_read_error(ec);
    handle(parser_->release());
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::header_limit) {
      reply_and_close(431, "request headers larger than " +
                               std::to_string(ctx_.config.max_header_bytes) + " bytes");
    } else if (ec == http::error::body_limit) {
      reply_and_close(413, "request body larger than " +
                               std::to_string(ctx_.config.max_body_bytes) + " bytes");
    } else if (ec == http::error::end_of_stream || ec == net::error::eof ||
               ec == net::error::operation_aborted || ec == net::error::connection_reset ||
               ec == net::error::bad_descriptor) {
      close();
    } else if (ec.category() == beast::error_code(http::error::bad_target).category() && !closed_) {
      reply_and_close(400, std::string("malformed HTTP request: ") + ec.message());
    } else {
      close();
    }
  }

  void reply_and_close(int status, const std::string& message) {
    keep_alive_ = false;
    const int s = status;
    queue_write(serialize_response(s, "application/json", dump(error_json(s, message)), false));
    response_done_ = true;
  }

  // ---- handling ------------------------------------------------------------------------
  void handle(http::request<http::string_body> req) {
    keep_alive_ = req.keep_alive();
    const std::string target(req.target());
    std::string method;
    const Route route = route_for(target, &method);
    Reply reply;
    try {
      if (route == Route::kNotFound) {
        throw ApiError(404, "no such endpoint: " + std::string(req.method_string()) + " " +
                                target.substr(0, target.find('?')),
                       "", "not_found");
      }
      if (std::string(req.method_string()) != method)
        throw ApiError(405, "method " + std::string(req.method_string()) + " not allowed on " +
                                target.substr(0, target.find('?')) + "; use " + method);
      if (!authorized(ctx_, target, std::string(req[http::field::authorization])))
        throw ApiError(401, "Incorrect API key provided.", "", "invalid_api_key");
      switch (route) {
        case Route::kHealth: reply = handle_health(ctx_); break;
        case Route::kMetrics: reply = handle_metrics(ctx_); break;
        case Route::kVersion: reply = handle_version(); break;
        case Route::kModels: reply = handle_models(ctx_); break;
        case Route::kTokenize: reply = handle_tokenize(ctx_, req.body()); break;
        case Route::kDetokenize: reply = handle_detokenize(ctx_, req.body()); break;
        case Route::kCompletions:
        case Route::kChatCompletions:
          start_job(route == Route::kChatCompletions ? Endpoint::kChatCompletions
                                                     : Endpoint::kCompletions,
                    req.body());
          return;
        case Route::kNotFound: break;
      }
    } catch (const ApiError& e) {
      if (e.status() >= 500) spdlog::warn("{} {}: {} {}", req.method_string(), target, e.status(), e.what());
      reply = error_reply(e);
    } catch (const std::exception& e) {
      spdlog::error("{} {}: internal error: {}", req.method_string(), target, e.what());
      reply = Reply{500, "application/json", dump(error_json(500, std::string("internal error: ") + e.what()))};
    }
    queue_write(serialize_response(reply.status, reply.content_type, reply.body, keep_alive_));
    response_done_ = true;
  }

  void start_job(Endpoint endpoint, const std::string& body) {
    job_ = start_generation(ctx_, endpoint, body);  // throws ApiError before any byte is sent
    // The engine thread calls this after each update: post one poll to our strand, no more
    // than one pending at a time. It holds only a weak reference: a session that is gone is
    // not kept alive (or destroyed) on the engine thread.
    std::weak_ptr<Session> weak = weak_from_this();
    auto pending = notify_pending_;
    auto strand = strand_;
    ServerContext* ctx = &ctx_;
    job_->set_notify([weak, pending, strand, ctx] {
      if (pending->exchange(true)) return;
      std::lock_guard<std::mutex> lock(ctx->post_mu);
      if (!ctx->io_open) return;
      net::post(strand, [weak] {
        if (auto self = weak.lock()) self->pump();
      });
    });
    if (job_->stream()) queue_write(sse_head(keep_alive_));
    watch();
    pump();
  }

  /// Drains the job's available updates into writes (on the strand).
  void pump() {
    notify_pending_->store(false);
    if (!job_ || response_done_ || closed_) return;
    const std::string data = job_->poll();
    if (job_->stream()) {
      if (!data.empty()) queue_write(http_chunk(data));
      if (job_->done()) {
        queue_write(kLastChunk);
        response_done_ = true;
      }
    } else if (job_->done()) {
      queue_write(serialize_response(job_->status(), "application/json", data, keep_alive_));
      response_done_ = true;
    }
  }

  // ---- disconnect watch while a response is produced -------------------------------------
  void watch() {
    if (watching_ || closed_) return;
    watching_ = true;
    socket_.async_read_some(
        buffer_.prepare(4096),
        net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t n) {
          self->on_watch(ec, n);
        }));
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (!ec) buffer_.commit(n);  // a pipelined request: kept for the next read
    if (resume_after_watch_) {
      resume_after_watch_ = false;
      if (!ec || ec == net::error::operation_aborted) read_header();
      else close();
      return;
    }
    if (ec) {
      if (job_ && !job_->done()) {
        spdlog::info("client disconnected; aborting its request");
        job_->abort();
      }
      close();
      return;
    }
    const auto limit = static_cast<size_t>(ctx_.config.max_header_bytes + ctx_.config.max_body_bytes);
    if (job_ && buffer_.size() < limit) watch();
  }

  // ---- writing ---------------------------------------------------------------------------
  void queue_write(std::string data) {
    if (closed_ || data.empty()) return;
    writes_.push_back(std::move(data));
    if (!writing_) do_write();
  }

  void do_write() {
    writing_ = true;
    write_deadline_.arm(ctx_.config.read_timeout, [self = shared_from_this()] {
      spdlog::info("client stopped reading for {} s; closing the connection",
                   self->ctx_.config.read_timeout);
      self->close();
    });
    net::async_write(
        socket_, net::buffer(writes_.front()),
        net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
          self->on_write(ec);
        }));
  }

  void on_write(beast::error_code ec) {
    write_deadline_.cancel();
    writing_ = false;
    if (ec) {
      if (job_) job_->abort();
      close();
      return;
    }
    writes_.pop_front();
    if (!writes_.empty()) return do_write();
    if (response_done_) end_response();
  }

  /// The whole response is on the wire: next request (keep-alive) or close.
  void end_response() {
    response_done_ = false;
    job_.reset();
    if (!keep_alive_) {
      beast::error_code ec;
      socket_.shutdown(tcp::socket::shutdown_send, ec);
      close();
      return;
    }
    if (watching_) {
      resume_after_watch_ = true;
      beast::error_code ec;
      socket_.cancel(ec);  // the watch completes with operation_aborted, then reads on
      return;
    }
    read_header();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    read_deadline_.cancel();
    write_deadline_.cancel();
    if (job_) job_->abort();
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  tcp::socket socket_;
  net::any_io_executor strand_;  // the socket's executor: a strand of the io_context
  Deadline read_deadline_, write_deadline_;
  ServerContext& ctx_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::unique_ptr<GenerationJob> job_;
  std::shared_ptr<std::atomic<bool>> notify_pending_;
  std::deque<std::string> writes_;
  bool writing_ = false;
  bool response_done_ = false;  // the last bytes of the current response are queued
  bool keep_alive_ = true;
  bool watching_ = false;
  bool resume_after_watch_ = false;
  bool closed_ = false;
};

}  // namespace

struct HttpServer::Impl {
  ServerContext& ctx;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
  bool stopped = false;

  explicit Impl(ServerContext& c) : ctx(c) {}

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted) return;
      if (!ec) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        std::make_shared<Session>(std::move(socket), ctx)->start();
      } else {
        spdlog::warn("accept failed: {}", ec.message());
      }
      accept();
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
}

}  // namespace octet::server

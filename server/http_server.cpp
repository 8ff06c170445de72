#include "server/http_server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "server/http_limits.h"
#include "server/http_message.h"
#include "server/request_log.h"
#include "server/routes.h"

namespace octet::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

/// Seconds -> milliseconds, saturating (options are validated to at most a week, but a
/// conversion must never wrap into an immediate expiry).
std::chrono::milliseconds ms(double seconds) {
  if (!(seconds > 0)) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(static_cast<int64_t>(std::min(seconds, 1e12) * 1000.0));
}

/// Pipelined bytes a connection may buffer while its response is produced; beyond it the
/// session stops reading (TCP back-pressure) until the response is done.
constexpr size_t kMaxPipelinedBytes = 8 << 10;
/// The read buffer holds at most --max-header-bytes plus this many bytes not parsed yet (a
/// head, a chunk-size line, a chunked body's trailer, pipelined bytes): beyond it a request
/// gets 431. Body bytes pass through it (they are parsed as they arrive), so it bounds a
/// trailer, which Beast parses only once all of it is buffered, by about --max-header-bytes.
constexpr size_t kReadSlackBytes = 16 << 10;
/// A read buffer grown past this (a large head) is shrunk once the request is parsed.
constexpr size_t kKeptBufferBytes = 64 << 10;
/// Bytes per async_write of a response; the write deadline (--read-timeout) is re-armed per
/// slice.
constexpr size_t kWriteSliceBytes = 1 << 20;
/// Seconds a connection closed after its response (Connection: close, or a refusal before the
/// body was read) keeps reading and discarding the client's bytes (see Session::linger).
constexpr double kLingerSeconds = 1.0;
/// Engine outputs one pump() handler turns into response bytes before it yields the strand.
constexpr size_t kUpdatesPerPump = 64;

/// `response` (a serialized response or response head) with "X-Request-Id: <id>" after its
/// status line. The id is valid_request_id (request_id_for), so it cannot split the header.
std::string with_request_id(std::string response, const std::string& id) {
  const size_t eol = response.find("\r\n");
  if (eol == std::string::npos || id.empty()) return response;
  response.insert(eol + 2, "X-Request-Id: " + id + "\r\n");
  return response;
}

double ms_since(std::chrono::steady_clock::time_point start,
                std::chrono::steady_clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

/// What every connection shares: the context, the preparation pool and the server-wide limits.
struct Shared {
  ServerContext& ctx;
  net::thread_pool& prepare_pool;
  ByteBudget body_budget;
  std::atomic<int64_t> connections{0};  // Sessions alive (regular slots)
  std::atomic<int64_t> probe_connections{0};  // probe-only Sessions (kReservedProbeConnections)
  std::atomic<int64_t> rejecting{0};    // connections being answered 503 and closed
  std::atomic<int64_t> prepares{0};     // preparations queued or running
};

/// Request-body bytes taken from the server-wide budget; given back when destroyed.
class BodyLease {
 public:
  BodyLease() = default;
  BodyLease(ByteBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
  BodyLease(BodyLease&& o) noexcept
      : budget_(std::exchange(o.budget_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  BodyLease& operator=(BodyLease&& o) noexcept {
    if (this != &o) {
      reset();
      budget_ = std::exchange(o.budget_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~BodyLease() { reset(); }
  /// Takes n more bytes from the budget; false (nothing taken) when they do not fit.
  [[nodiscard]] bool grow(int64_t n) {
    if (!budget_ || !budget_->try_acquire(n)) return false;
    bytes_ += n;
    return true;
  }
  int64_t bytes() const { return bytes_; }
  void reset() {
    if (budget_) budget_->release(bytes_);
    budget_ = nullptr;
    bytes_ = 0;
  }

 private:
  ByteBudget* budget_ = nullptr;
  int64_t bytes_ = 0;
};

/// The outcome of preparing a request off the I/O threads: a reply, or a started job.
struct Prepared {
  Reply reply;
  std::unique_ptr<GenerationJob> job;
};

/// Runs one prepared route (on a preparation thread). Never throws: errors become replies.
Prepared prepare_route(ServerContext& ctx, Route route, const std::string& body,
                       const std::string& what) {
  Prepared out;
  try {
    switch (route) {
      case Route::kTokenize: out.reply = handle_tokenize(ctx, body); break;
      case Route::kDetokenize: out.reply = handle_detokenize(ctx, body); break;
      case Route::kChatCompletions:
        out.job = start_generation(ctx, Endpoint::kChatCompletions, body);
        break;
      default: out.job = start_generation(ctx, Endpoint::kCompletions, body); break;
    }
  } catch (const ApiError& e) {
    if (e.status() >= 500) spdlog::warn("{}: {} {}", what, e.status(), e.what());
    out.reply = error_reply(e);
  } catch (const RequestError& e) {
    out.reply = error_reply(to_api_error(e));
  } catch (const std::exception& e) {
    spdlog::error("{}: internal error: {}", what, e.what());
    out.reply = Reply{500, "application/json",
                      dump(error_json(500, std::string("internal error: ") + e.what()))};
  }
  return out;
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

class Session : public std::enable_shared_from_this<Session> {
  const bool probe_only_;

 public:
  /// probe_only: a connection over --max-connections in a reserved slot (GET /health and GET
  /// /metrics only, one request).
  Session(tcp::socket&& socket, Shared& shared, bool probe_only = false)
      : probe_only_(probe_only),
        socket_(std::move(socket)),
        strand_(socket_.get_executor()),
        read_deadline_(strand_),
        write_deadline_(strand_),
        shared_(shared),
        ctx_(shared.ctx),
        buffer_(static_cast<size_t>(shared.ctx.config.max_header_bytes) + kReadSlackBytes),
        notify_pending_(std::make_shared<std::atomic<bool>>(false)) {
    (probe_only_ ? shared_.probe_connections : shared_.connections).fetch_add(1);
  }

  ~Session() {
    // A job still here means the client went away mid-response: abort its engine requests.
    if (job_) {
      job_->abort();
      job_.reset();
    }
    (probe_only_ ? shared_.probe_connections : shared_.connections).fetch_sub(1);
  }

  void start() {
    net::dispatch(strand_, [self = shared_from_this()] { self->read_header(); });
  }

 private:
  // ---- reading a request ---------------------------------------------------------------
  void read_header() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(ctx_.config.max_header_bytes));  // validated
    parser_->body_limit(static_cast<uint64_t>(ctx_.config.max_body_bytes));
    if (buffer_.size() > 0) return read_header_bytes();  // a pipelined request has begun
    // Idle (keep-alive) until the first byte of a request; from then on the whole head must
    // arrive within --read-timeout (a head trickled a byte at a time held its connection for
    // the whole idle timeout, and again after each byte).
    const double idle = probe_only_ ? std::min(ctx_.config.idle_timeout, kProbeIdleSeconds)
                                    : ctx_.config.idle_timeout;
    read_deadline_.arm(idle, [self = shared_from_this()] { self->close(); });
    socket_.async_wait(tcp::socket::wait_read,
                       net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec) {
                         if (ec) {
                           self->read_deadline_.cancel();
                           return self->on_read_error(ec);
                         }
                         self->read_header_bytes();
                       }));
  }

  /// Reads and parses the request head, which must be complete within --read-timeout.
  void read_header_bytes() {
    if (closed_) return;
    const double limit = probe_only_ ? std::min(ctx_.config.read_timeout, kProbeIdleSeconds)
                                     : ctx_.config.read_timeout;
    read_deadline_.arm(limit, [self = shared_from_this()] { self->close(); });
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
    const std::string target(req.target());
    begin_request(std::string(req.method_string()), target.substr(0, target.find('?')),
                  std::string_view(req["X-Request-Id"]));
    RequestLogScope scope(request_id_);
    if (auto error = validate_request_head(req.base()))
      return reply_and_close(error->status, error->message);
    // What the head decides is taken from the head alone: a chunked body's trailer fields are
    // merged into the same field list by Beast, and must not authenticate or reframe.
    http10_ = req.version() < 11;
    keep_alive_ = req.keep_alive() && !http10_;
    authorization_ = std::string(req[http::field::authorization]);
    const bool has_body = parser_->chunked() || parser_->content_length().value_or(0) > 0;
    if (probe_only_) {
      keep_alive_ = false;  // one request per reserved slot
      std::string allowed;
      const Route route = route_for(target, &allowed);
      if (has_body || (route != Route::kHealth && route != Route::kMetrics))
        return reply_and_close(503, "too many connections (--max-connections " +
                                        std::to_string(ctx_.config.max_connections) +
                                        "); only GET /health and GET /metrics are answered now; "
                                        "retry later");
    }
    if (has_body) {
      // Authentication, route and method before any body byte is read: a client without the
      // key (or on a path that takes no body) holds no body budget. The body is not read, so
      // the connection closes after the answer.
      if (auto error = access_error(req.method_string(), target))
        return reply_and_close(error->status(), error->what(), error->code());
    }
    // The body's bytes are taken from the server-wide budget as they are buffered (not the
    // declared Content-Length up front: idle clients declaring 16 MiB each could hold it all).
    body_lease_ = BodyLease(&shared_.body_budget, 0);
    if (req[http::field::expect] == "100-continue") queue_write("HTTP/1.1 100 Continue\r\n\r\n");
    read_deadline_.arm(ctx_.config.read_timeout, [self = shared_from_this()] { self->close(); });
    on_body_part(beast::error_code{});  // no body (is_done already), or body bytes buffered
  }

  /// Reads and parses the next part of the body; on_body_part accounts for it.
  void read_body() {
    http::async_read_some(
        socket_, buffer_, *parser_,
        net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
          self->on_body_part(ec);
        }));
  }

  void on_body_part(beast::error_code ec) {
    RequestLogScope scope(request_id_);
    if (ec) {
      read_deadline_.cancel();
      return on_read_error(ec);
    }
    const int64_t held = static_cast<int64_t>(parser_->get().body().size());
    if (held > body_lease_.bytes() && !body_lease_.grow(held - body_lease_.bytes())) {
      read_deadline_.cancel();
      return reply_and_close(503, "the server holds too many request bodies (" +
                                      std::to_string(shared_.body_budget.capacity()) +
                                      " bytes, --max-total-body-bytes); retry later");
    }
    if (!parser_->is_done()) return read_body();
    read_deadline_.cancel();
    if (buffer_.capacity() > kKeptBufferBytes) buffer_.shrink_to_fit();
    handle(parser_->release());
  }

  /// The answer to a request without the API key (401), on an unknown path (404) or with a
  /// method the path does not take (405); nullopt when it may proceed. Authentication comes
  /// first: without the key, unknown paths and methods answer 401 too.
  std::optional<ApiError> access_error(std::string_view method_name, const std::string& target) {
    const std::string path = target.substr(0, target.find('?'));
    std::string method;
    const Route route = route_for(target, &method);
    if (!authorized(ctx_, route, authorization_))
      return ApiError(401, "Incorrect API key provided.", "", "invalid_api_key");
    if (route == Route::kNotFound)
      return ApiError(404, "no such endpoint: " + std::string(method_name) + " " + path, "",
                      "not_found");
    // HEAD is GET without the body (RFC 9110 9.3.2): a probe may use it on /health.
    if (method_name != method && !(method_name == "HEAD" && method == "GET"))
      return ApiError(405, "method " + std::string(method_name) + " not allowed on " + path +
                               "; use " + method);
    return std::nullopt;
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::header_limit) {
      reply_and_close(431, "request headers larger than " +
                               std::to_string(ctx_.config.max_header_bytes) + " bytes");
    } else if (ec == http::error::buffer_overflow) {
      // The read buffer holds what is not parsed yet: a head, a chunk-size line or a trailer.
      reply_and_close(431, "request header or chunked trailer larger than " +
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

  void reply_and_close(int status, const std::string& message, const std::string& code = "") {
    // A head too large to parse (431) or malformed (400) is answered before begin_request.
    if (!request_active_) begin_request("-", "-", "");
    keep_alive_ = false;
    body_lease_.reset();
    const int s = status;
    status_ = s;
    queue_write(with_request_id(
        serialize_response(s, "application/json", dump(error_json(s, message, "", code)), false),
        request_id_));
    response_done_ = true;
  }

  // ---- request id and access log -----------------------------------------------------------
  /// A request head arrived: its id (the client's X-Request-Id when valid, else a new one),
  /// method, path and start time, for the log lines and the access-log line of end_request.
  void begin_request(std::string method, std::string path, std::string_view client_id) {
    request_active_ = true;
    request_start_ = std::chrono::steady_clock::now();
    request_id_ = request_id_for(client_id);
    method_ = std::move(method);
    path_ = std::move(path);
    status_ = 0;
  }

  /// The request is over (its response written, or the connection closed first: status 499):
  /// one access-log line unless --disable-log-requests. Idempotent until the next request.
  void end_request(int status) {
    if (!request_active_) return;
    request_active_ = false;
    if (ctx_.config.disable_log_requests) return;
    const auto now = std::chrono::steady_clock::now();
    AccessLogEntry e;
    e.method = method_;
    e.path = path_;
    e.status = status;
    e.latency_ms = ms_since(request_start_, now);
    if (job_) {
      const Usage u = job_->usage();
      e.prompt_tokens = u.prompt_tokens;
      e.completion_tokens = u.completion_tokens;
      const auto first = job_->first_token_time();
      if (first != std::chrono::steady_clock::time_point{})
        e.ttft_ms = ms_since(request_start_, first);
    }
    RequestLogScope scope(request_id_);
    log_access(e);
  }

  // ---- handling ------------------------------------------------------------------------
  void handle(http::request<http::string_body> req) {
    // http10_, keep_alive_ and authorization_ come from the head (on_header), never a trailer;
    // HTTP/1.0: one request per connection (no chunked framing, no persistent connections).
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    std::string method;
    const Route route = route_for(target, &method);
    Reply reply;
    try {
      if (auto error = access_error(req.method_string(), target)) throw *error;
      switch (route) {
        case Route::kHealth: reply = handle_health(ctx_); break;
        case Route::kMetrics: reply = handle_metrics(ctx_); break;
        case Route::kVersion: reply = handle_version(); break;
        case Route::kModels: reply = handle_models(ctx_); break;
        case Route::kTokenize:
        case Route::kDetokenize:
        case Route::kCompletions:
        case Route::kChatCompletions:
          prepare(route, std::string(req.method_string()) + " " + path, std::move(req.body()));
          return;
        case Route::kNotFound: break;
      }
    } catch (const ApiError& e) {
      if (e.status() >= 500) spdlog::warn("{} {}: {} {}", req.method_string(), path, e.status(), e.what());
      reply = error_reply(e);
    }
    body_lease_.reset();
    status_ = reply.status;
    std::string response = serialize_response(reply.status, reply.content_type, reply.body,
                                              keep_alive_);
    if (req.method() == http::verb::head)  // the head alone, with the GET's Content-Length
      response.resize(response.find("\r\n\r\n") + 4);
    queue_write(with_request_id(std::move(response), request_id_));
    response_done_ = true;
  }

  /// Parses, renders and tokenizes the body on a preparation thread; the result comes back
  /// to this strand (on_prepared). Throws ApiError 503 when too many preparations are queued.
  void prepare(Route route, std::string what, std::string body) {
    if (shared_.prepares.fetch_add(1) >= ctx_.config.max_queued_prepares) {
      shared_.prepares.fetch_sub(1);
      throw ApiError(503, "too many requests being prepared (--max-queued-prepares " +
                              std::to_string(ctx_.config.max_queued_prepares) + "); retry later");
    }
    preparing_ = true;
    net::post(shared_.prepare_pool,
              [self = shared_from_this(), route, what = std::move(what), body = std::move(body),
               lease = std::move(body_lease_), id = request_id_]() mutable {
                RequestLogScope scope(id);
                Prepared result = prepare_route(self->ctx_, route, body, what);
                body = std::string();  // the body's memory is given back with its lease
                lease.reset();
                self->shared_.prepares.fetch_sub(1);
                auto strand = self->strand_;
                net::post(strand, [self = std::move(self), result = std::move(result)]() mutable {
                  self->on_prepared(std::move(result));
                });
              });
    watch();  // a client that goes away while its request is prepared is noticed
  }

  void on_prepared(Prepared result) {
    RequestLogScope scope(request_id_);
    preparing_ = false;
    if (closed_) {
      // The client went away while its request was prepared: its engine requests stop now.
      if (result.job) result.job->abort();
      return;
    }
    if (result.job) return start_job(std::move(result.job));
    status_ = result.reply.status;
    queue_write(with_request_id(serialize_response(result.reply.status, result.reply.content_type,
                                                   result.reply.body, keep_alive_),
                                request_id_));
    response_done_ = true;
  }

  void start_job(std::unique_ptr<GenerationJob> job) {
    job_ = std::move(job);
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
    if (job_->stream()) {
      // HTTP/1.0 has no chunked coding: the stream's end is the connection's close.
      if (http10_) keep_alive_ = false;
      status_ = 200;
      queue_write(with_request_id(sse_head(keep_alive_, /*chunked=*/!http10_), request_id_));
    }
    watch();
    pump();
  }

  /// Drains at most kUpdatesPerPump of the job's available updates into writes (on the
  /// strand); with more waiting it posts itself again, so that the disconnect watch, the
  /// deadlines and the other connections of this thread run in between (a backlog of 40,000
  /// updates drained in one handler kept a gone client's request running for minutes).
  void pump() {
    RequestLogScope scope(request_id_);
    notify_pending_->store(false);
    if (!job_ || response_done_ || closed_) return;
    if (queued_bytes_ > kMaxQueuedWriteBytes) {
      spdlog::warn("client reads too slowly: {} response bytes queued (limit {}); aborting its "
                   "request and closing the connection",
                   queued_bytes_, kMaxQueuedWriteBytes);
      job_->abort();
      close();
      return;
    }
    const std::string data = job_->poll(kUpdatesPerPump);
    if (job_->backlog() && !repump_pending_) {
      repump_pending_ = true;
      net::post(strand_, [self = shared_from_this()] {
        self->repump_pending_ = false;
        self->pump();
      });
    }
    if (job_->stream()) {
      if (!data.empty()) queue_write(http10_ ? data : http_chunk(data));
      if (job_->done()) {
        if (!http10_) queue_write(kLastChunk);
        response_done_ = true;
        if (writes_.empty() && !writing_) end_response();
      }
    } else if (job_->done()) {
      status_ = job_->status();
      queue_write(with_request_id(
          serialize_response(job_->status(), "application/json", data, keep_alive_), request_id_));
      response_done_ = true;
    }
  }

  // ---- disconnect watch while a response is produced -------------------------------------
  void watch() {
    if (watching_ || closed_) return;
    if (buffer_.max_size() - buffer_.size() < 4096) return;  // full of pipelined bytes: paused
    watching_ = true;
    socket_.async_read_some(
        buffer_.prepare(4096),
        net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t n) {
          self->on_watch(ec, n);
        }));
  }

  void on_watch(beast::error_code ec, size_t n) {
    RequestLogScope scope(request_id_);
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
    // Beyond a few KiB of pipelined bytes, stop reading until this response is done.
    if ((job_ || preparing_) && buffer_.size() < kMaxPipelinedBytes) watch();
  }
  // ---- writing ---------------------------------------------------------------------------
  void queue_write(std::string data) {
    if (closed_ || data.empty()) return;
    queued_bytes_ += data.size();
    writes_.push_back(std::move(data));
    if (!writing_) do_write();
  }

  /// Sends the next slice (at most kWriteSliceBytes) of writes_.front(). The deadline is armed
  /// per slice, so --read-timeout measures a client that stopped reading, not the time a large
  /// body takes (one deadline over a whole 86 MB body cut it short).
  void do_write() {
    writing_ = true;
    write_deadline_.arm(ctx_.config.read_timeout, [self = shared_from_this()] {
      RequestLogScope scope(self->request_id_);
      spdlog::info("client stopped reading for {} s; closing the connection",
                   self->ctx_.config.read_timeout);
      self->close();
    });
    const std::string& front = writes_.front();
    const size_t len = std::min(kWriteSliceBytes, front.size() - write_offset_);
    net::async_write(
        socket_, net::buffer(front.data() + write_offset_, len),
        net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t n) {
          self->on_write(ec, n);
        }));
  }

  void on_write(beast::error_code ec, size_t written) {
    write_deadline_.cancel();
    writing_ = false;
    if (ec) {
      if (job_) job_->abort();
      close();
      return;
    }
    write_offset_ += written;
    queued_bytes_ -= written;
    if (write_offset_ < writes_.front().size()) return do_write();
    write_offset_ = 0;
    writes_.pop_front();
    if (!writes_.empty()) return do_write();
    if (response_done_) end_response();
  }

  /// The whole response is on the wire: next request (keep-alive) or close.
  void end_response() {
    response_done_ = false;
    end_request(status_);
    job_.reset();
    if (!keep_alive_) {
      beast::error_code ec;
      socket_.shutdown(tcp::socket::shutdown_send, ec);
      if (watching_) return close();
      return linger();
    }
    if (watching_) {
      resume_after_watch_ = true;
      beast::error_code ec;
      socket_.cancel(ec);  // the watch completes with operation_aborted, then reads on
      return;
    }
    read_header();
  }

  /// The response is sent and our side shut down: read and discard what the client still sends
  /// (a body refused at header time, say) until it closes or kLingerSeconds pass, then close.
  /// Closing with unread bytes would reset the connection, and a reset can discard the answer
  /// before the client reads it.
  void linger() {
    if (closed_) return;
    read_deadline_.arm(kLingerSeconds, [self = shared_from_this()] { self->close(); });
    drain();
  }
  void drain() {
    if (!drain_buffer_) drain_buffer_ = std::make_unique<std::array<char, 4096>>();
    socket_.async_read_some(
        net::buffer(*drain_buffer_),
        net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
          if (ec || self->closed_) return self->close();
          self->drain();
        }));
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    end_request(499);  // a request whose response was not completely written
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
  Shared& shared_;
  ServerContext& ctx_;
  beast::flat_buffer buffer_;
  BodyLease body_lease_;  // the current request body's bytes in shared_.body_budget
  std::string authorization_;  // the current request head's Authorization field
  std::optional<http::request_parser<http::string_body>> parser_;
  std::unique_ptr<GenerationJob> job_;
  std::shared_ptr<std::atomic<bool>> notify_pending_;
  std::deque<std::string> writes_;
  size_t write_offset_ = 0;  // bytes of writes_.front() already sent
  size_t queued_bytes_ = 0;  // bytes of writes_ not yet sent
  std::unique_ptr<std::array<char, 4096>> drain_buffer_;  // linger(): discarded bytes
  bool writing_ = false;
  bool response_done_ = false;  // the last bytes of the current response are queued
  bool keep_alive_ = true;
  bool http10_ = false;    // the current request is HTTP/1.0
  bool preparing_ = false;  // the current request is on a preparation thread
  bool watching_ = false;
  bool repump_pending_ = false;  // pump() posted itself (GenerationJob::backlog)
  bool resume_after_watch_ = false;
  bool closed_ = false;
  // The current request (begin_request .. end_request).
  bool request_active_ = false;
  std::string request_id_;
  std::string method_, path_;
  int status_ = 0;  // the response's status once known
  std::chrono::steady_clock::time_point request_start_{};
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
        shared{c, prepare_pool, ByteBudget(c.config.max_total_body_bytes)},
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

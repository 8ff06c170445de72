#pragma once
// Private to the HTTP front end (server/http_*.cpp; the public interface is http_server.h):
// one connection's Session and what the sessions share. A Session's member functions are
// defined by idea, one file each:
//   http_connection.cpp     reading a request, body accounting, errors, linger and close
//   http_routing.cpp        routing at header time (CORS, access, probe slots) and the replies
//   http_prepare.cpp        preparation of a body off the I/O threads
//   http_response_pump.cpp  the response pump, the disconnect watch and the write queue
//   http_access_log.cpp     the request id and the access-log line of each request
// http_server.cpp accepts connections and admits each as a Session (or refuses it). Every
// handler of a Session runs on its strand.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/http/cors.h"
#include "server/http/http_limits.h"
#include "server/openai/generation_job.h"
#include "server/openai/prepare_cancel.h"
#include "server/openai/routes.h"
#include "server/openai/server_context.h"

namespace octet::server::detail {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

/// Seconds -> milliseconds, saturating (options are validated to at most a week, but a
/// conversion must never wrap into an immediate expiry).
inline std::chrono::milliseconds ms(double seconds) {
  if (!(seconds > 0)) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(static_cast<int64_t>(std::min(seconds, 1e12) * 1000.0));
}

/// Pipelined bytes a connection may buffer while its response is produced; from there on the
/// session stops reading (TCP back-pressure on the client) until the response is written,
/// however many requests the client has sent.
inline constexpr size_t kMaxPipelinedBytes = 8 << 10;
/// Bytes one read of the disconnect watch takes (into the read buffer, kept for the next
/// request): a paused buffer holds less than kMaxPipelinedBytes + kWatchReadBytes.
inline constexpr size_t kWatchReadBytes = 4 << 10;
/// The read buffer holds at most --max-header-bytes plus this many bytes not parsed yet (a
/// head, a chunk-size line, a chunked body's trailer, pipelined bytes): beyond it a request
/// gets 431. Body bytes pass through it (they are parsed as they arrive), so it bounds a
/// trailer, which Beast parses only once all of it is buffered, by about --max-header-bytes.
inline constexpr size_t kReadSlackBytes = 16 << 10;
// Pipelined bytes alone never fill the read buffer: only a head or trailer too large gets 431.
static_assert(kMaxPipelinedBytes + kWatchReadBytes <= kReadSlackBytes);
/// A read buffer grown past this (a large head) is shrunk once the request is parsed.
inline constexpr size_t kKeptBufferBytes = 64 << 10;
/// Bytes per async_write of a response; the write deadline (--read-timeout) is re-armed per
/// slice.
inline constexpr size_t kWriteSliceBytes = 1 << 20;
/// Seconds a connection closed after its response (Connection: close, or a refusal before the
/// body was read) keeps reading and discarding the client's bytes (see Session::linger).
inline constexpr double kLingerSeconds = 1.0;
/// Engine outputs one pump() handler turns into response bytes before it yields the strand.
inline constexpr size_t kUpdatesPerPump = 64;

/// `response` (a serialized response or response head) with "X-Request-Id: <id>" after its
/// status line. The id is valid_request_id (request_id_for), so it cannot split the header.
std::string with_request_id(std::string response, const std::string& id);

/// What every connection shares: the context, the preparation pool and the server-wide limits.
struct Shared {
  ServerContext& ctx;
  net::thread_pool& prepare_pool;
  ByteBudget body_budget;
  const CorsPolicy cors;  // --allowed-origins, ... (cors.h)
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

/// Keeps a session alive while none of its I/O is pending (the disconnect watch paused by
/// pipelined bytes while the engine, whose notify holds only a weak reference, produces the
/// response): a timer wait that never expires holds the reference until release(). Without it
/// the session was destroyed mid-response, closing the connection with no answer.
class Hold {
 public:
  explicit Hold(const net::any_io_executor& ex) : timer_(ex) {}
  /// Holds `owner` until release(); does nothing while already held.
  void take(std::shared_ptr<void> owner) {
    if (held_) return;
    held_ = true;
    timer_.expires_at(net::steady_timer::time_point::max());
    timer_.async_wait([owner = std::move(owner)](beast::error_code) {});
  }
  /// Lets the reference go (the cancelled wait's handler drops it, on the executor).
  void release() {
    if (!held_) return;
    held_ = false;
    timer_.cancel();
  }

 private:
  net::steady_timer timer_;
  bool held_ = false;
};

/// The outcome of preparing a request off the I/O threads: a reply, or a started job.
struct Prepared {
  Reply reply;
  std::unique_ptr<GenerationJob> job;
};

/// Runs one prepared route (on a preparation thread). Never throws: errors become replies.
Prepared prepare_route(ServerContext& ctx, Route route, const std::string& body,
                       const std::string& what);

/// One accepted connection (http_server.h describes its protocol and limits).
class Session : public std::enable_shared_from_this<Session> {
  const bool probe_only_;

 public:
  /// probe_only: a connection over --max-connections in a reserved slot (GET /health and GET
  /// /metrics only, one request).
  Session(tcp::socket&& socket, Shared& shared, bool probe_only = false);
  ~Session();
  /// Starts reading the first request (on the strand).
  void start();

 private:
  // ---- reading a request, body accounting, errors, linger and close (http_connection.cpp)
  void read_header();
  void read_header_bytes();
  void skip_empty_lines();
  void read_first_bytes();
  void read_body();
  void on_body_part(beast::error_code ec);
  void arm_read_timeout(double seconds);
  void on_read_timeout();
  void on_read_error(beast::error_code ec);
  void reply_and_close(int status, const std::string& message, const std::string& code = "");
  void linger();
  void drain();
  void close();

  // ---- routing at header time and the replies (http_routing.cpp) ------------------------
  void on_header(beast::error_code ec);
  std::optional<ApiError> access_error(std::string_view method_name, const std::string& target);
  void handle(http::request<http::string_body> req);
  std::string with_request_fields(std::string response) const;

  // ---- preparation off the I/O threads (http_prepare.cpp) --------------------------------
  void prepare(Route route, std::string what, std::string body);
  void on_prepared(Prepared result);

  // ---- the response pump, the disconnect watch, the write queue (http_response_pump.cpp)
  void start_job(std::unique_ptr<GenerationJob> job);
  void pump();
  void watch();
  void on_watch(beast::error_code ec, size_t n);
  void queue_write(std::string data);
  void do_write();
  void on_write(beast::error_code ec, size_t written);
  void end_response();

  // ---- request id and access log (http_access_log.cpp) -----------------------------------
  void begin_request(std::string method, std::string path, std::string_view client_id);
  void end_request(int status);

  tcp::socket socket_;
  net::any_io_executor strand_;  // the socket's executor: a strand of the io_context
  Deadline read_deadline_, write_deadline_;
  double read_timeout_s_ = 0;    // the begun request's limit (arm_read_timeout)
  bool read_timed_out_ = false;  // it passed: the cancelled read's completion answers 408
  Hold paused_hold_;  // held while the disconnect watch is paused (watch())
  Shared& shared_;
  ServerContext& ctx_;
  beast::flat_buffer buffer_;
  BodyLease body_lease_;  // the current request body's bytes in shared_.body_budget
  std::string authorization_;  // the current request head's Authorization field
  std::optional<CorsPreflight> preflight_;  // the answer when the request is a CORS preflight
  std::string cors_fields_;  // CORS header lines for its responses (CorsPolicy::response_fields)
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
  CancelFlag prepare_cancel_;  // set when the client leaves while preparing_ (prepare_cancel.h)
  bool watching_ = false;
  bool repump_pending_ = false;  // pump() posted itself (GenerationJob::backlog)
  // What end_response left for the cancelled disconnect watch's completion to do.
  enum class AfterWatch { kNothing, kReadNext, kLinger };
  AfterWatch after_watch_ = AfterWatch::kNothing;
  bool closed_ = false;
  bool lingering_ = false;  // counted in ctx_.lingering until close()
  // The current request (begin_request .. end_request).
  bool request_active_ = false;
  std::string request_id_;
  std::string method_, path_;
  int status_ = 0;  // the response's status once known
  std::chrono::steady_clock::time_point request_start_{};
};

}  // namespace octet::server::detail

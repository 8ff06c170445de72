// One HTTP connection's life (Session, http_connection.h): reading a request's head and body
// within the idle and read timeouts, holding the body's bytes against the server-wide
// --max-total-body-bytes budget as they are buffered, answering read errors (431, 413, 400)
// and a request not complete in time (408), refusing and closing, lingering after a close so
// that the answer is not lost to a reset.
#include "server/http/http_connection.h"

#include <sstream>

#include "server/http/http_message.h"
#include "server/http/request_log.h"

namespace octet::server::detail {

Session::Session(tcp::socket&& socket, Shared& shared, bool probe_only)
    : probe_only_(probe_only),
      socket_(std::move(socket)),
      strand_(socket_.get_executor()),
      read_deadline_(strand_),
      write_deadline_(strand_),
      paused_hold_(strand_),
      shared_(shared),
      ctx_(shared.ctx),
      buffer_(static_cast<size_t>(shared.ctx.config.max_header_bytes) + kReadSlackBytes),
      notify_pending_(std::make_shared<std::atomic<bool>>(false)) {
  (probe_only_ ? shared_.probe_connections : shared_.connections).fetch_add(1);
}

Session::~Session() {
  // A job still here means the client went away mid-response: abort its engine requests.
  if (job_) {
    job_->abort();
    job_.reset();
  }
  (probe_only_ ? shared_.probe_connections : shared_.connections).fetch_sub(1);
}

void Session::start() {
  net::dispatch(strand_, [self = shared_from_this()] { self->read_header(); });
}

void Session::read_header() {
  if (closed_) return;
  read_timed_out_ = false;
  preflight_.reset();
  cors_fields_.clear();  // a head that does not parse gets no CORS fields
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(ctx_.config.max_header_bytes));  // validated
  parser_->body_limit(static_cast<uint64_t>(ctx_.config.max_body_bytes));
  skip_empty_lines();
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
                       self->read_first_bytes();
                     }));
}

/// Empty lines (CRLF or LF) before a request line are skipped, not a bad request (RFC 9112
/// 2.2: a client may send a stray CRLF after a request body).
void Session::skip_empty_lines() {
  const auto data = buffer_.data();
  const auto* p = static_cast<const char*>(data.data());
  size_t n = 0;
  while (n < data.size() && (p[n] == '\r' || p[n] == '\n')) ++n;
  buffer_.consume(n);
}

/// The first bytes of a connection's next request: empty lines alone leave it idle, anything
/// else begins the request (its head then has --read-timeout).
void Session::read_first_bytes() {
  if (closed_) return;
  socket_.async_read_some(
      buffer_.prepare(kWatchReadBytes),  // as a watch read: within kReadSlackBytes
      net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t n) {
        if (ec) {
          self->read_deadline_.cancel();
          return self->on_read_error(ec);
        }
        self->buffer_.commit(n);
        self->skip_empty_lines();
        if (self->buffer_.size() == 0) return self->read_header();  // still idle
        self->read_header_bytes();
      }));
}

/// Reads and parses the request head, which must be complete within --read-timeout.
void Session::read_header_bytes() {
  if (closed_) return;
  arm_read_timeout(probe_only_ ? std::min(ctx_.config.read_timeout, kProbeIdleSeconds)
                               : ctx_.config.read_timeout);
  http::async_read_header(
      socket_, buffer_, *parser_,
      net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
        self->on_header(ec);
      }));
}

/// Reads and parses the next part of the body; on_body_part accounts for it.
void Session::read_body() {
  http::async_read_some(
      socket_, buffer_, *parser_,
      net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
        self->on_body_part(ec);
      }));
}

void Session::on_body_part(beast::error_code ec) {
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
  if (!parser_->is_done()) {
    // The deadline may have passed as this part arrived: no further read would be cancelled.
    if (read_timed_out_) return on_read_error(net::error::operation_aborted);
    return read_body();
  }
  read_deadline_.cancel();
  if (buffer_.capacity() > kKeptBufferBytes) buffer_.shrink_to_fit();
  handle(parser_->release());
}

/// A request has begun (a byte of its head arrived): its head, then its body, must each be
/// complete within `seconds`, or it gets 408 (on_read_timeout).
void Session::arm_read_timeout(double seconds) {
  read_timeout_s_ = seconds;
  read_timed_out_ = false;
  read_deadline_.arm(seconds, [self = shared_from_this()] { self->on_read_timeout(); });
}

/// The begun request is not complete in time: the pending read is cancelled, and its
/// completion answers 408 and closes (on_read_error). cancel() would also cut a 100 Continue
/// still being written; then the connection just closes, as before 408 was sent.
void Session::on_read_timeout() {
  read_timed_out_ = true;
  beast::error_code ec;
  socket_.cancel(ec);
}

void Session::on_read_error(beast::error_code ec) {
  if (std::exchange(read_timed_out_, false) && ec == net::error::operation_aborted && !closed_) {
    std::ostringstream limit;
    limit << read_timeout_s_;
    return reply_and_close(408, "the request was not complete within " + limit.str() +
                                    " s (--read-timeout); the connection is closed");
  }
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

void Session::reply_and_close(int status, const std::string& message,
                              const std::string& code) {
  // A head too large to parse (431) or malformed (400) is answered before begin_request.
  if (!request_active_) begin_request("-", "-", "");
  keep_alive_ = false;
  body_lease_.reset();
  const int s = status;
  status_ = s;
  queue_write(with_request_fields(
      serialize_response(s, "application/json", dump(error_json(s, message, "", code)), false)));
  response_done_ = true;
}

/// The response is sent and our side shut down: read and discard what the client still sends
/// (a body refused at header time, say) until it closes or kLingerSeconds pass, then close.
/// Closing with unread bytes would reset the connection, and a reset can discard the answer
/// before the client reads it.
void Session::linger() {
  if (closed_) return;
  if (!lingering_) {
    lingering_ = true;
    ++ctx_.lingering;  // the serve command's shutdown waits for these (a bounded while)
  }
  read_deadline_.arm(kLingerSeconds, [self = shared_from_this()] { self->close(); });
  drain();
}

void Session::drain() {
  if (!drain_buffer_) drain_buffer_ = std::make_unique<std::array<char, 4096>>();
  socket_.async_read_some(
      net::buffer(*drain_buffer_),
      net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec || self->closed_) return self->close();
        self->drain();
      }));
}

void Session::close() {
  if (closed_) return;
  closed_ = true;
  if (lingering_) --ctx_.lingering;
  lingering_ = false;
  end_request(499);  // a request whose response was not completely written
  read_deadline_.cancel();
  write_deadline_.cancel();
  paused_hold_.release();
  if (job_) job_->abort();
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

}  // namespace octet::server::detail

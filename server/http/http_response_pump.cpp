// A Session's response (http_connection.h): the pump turns a generation's outputs into bytes a
// bounded batch (kUpdatesPerPump) per handler and cuts off a client that leaves more than
// kMaxQueuedWriteBytes unsent; the disconnect watch keeps one read pending while a response is
// produced (a gone client's engine requests are aborted at once; pipelined bytes are kept, and
// from kMaxPipelinedBytes on the watch pauses: back-pressure, never a close); the write queue
// sends in slices under the write deadline; the end of a response leads to the next request
// or to the close.
#include "server/http/http_connection.h"

#include <mutex>

#include <spdlog/spdlog.h>

#include "server/http/http_message.h"
#include "server/http/request_log.h"

namespace octet::server::detail {

void Session::start_job(std::unique_ptr<GenerationJob> job) {
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
    queue_write(with_request_fields(sse_head(keep_alive_, /*chunked=*/!http10_)));
  }
  watch();
  pump();
}

/// Drains at most kUpdatesPerPump of the job's available updates into writes (on the
/// strand); with more waiting it posts itself again, so that the disconnect watch, the
/// deadlines and the other connections of this thread run in between (a backlog of 40,000
/// updates drained in one handler kept a gone client's request running for minutes).
void Session::pump() {
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
    queue_write(with_request_fields(
        serialize_response(job_->status(), "application/json", data, keep_alive_)));
    response_done_ = true;
  }
}

/// Keeps one read pending while a request is prepared or answered. With kMaxPipelinedBytes
/// buffered it pauses instead (the client's further requests wait in TCP until this response is
/// written): no read is pending then and the engine's notify holds only a weak reference, so
/// paused_hold_ keeps the session until end_response or close.
void Session::watch() {
  if (watching_ || closed_) return;
  if (buffer_.size() >= kMaxPipelinedBytes) return paused_hold_.take(shared_from_this());
  paused_hold_.release();  // the pending read holds the session
  watching_ = true;
  socket_.async_read_some(
      buffer_.prepare(kWatchReadBytes),  // fits: kMaxPipelinedBytes + kWatchReadBytes <= slack
      net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t n) {
        self->on_watch(ec, n);
      }));
}

void Session::on_watch(beast::error_code ec, size_t n) {
  RequestLogScope scope(request_id_);
  watching_ = false;
  if (!ec) buffer_.commit(n);  // a pipelined request: kept for the next read
  if (after_watch_ != AfterWatch::kNothing) {  // cancelled by end_response
    const AfterWatch next = std::exchange(after_watch_, AfterWatch::kNothing);
    if (ec && ec != net::error::operation_aborted) return close();
    return next == AfterWatch::kReadNext ? read_header() : linger();
  }
  if (ec) {
    if (response_done_ && writing_) {
      // The whole response is queued and its last write in flight: a client that read it and
      // closed. on_write ends the request with the response's status (a close seen first here
      // logged such requests as 499); the next read or the linger then sees the close, and a
      // failed write still closes with 499.
      return;
    }
    if (preparing_) {
      spdlog::info("client disconnected; stopping the preparation of its request");
      if (prepare_cancel_) prepare_cancel_->store(true);
    }
    if (job_ && !job_->done()) {
      spdlog::info("client disconnected; aborting its request");
      job_->abort();
    }
    close();
    return;
  }
  if (job_ || preparing_) watch();  // pauses once kMaxPipelinedBytes are buffered
}

void Session::queue_write(std::string data) {
  if (closed_ || data.empty()) return;
  queued_bytes_ += data.size();
  writes_.push_back(std::move(data));
  if (!writing_) do_write();
}

/// Sends the next slice (at most kWriteSliceBytes) of writes_.front(). The deadline is armed
/// per slice, so --read-timeout measures a client that stopped reading, not the time a large
/// body takes (one deadline over a whole 86 MB body cut it short).
void Session::do_write() {
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

void Session::on_write(beast::error_code ec, size_t written) {
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
/// Pipelined bytes after a Connection: close request are read and discarded (linger), never
/// answered; closing with them unread would reset the connection and could lose the response.
void Session::end_response() {
  response_done_ = false;
  paused_hold_.release();  // the caller's handler holds the session
  end_request(status_);
  job_.reset();
  if (!keep_alive_) {
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
  }
  if (watching_) {
    after_watch_ = keep_alive_ ? AfterWatch::kReadNext : AfterWatch::kLinger;
    beast::error_code ec;
    socket_.cancel(ec);  // the watch completes with operation_aborted, then goes on
    return;
  }
  if (!keep_alive_) return linger();
  read_header();
}

}  // namespace octet::server::detail

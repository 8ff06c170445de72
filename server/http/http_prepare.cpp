// Preparation of a request body off the I/O threads (http_connection.h): parsing, the chat
// template, tokenizing and starting the generation run on the preparation pool, at most
// --max-queued-prepares at a time; the reply or the started job comes back to the session's
// strand, and a job whose client left meanwhile is aborted on arrival. A client that leaves
// stops its preparation at the next step (prepare_cancel.h): no further rendering, tokenizing
// or engine work.
#include "server/http/http_connection.h"

#include <spdlog/spdlog.h>

#include "server/http/http_message.h"
#include "server/http/request_log.h"

namespace octet::server::detail {

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
    if (e.status() == kClientClosedStatus) spdlog::info("{}: {}", what, e.what());
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

/// Parses, renders and tokenizes the body on a preparation thread; the result comes back
/// to this strand (on_prepared). Throws ApiError 503 when too many preparations are queued.
void Session::prepare(Route route, std::string what, std::string body) {
  if (shared_.prepares.fetch_add(1) >= ctx_.config.max_queued_prepares) {
    shared_.prepares.fetch_sub(1);
    throw ApiError(503, "too many requests being prepared (--max-queued-prepares " +
                            std::to_string(ctx_.config.max_queued_prepares) + "); retry later");
  }
  preparing_ = true;
  prepare_cancel_ = std::make_shared<std::atomic<bool>>(false);
  net::post(shared_.prepare_pool,
            [self = shared_from_this(), route, what = std::move(what), body = std::move(body),
             lease = std::move(body_lease_), id = request_id_,
             cancel = prepare_cancel_]() mutable {
              RequestLogScope scope(id);
              // The routes check the flag between their expensive steps (prepare_cancel.h); a
              // client that left while the request waited in the queue costs nothing.
              PrepareCancelScope cancel_scope(std::move(cancel));
              Prepared result;
              try {
                check_prepare_cancelled("it started");
                result = prepare_route(self->ctx_, route, body, what);
              } catch (const ApiError& e) {
                result.reply = error_reply(e);
              }
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

void Session::on_prepared(Prepared result) {
  RequestLogScope scope(request_id_);
  preparing_ = false;
  prepare_cancel_.reset();
  if (closed_) {
    // The client went away while its request was prepared: its engine requests stop now.
    if (result.job) result.job->abort();
    return;
  }
  if (result.job) return start_job(std::move(result.job));
  status_ = result.reply.status;
  queue_write(with_request_fields(serialize_response(
      result.reply.status, result.reply.content_type, result.reply.body, keep_alive_)));
  response_done_ = true;
}

}  // namespace octet::server::detail

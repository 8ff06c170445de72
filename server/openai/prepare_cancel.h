#pragma once
// Cancellation of a request's preparation (http_prepare.cpp): a client that leaves while its
// body is parsed, rendered and tokenized on a preparation thread stops that work at the next
// step instead of holding the thread (two abandoned 2.5 MB requests held a 2-token completion
// for 105 s). The session (http_connection.h) sets the flag on its strand when it sees the client
// go; the preparation thread reads it between its expensive steps (check_prepare_cancelled).
#include <atomic>
#include <memory>

#include "server/openai/api_error.h"

namespace octet::server {

/// Set once the client of a preparation has gone.
using CancelFlag = std::shared_ptr<std::atomic<bool>>;

/// Makes `flag` the current preparation's on this thread for the scope's lifetime (as
/// RequestLogScope does for the request id), so that the routes check it without threading it
/// through every call.
class PrepareCancelScope {
 public:
  explicit PrepareCancelScope(CancelFlag flag) : previous_(std::move(current())) {
    current() = std::move(flag);
  }
  ~PrepareCancelScope() { current() = std::move(previous_); }
  PrepareCancelScope(const PrepareCancelScope&) = delete;
  PrepareCancelScope& operator=(const PrepareCancelScope&) = delete;

  /// This thread's current flag (null outside a preparation: never cancelled).
  static CancelFlag& current() {
    thread_local CancelFlag flag;
    return flag;
  }

 private:
  CancelFlag previous_;
};

/// Status of a preparation stopped because its client left (nginx's "client closed request";
/// the reply is never sent).
inline constexpr int kClientClosedStatus = 499;

/// Throws ApiError 499 when this thread's preparation was cancelled (its client left) before
/// `step` ("rendering the chat template", "tokenizing prompt 2", ...).
inline void check_prepare_cancelled(const char* step) {
  const CancelFlag& flag = PrepareCancelScope::current();
  if (flag && flag->load())
    throw ApiError(kClientClosedStatus,
                   std::string("the client went away; preparation stopped before ") + step);
}

}  // namespace octet::server

#include "engine/request_output.h"

namespace octet {

std::optional<RequestOutput> RequestStream::next() {
  bool timed_out = false;
  return next_for(std::chrono::milliseconds::max(), &timed_out);
}

std::optional<RequestOutput> RequestStream::next_for(std::chrono::milliseconds timeout,
                                                     bool* timed_out) {
  std::unique_lock<std::mutex> lock(mu_);
  *timed_out = false;
  const auto ready = [&] { return done_ || !queue_.empty(); };
  if (timeout == std::chrono::milliseconds::max()) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_for(lock, timeout, ready)) {
    *timed_out = true;
    return std::nullopt;
  }
  if (queue_.empty()) return std::nullopt;  // done_ and drained
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished) done_ = true;
  return out;
}

void RequestStream::set_notify(std::function<void()> notify) {
  std::function<void()> replay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notify_ = std::move(notify);
    if (!queue_.empty()) replay = notify_;
  }
  if (replay) replay();
}

void RequestStream::push(RequestOutput output) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(output));
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
}

}  // namespace octet

#pragma once
// Server-wide limits of the HTTP front end, as plain policies the sessions consult:
// AcceptBackoff (how long to wait after accept() fails, e.g. out of file descriptors, and when
// to log it) and ByteBudget (request-body bytes held across all connections). Thread-safe
// where noted; no I/O here, so each policy is unit-tested directly.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace octet::server {

/// Connections accepted beyond --max-connections that may only ask GET /health or GET
/// /metrics (anything else: 503, close): a liveness probe or a scraper is answered while idle
/// clients hold every regular slot. Each serves one request and waits at most
/// kProbeIdleSeconds for it.
inline constexpr int64_t kReservedProbeConnections = 8;
inline constexpr double kProbeIdleSeconds = 5.0;

/// Response bytes one connection may have queued for writing and not yet sent while a stream
/// produces more: a client that reads slower than the model writes is cut off (its request
/// aborted, the connection closed, a log line) instead of buffering its output without bound.
/// One complete response (a large non-streaming body) is queued whatever its size.
inline constexpr size_t kMaxQueuedWriteBytes = size_t{4} << 20;

/// Exponential back-off after failed accepts: the first retry waits kFirst, each further
/// consecutive failure doubles the wait up to kMax; a successful accept resets it. Logging is
/// rate-limited to one line per kLogInterval (the others are counted). Used on one thread.
class AcceptBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFirst{10};
  static constexpr std::chrono::milliseconds kMax{1000};
  static constexpr std::chrono::milliseconds kLogInterval{5000};

  /// An accept failed: the delay before the next attempt.
  std::chrono::milliseconds on_failure() {
    delay_ = delay_.count() == 0 ? kFirst : std::min(delay_ * 2, kMax);
    return delay_;
  }
  /// An accept succeeded: the next failure waits kFirst again.
  void on_success() { delay_ = std::chrono::milliseconds{0}; }

  /// Whether a failure at `now` should be logged; otherwise it is counted in suppressed().
  bool should_log(Clock::time_point now) {
    if (logged_ && now - last_log_ < kLogInterval) {
      ++suppressed_;
      return false;
    }
    logged_ = true;
    last_log_ = now;
    return true;
  }
  /// Failures not logged since the last logged one (reset by take_suppressed()).
  int64_t take_suppressed() { return std::exchange(suppressed_, 0); }

 private:
  std::chrono::milliseconds delay_{0};
  bool logged_ = false;
  Clock::time_point last_log_{};
  int64_t suppressed_ = 0;
};

/// A budget of bytes shared by every connection (thread-safe). try_acquire either takes all
/// `n` bytes or none.
class ByteBudget {
 public:
  explicit ByteBudget(int64_t capacity) : capacity_(capacity) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  /// Takes n >= 0 bytes if they fit in what is left; false (nothing taken) otherwise.
  [[nodiscard]] bool try_acquire(int64_t n) {
    int64_t used = used_.load();
    do {
      if (n > capacity_ - used) return false;
    } while (!used_.compare_exchange_weak(used, used + n));
    return true;
  }
  /// Gives back n bytes taken by try_acquire.
  void release(int64_t n) { used_.fetch_sub(n); }
  int64_t used() const { return used_.load(); }
  int64_t capacity() const { return capacity_; }

 private:
  const int64_t capacity_;
  std::atomic<int64_t> used_{0};
};

}  // namespace octet::server

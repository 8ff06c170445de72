#include "kernels/cpu/thread_team.h"

#include <linux/futex.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/common/check.h"
#include "kernels/cpu/cpu_threads.h"

namespace octet::cpu {

namespace {

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until pred() or kSpinMicros have passed; true when pred() held.
template <class Pred>
bool spin_until(Pred&& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return pred();
  }
}

thread_local bool t_in_loop = false;     // this thread runs a chunk: nested loops run in order
thread_local ThreadTeam* t_team = nullptr;

constexpr int64_t kChunksPerThread = 4;  // a descheduled thread holds up at most 1/4 of its share

}  // namespace

// The job word: generation (32 bits) | next chunk (16) | chunk count (16). A claim is a CAS on
// the whole word, so a worker late for job g can never claim a chunk of job g + 1 as job g's.
struct ThreadTeam::State {
  std::atomic<uint32_t> gen{0};   // futex word: bumped per job (and at stop)
  std::atomic<uint64_t> job{0};
  std::atomic<uint32_t> done{0};  // futex word: chunks finished in the current job
  std::atomic<int> sleepers{0};
  std::atomic<bool> caller_sleeping{false};
  std::atomic<bool> stop{false};
  std::atomic_flag busy = ATOMIC_FLAG_INIT;
  // The current job; written before its job word is published, stable until it completes.
  int64_t begin = 0, end = 0;
  void (*fn)(void*, int64_t, int64_t) = nullptr;
  void* ctx = nullptr;
  std::vector<std::thread> threads;

  // Claims and runs chunks of the published job until none is left.
  void work() {
    uint64_t v = job.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t idx = (v >> 16) & 0xFFFF, chunks = v & 0xFFFF;
      if (idx >= chunks) return;
      if (!job.compare_exchange_weak(v, v + (uint64_t{1} << 16), std::memory_order_acq_rel,
                                     std::memory_order_acquire))
        continue;
      const int64_t n = end - begin;
      const int64_t lo = begin + static_cast<int64_t>(idx) * n / static_cast<int64_t>(chunks);
      const int64_t hi = begin + static_cast<int64_t>(idx + 1) * n / static_cast<int64_t>(chunks);
      t_in_loop = true;
      fn(ctx, lo, hi);
      t_in_loop = false;
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks &&
          caller_sleeping.load(std::memory_order_seq_cst))
        futex_wake_all(&done);
      v = job.load(std::memory_order_acquire);
    }
  }

  void worker_loop() {
    uint32_t seen = 0;  // the generation at construction: a late start still sees stop
    for (;;) {
      if (!spin_until([&] { return gen.load(std::memory_order_acquire) != seen; })) {
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        while (gen.load(std::memory_order_seq_cst) == seen) futex_wait(&gen, seen);
        sleepers.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = gen.load(std::memory_order_acquire);
      if (stop.load(std::memory_order_acquire)) return;
      work();
    }
  }
};

ThreadTeam::ThreadTeam(int size) : size_(size), s_(new State) {
  OCTET_CHECK(size >= 1, "ThreadTeam: size must be at least 1");
  for (int i = 1; i < size; ++i) s_->threads.emplace_back([this] { s_->worker_loop(); });
}

ThreadTeam::~ThreadTeam() {
  s_->stop.store(true, std::memory_order_release);
  s_->gen.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&s_->gen);
  for (std::thread& t : s_->threads) t.join();
  delete s_;
}

void ThreadTeam::run(int64_t begin, int64_t end, int64_t chunks,
                     void (*fn)(void*, int64_t, int64_t), void* ctx) {
  OCTET_CHECK(chunks >= 1 && chunks <= 0xFFFF, "ThreadTeam::run: chunks out of range");
  State& s = *s_;
  if (size_ == 1 || chunks == 1 || s.busy.test_and_set(std::memory_order_acquire)) {
    fn(ctx, begin, end);  // one piece: the same outputs as any split
    return;
  }
  s.begin = begin, s.end = end, s.fn = fn, s.ctx = ctx;
  s.done.store(0, std::memory_order_relaxed);
  const uint32_t g = s.gen.load(std::memory_order_relaxed) + 1;
  s.job.store((uint64_t{g} << 32) | static_cast<uint64_t>(chunks), std::memory_order_release);
  s.gen.store(g, std::memory_order_seq_cst);
  if (s.sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(&s.gen);
  s.work();
  const auto all_done = [&] {
    return s.done.load(std::memory_order_acquire) == static_cast<uint32_t>(chunks);
  };
  if (!spin_until(all_done)) {
    s.caller_sleeping.store(true, std::memory_order_seq_cst);
    for (uint32_t d; (d = s.done.load(std::memory_order_seq_cst)) != static_cast<uint32_t>(chunks);)
      futex_wait(&s.done, d);
    s.caller_sleeping.store(false, std::memory_order_relaxed);
  }
  s.busy.clear(std::memory_order_release);
}

namespace {

std::mutex g_process_mu;
std::unique_ptr<ThreadTeam> g_process_team;
std::atomic<ThreadTeam*> g_process_ptr{nullptr};

ThreadTeam& process_team() {
  if (ThreadTeam* t = g_process_ptr.load(std::memory_order_acquire)) return *t;
  std::lock_guard lock(g_process_mu);
  if (!g_process_team) {
    g_process_team = std::make_unique<ThreadTeam>(detect_cpu_threads().threads);
    g_process_ptr.store(g_process_team.get(), std::memory_order_release);
  }
  return *g_process_team;
}

ThreadTeam& current_team() { return t_team ? *t_team : process_team(); }

}  // namespace

int parallel_width() { return std::max(1, std::min(current_team().size(), omp_get_max_threads())); }

void set_process_threads(int n) {
  OCTET_CHECK(n >= 1, "set_process_threads: n must be at least 1");
  std::lock_guard lock(g_process_mu);
  if (g_process_team && g_process_team->size() == n) return;
  auto team = std::make_unique<ThreadTeam>(n);
  g_process_ptr.store(team.get(), std::memory_order_release);
  g_process_team = std::move(team);
}

void set_thread_team(ThreadTeam* team) { t_team = team; }
ThreadTeam* thread_team() { return t_team; }

namespace detail {

void parallel_for_impl(int64_t begin, int64_t end, bool parallel, int64_t chunks,
                       void (*fn)(void*, int64_t, int64_t), void* ctx) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  if (!parallel || t_in_loop || n == 1) {
    fn(ctx, begin, end);
    return;
  }
  ThreadTeam& team = current_team();
  const int width = std::max(1, std::min(team.size(), omp_get_max_threads()));
  if (width == 1) {
    fn(ctx, begin, end);
    return;
  }
  team.run(begin, end,
           std::min<int64_t>({n, chunks > 0 ? chunks : width * kChunksPerThread, 0xFFFF}), fn,
           ctx);
}

}  // namespace detail

}  // namespace octet::cpu

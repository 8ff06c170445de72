#pragma once
// ThreadTeam: octet's own CPU worker threads for the kernels' parallel loops (in place of
// OpenMP's fork/join). Workers spin briefly (kSpinMicros) after each loop, then sleep on a
// futex, so that cores shared with other processes are handed back at once instead of being
// burnt by spin-waiting. parallel_for cuts [begin, end) into fixed contiguous chunks (a function
// of the range, the width and the caller's chunk count) that the calling thread and the awake
// workers claim in turn: a worker that is descheduled delays nobody unless it holds a chunk. The
// split decides which thread computes an output, never how: every kernel's batch invariance
// holds.
#include <cstdint>
#include <type_traits>

namespace octet::cpu {

/// How long an idle worker spins before it sleeps (microseconds).
inline constexpr int kSpinMicros = 30;

/// A fixed set of size() - 1 worker threads; the caller of run() is thread 0.
class ThreadTeam {
 public:
  /// size >= 1 (1: no worker thread). The workers start at once and sleep until run().
  explicit ThreadTeam(int size);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }

  /// Calls fn(ctx, lo, hi) once per chunk c in [0, chunks) (1 <= chunks <= 65535), with
  /// lo = begin + c * (end - begin) / chunks and hi the next chunk's lo, on whichever threads
  /// claim them; returns when every chunk has run.
  /// Concurrent calls from two threads: the one that finds the team busy runs alone, in order.
  /// Exceptions thrown by fn terminate the process (kernels report errors by OCTET_CHECK).
  void run(int64_t begin, int64_t end, int64_t chunks, void (*fn)(void*, int64_t, int64_t),
           void* ctx);

 private:
  struct State;
  int size_;
  State* s_;
};

/// Worker threads the calling thread's parallel loops use: the thread's own team (a tensor-
/// parallel rank's) if set, else the process team; capped by OpenMP's nthreads setting of the
/// calling thread (omp_set_num_threads, OMP_NUM_THREADS), so callers and tests that set it keep
/// their meaning.
int parallel_width();

/// Sets the process team to n threads (n >= 1; replaces the team, so call it before any
/// parallel loop runs on another thread, e.g. at start-up).
void set_process_threads(int n);

/// The calling thread's team for its parallel loops (nullptr: the process team). The team must
/// outlive its use; RankThreads gives each rank thread its own.
void set_thread_team(ThreadTeam* team);
ThreadTeam* thread_team();

namespace detail {
void parallel_for_impl(int64_t begin, int64_t end, bool parallel, int64_t chunks,
                       void (*fn)(void*, int64_t, int64_t), void* ctx);
}  // namespace detail

/// Runs fn(lo, hi) over disjoint contiguous pieces [lo, hi) covering [begin, end), spread over
/// parallel_width() threads when parallel is true (else once, in order, on the caller). A
/// parallel_for inside another runs in order on its thread. fn must not throw. chunks: how many
/// pieces (capped by the range); 0 = 4 per thread. Compute-bound loops over many equal items
/// pass more, so that the last piece claimed leaves the other threads idle for less time.
template <class F>
void parallel_for(int64_t begin, int64_t end, F&& fn, bool parallel = true, int64_t chunks = 0) {
  using Fn = std::remove_reference_t<F>;
  detail::parallel_for_impl(
      begin, end, parallel, chunks,
      [](void* ctx, int64_t lo, int64_t hi) { (*static_cast<Fn*>(ctx))(lo, hi); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

/// parallel_for calling fn(i) for every i in [begin, end).
template <class F>
void parallel_for_each(int64_t begin, int64_t end, F&& fn, bool parallel = true,
                       int64_t chunks = 0) {
  parallel_for(
      begin, end,
      [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) fn(i);
      },
      parallel, chunks);
}

}  // namespace octet::cpu

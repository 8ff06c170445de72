// In-process Communicator: N tensor-parallel ranks on N threads of one process share host memory,
// so a collective is a barrier-synchronised exchange of pointers (kernels/communicator.h has the
// contract). Threads block on a condition variable, never spin (a 2-core machine runs N ranks
// plus their OpenMP teams). World size 1 is a no-op communicator: no threads, no locks.
//
// One collective is two barrier rounds: (A) every rank posts its op, count and pointer, and the
// last to arrive checks that all ranks called the same op with the same count; then each rank
// reads the others' buffers; (B) once all have read, each rank writes its own result. All-reduce
// splits the elements into N chunks, rank r reducing chunk r in rank order (0, 1, ..., N-1) into
// a shared FP32 scratch, so the sum is one fixed expression per element and bit-identical
// everywhere (the BF16 all-reduce widens each input and rounds the FP32 sum once).
//
// A rank that throws must not leave its peers waiting at a barrier forever: RankThreads::run and
// run_on_ranks abort the group, which wakes the peers with CommunicatorAborted, then rethrow the
// first original exception once every rank has returned.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/communicator.h"

namespace octet::cpu {

/// Thrown out of a collective on the ranks whose group was aborted because a peer rank threw.
class CommunicatorAborted : public std::runtime_error {
 public:
  CommunicatorAborted() : std::runtime_error("communicator aborted: another rank failed") {}
};

/// The state N ThreadCommunicators share (defined in thread_communicator.cpp).
class ThreadGroup;

/// One rank of an in-process group. Thread-compatible, not thread-safe: each rank's object is
/// used by one thread at a time, and every rank makes the same collectives in the same order.
class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank, int world_size);
  ~ThreadCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  void all_reduce_sum(float* buf, int64_t count) override;
  /// Reduced as all_reduce_sum, in FP32, then each sum rounded to BF16 (communicator.h).
  void all_reduce_sum_bf16(uint16_t* buf, int64_t count) override;
  void all_reduce_max(float* buf, int64_t count) override;
  /// recv may hold send in place (send == recv + rank * count); no other overlap.
  void all_gather(const float* send, int64_t count, float* recv) override;
  void broadcast(void* buf, int64_t bytes, int root) override;

  /// Wakes every rank blocked in (or later entering) a collective of this group with
  /// CommunicatorAborted, until reset(). Safe from any thread.
  void abort();
  /// Clears an abort. Only while no rank of the group is inside a collective.
  void reset();
  /// A barrier that every rank passes at the end of a run (run_on_ranks and RankThreads call
  /// it): a rank ending while a peer waits in a collective is a broken invariant (OCTET_CHECK
  /// naming both calls), not a hang.
  void end_run();

 private:
  std::shared_ptr<ThreadGroup> group_;  // null when world_size == 1
  int rank_;
  int world_size_;
};

/// world_size communicators of one new group, element r for rank r. world_size 1 gives one
/// no-op communicator (no shared state). Aborts (OCTET_CHECK) unless world_size >= 1.
std::vector<std::unique_ptr<ThreadCommunicator>> make_thread_communicators(int world_size);

/// Runs fn(rank, comm) for rank 0..world_size-1 on world_size new threads (world_size 1: on the
/// calling thread), joins them all, then rethrows the first exception a rank threw (a peer's
/// CommunicatorAborted only when no rank threw anything else). For tests and one-off runs; an
/// engine keeps RankThreads instead of starting threads each step.
void run_on_ranks(int world_size, const std::function<void(int rank, Communicator& comm)>& fn);

/// world_size persistent rank threads with their communicators: run(fn) runs fn(rank, comm) on
/// every rank at once and returns when all have finished. Rank 0 runs on the calling thread, so
/// world_size 1 starts no thread at all. Exceptions: as run_on_ranks; the group is reset after a
/// failed run, so the next run() works. Not thread-safe: one run() at a time.
/// World size > 1: every rank runs its kernels' parallel loops on a ThreadTeam of its own
/// (kernels/cpu/thread_team.h) of threads_per_rank threads (0: default_threads_per_rank), the
/// rank's thread included: rank 0's team is the calling thread's for the duration of each
/// run(). threads_per_rank > 0 also sets each rank's OpenMP team size (what paged attention
/// still uses) likewise. World size 1 never touches thread settings.
class ThreadTeam;

class RankThreads {
 public:
  explicit RankThreads(int world_size, int threads_per_rank = 0);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int world_size() const { return static_cast<int>(comms_.size()); }
  Communicator& communicator(int rank) { return *comms_.at(rank); }
  void run(const std::function<void(int rank, Communicator& comm)>& fn);

 private:
  struct Pool;  // the worker threads' mailbox
  std::vector<std::unique_ptr<ThreadCommunicator>> comms_;
  std::unique_ptr<Pool> pool_;
  int threads_per_rank_ = 0;
  std::unique_ptr<ThreadTeam> rank0_team_;  // world size > 1 only
};

/// max(1, parallel_width() / world_size): each of world_size ranks' share of the cores.
int default_threads_per_rank(int world_size);

}  // namespace octet::cpu

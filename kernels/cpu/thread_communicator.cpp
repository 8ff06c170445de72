#include "kernels/cpu/thread_communicator.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include <omp.h>

#include "kernels/common/check.h"
#include "kernels/common/half.h"
#include "kernels/cpu/thread_team.h"

namespace octet::cpu {

namespace {

enum class Op { None, Sum, SumBf16, Max, Gather, Broadcast };

const char* op_name(Op op) {
  switch (op) {
    case Op::Sum: return "all_reduce_sum";
    case Op::SumBf16: return "all_reduce_sum_bf16";
    case Op::Max: return "all_reduce_max";
    case Op::Gather: return "all_gather";
    case Op::Broadcast: return "broadcast";
    case Op::None: break;
  }
  return "the end of the run";
}

/// What one rank posted for the collective in progress.
struct Post {
  Op op = Op::None;
  const void* ptr = nullptr;
  int64_t count = 0;  // elements (bytes for broadcast)
  int root = 0;
};

}  // namespace

class ThreadGroup {
 public:
  explicit ThreadGroup(int world) : world_(world), posts_(world) {}

  /// Round A: posts rank's call and waits for all ranks; the last to arrive checks that the
  /// calls match and sizes the reduction scratch. Returns every rank's post.
  const std::vector<Post>& post_and_wait(int rank, const Post& post) {
    std::unique_lock lock(mu_);
    posts_[rank] = post;
    arrive_and_wait(lock, [&] {
      const Post& p0 = posts_[0];
      for (int r = 1; r < world_; ++r) {
        const Post& p = posts_[r];
        OCTET_CHECK(p.op == p0.op && p.count == p0.count && p.root == p0.root,
                    "ranks disagree on a collective: rank 0 called ", op_name(p0.op), "(count ",
                    p0.count, ", root ", p0.root, "), rank ", r, " called ", op_name(p.op),
                    "(count ", p.count, ", root ", p.root, ")");
      }
      if (p0.op == Op::Sum || p0.op == Op::SumBf16 || p0.op == Op::Max) {
        if (static_cast<int64_t>(scratch_.size()) < p0.count) scratch_.resize(p0.count);
      }
    });
    return posts_;  // stable until every rank has passed round B
  }

  /// Round B: waits until every rank has finished reading the posted buffers.
  void wait_all_read() {
    std::unique_lock lock(mu_);
    arrive_and_wait(lock, [] {});
  }

  float* scratch() { return scratch_.data(); }
  int world() const { return world_; }

  void abort() {
    std::lock_guard lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

  void reset() {
    std::lock_guard lock(mu_);
    aborted_ = false;
    arrived_ = 0;
    ++generation_;
  }

 private:
  /// Generational barrier: the last of world_ arrivals runs `complete` (under the lock) and
  /// releases the others. Throws CommunicatorAborted when the group is (or gets) aborted first.
  template <class F>
  void arrive_and_wait(std::unique_lock<std::mutex>& lock, F&& complete) {
    if (aborted_) throw CommunicatorAborted();
    const uint64_t gen = generation_;
    if (++arrived_ == world_) {
      complete();
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
    if (generation_ == gen) throw CommunicatorAborted();
  }

  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<Post> posts_;     // [world]
  std::vector<float> scratch_;  // reduction result; resized only in round A's completion
};

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank,
                                       int world_size)
    : group_(std::move(group)), rank_(rank), world_size_(world_size) {
  OCTET_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank ", rank,
              " of world_size ", world_size);
  OCTET_CHECK((world_size == 1) == (group_ == nullptr),
              "a group is needed exactly when world_size > 1");
  OCTET_CHECK(!group_ || group_->world() == world_size, "group of ", group_->world(),
              " ranks for world_size ", world_size);
}

ThreadCommunicator::~ThreadCommunicator() = default;

namespace {

/// buf[count] = reduce over ranks in rank order, each rank reducing its chunk into the FP32
/// scratch: out = widen(b0); out = reduce(out, widen(b_r)) for r = 1..N-1; buf = narrow(out).
template <class T, class Widen, class Reduce, class Narrow>
void all_reduce(ThreadGroup& g, int rank, Op op, T* buf, int64_t count, Widen widen,
                Reduce reduce, Narrow narrow) {
  OCTET_CHECK(count >= 0 && (buf != nullptr || count == 0), op_name(op), ": count ", count);
  const std::vector<Post>& posts = g.post_and_wait(rank, Post{op, buf, count, 0});
  const int world = g.world();
  const int64_t chunk = (count + world - 1) / world;
  const int64_t lo = std::min(count, rank * chunk);
  const int64_t hi = std::min(count, lo + chunk);
  float* out = g.scratch();
  const auto* first = static_cast<const T*>(posts[0].ptr);
  for (int64_t i = lo; i < hi; ++i) out[i] = widen(first[i]);
  for (int r = 1; r < world; ++r) {  // rank order: ((b0 op b1) op b2) op ...
    const auto* src = static_cast<const T*>(posts[r].ptr);
    for (int64_t i = lo; i < hi; ++i) out[i] = reduce(out[i], widen(src[i]));
  }
  g.wait_all_read();  // every chunk written, every buf read
  for (int64_t i = 0; i < count; ++i) buf[i] = narrow(out[i]);
}

// Lambdas (one type each) so that the reductions inline.
constexpr auto same = [](float x) { return x; };
constexpr auto widen_bf16 = [](uint16_t b) { return bf16_to_float(b); };
constexpr auto round_bf16 = [](float x) { return float_to_bf16(x); };

}  // namespace

void ThreadCommunicator::all_reduce_sum(float* buf, int64_t count) {
  if (!group_) return;
  all_reduce(*group_, rank_, Op::Sum, buf, count, same, [](float a, float b) { return a + b; },
             same);
}

void ThreadCommunicator::all_reduce_sum_bf16(uint16_t* buf, int64_t count) {
  if (!group_) return;
  all_reduce(*group_, rank_, Op::SumBf16, buf, count, widen_bf16,
             [](float a, float b) { return a + b; }, round_bf16);
}

void ThreadCommunicator::all_reduce_max(float* buf, int64_t count) {
  if (!group_) return;
  all_reduce(*group_, rank_, Op::Max, buf, count, same,
             [](float a, float b) { return std::fmax(a, b); }, same);
}

void ThreadCommunicator::all_gather(const float* send, int64_t count, float* recv) {
  OCTET_CHECK(count >= 0 && ((send != nullptr && recv != nullptr) || count == 0),
              "all_gather: count ", count);
  if (!group_) {
    if (recv != send) std::copy(send, send + count, recv);
    return;
  }
  const std::vector<Post>& posts = group_->post_and_wait(rank_, Post{Op::Gather, send, count, 0});
  for (int r = 0; r < world_size_; ++r) {
    const auto* src = static_cast<const float*>(posts[r].ptr);
    float* dst = recv + r * count;
    if (src != dst) std::copy(src, src + count, dst);
  }
  group_->wait_all_read();
}

void ThreadCommunicator::broadcast(void* buf, int64_t bytes, int root) {
  OCTET_CHECK(root >= 0 && root < world_size_, "broadcast: root ", root, " of world_size ",
              world_size_);
  OCTET_CHECK(bytes >= 0 && (buf != nullptr || bytes == 0), "broadcast: bytes ", bytes);
  if (!group_) return;
  const std::vector<Post>& posts =
      group_->post_and_wait(rank_, Post{Op::Broadcast, buf, bytes, root});
  if (rank_ != root && bytes > 0) std::memcpy(buf, posts[root].ptr, bytes);
  group_->wait_all_read();
}

void ThreadCommunicator::abort() {
  if (group_) group_->abort();
}

void ThreadCommunicator::reset() {
  if (group_) group_->reset();
}

void ThreadCommunicator::end_run() {
  if (!group_) return;
  group_->post_and_wait(rank_, Post{Op::None, nullptr, 0, 0});
}

std::vector<std::unique_ptr<ThreadCommunicator>> make_thread_communicators(int world_size) {
  OCTET_CHECK(world_size >= 1, "world_size ", world_size);
  std::shared_ptr<ThreadGroup> group;
  if (world_size > 1) group = std::make_shared<ThreadGroup>(world_size);
  std::vector<std::unique_ptr<ThreadCommunicator>> comms;
  for (int r = 0; r < world_size; ++r)
    comms.push_back(std::make_unique<ThreadCommunicator>(group, r, world_size));
  return comms;
}

namespace {

/// The first exception of a run, preferring any original one over a peer's CommunicatorAborted.
class FirstError {
 public:
  /// Call from a catch block.
  void record_current(ThreadCommunicator& comm) {
    std::exception_ptr e = std::current_exception();
    bool aborted = false;
    try {
      std::rethrow_exception(e);
    } catch (const CommunicatorAborted&) {
      aborted = true;
    } catch (...) {
    }
    {
      std::lock_guard lock(mu_);
      if (!error_ || (aborted_ && !aborted)) {
        error_ = e;
        aborted_ = aborted;
      }
    }
    comm.abort();  // wake the peers waiting for this rank
  }

  void rethrow_if_any() {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::mutex mu_;
  std::exception_ptr error_;
  bool aborted_ = false;
};

void run_rank(const std::function<void(int, Communicator&)>& fn, ThreadCommunicator& comm,
              FirstError& errors) {
  try {
    fn(comm.rank(), comm);
    comm.end_run();
  } catch (...) {
    errors.record_current(comm);
  }
}

}  // namespace

void run_on_ranks(int world_size, const std::function<void(int rank, Communicator& comm)>& fn) {
  std::vector<std::unique_ptr<ThreadCommunicator>> comms = make_thread_communicators(world_size);
  if (world_size == 1) {
    fn(0, *comms[0]);
    return;
  }
  FirstError errors;
  std::vector<std::thread> threads;
  threads.reserve(world_size);
  for (int r = 0; r < world_size; ++r)
    threads.emplace_back([&, r] { run_rank(fn, *comms[r], errors); });
  for (std::thread& t : threads) t.join();
  errors.rethrow_if_any();
}

// Ranks 1..N-1 wait for a new job generation, run it, and count themselves done.
struct RankThreads::Pool {
  std::mutex mu;
  std::condition_variable job_ready;
  std::condition_variable job_done;
  uint64_t job_generation = 0;
  int pending = 0;  // worker ranks still running the current job
  bool stop = false;
  const std::function<void(int, Communicator&)>* job = nullptr;
  FirstError* errors = nullptr;
  std::vector<std::thread> threads;
};

int default_threads_per_rank(int world_size) {
  return std::max(1, parallel_width() / std::max(1, world_size));
}

RankThreads::RankThreads(int world_size, int threads_per_rank)
    : comms_(make_thread_communicators(world_size)),
      pool_(std::make_unique<Pool>()),
      threads_per_rank_(threads_per_rank) {
  const int team_size = threads_per_rank > 0 ? threads_per_rank : default_threads_per_rank(world_size);
  if (world_size > 1) rank0_team_ = std::make_unique<ThreadTeam>(team_size);
  for (int r = 1; r < world_size; ++r) {
    pool_->threads.emplace_back([this, r, team_size] {
      if (threads_per_rank_ > 0) omp_set_num_threads(threads_per_rank_);
      ThreadTeam team(team_size);  // this rank's kernels' workers
      set_thread_team(&team);
      Pool& p = *pool_;
      uint64_t seen = 0;
      for (;;) {
        const std::function<void(int, Communicator&)>* job;
        FirstError* errors;
        {
          std::unique_lock lock(p.mu);
          p.job_ready.wait(lock, [&] { return p.stop || p.job_generation != seen; });
          if (p.stop) return;
          seen = p.job_generation;
          job = p.job;
          errors = p.errors;
        }
        run_rank(*job, *comms_[r], *errors);
        std::lock_guard lock(p.mu);
        if (--p.pending == 0) p.job_done.notify_one();
      }
    });
  }
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(pool_->mu);
    pool_->stop = true;
  }
  pool_->job_ready.notify_all();
  for (std::thread& t : pool_->threads) t.join();
}

void RankThreads::run(const std::function<void(int rank, Communicator& comm)>& fn) {
  if (comms_.size() == 1) {
    fn(0, *comms_[0]);
    return;
  }
  FirstError errors;
  Pool& p = *pool_;
  {
    std::lock_guard lock(p.mu);
    p.job = &fn;
    p.errors = &errors;
    p.pending = static_cast<int>(p.threads.size());
    ++p.job_generation;
  }
  p.job_ready.notify_all();
  const int caller_threads = omp_get_max_threads();
  if (threads_per_rank_ > 0) omp_set_num_threads(threads_per_rank_);
  ThreadTeam* const caller_team = thread_team();
  set_thread_team(rank0_team_.get());
  run_rank(fn, *comms_[0], errors);
  set_thread_team(caller_team);
  if (threads_per_rank_ > 0) omp_set_num_threads(caller_threads);
  {
    std::unique_lock lock(p.mu);
    p.job_done.wait(lock, [&] { return p.pending == 0; });
    p.job = nullptr;
    p.errors = nullptr;
  }
  comms_[0]->reset();  // every rank is out of its collectives: clear a failed run's abort
  errors.rethrow_if_any();
}

}  // namespace octet::cpu

// RankGroup: the tensor-parallel ranks of one model, device-neutral (models/ and engine/ see
// only this and kernels/communicator.h). run(fn) runs fn(rank, comm) on every rank at once,
// rank 0 on the calling thread, and returns when all have finished. On the CPU the ranks are
// persistent threads (kernels/cpu/thread_communicator.h's RankThreads), each with
// max(1, threads / world_size) worker threads; NCCL ranks come with the CUDA backend.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "kernels/communicator.h"

namespace octet {

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual int world_size() const = 0;
  /// Runs fn on every rank; rethrows the first exception a rank threw once all have returned
  /// (a throwing rank aborts its peers' collectives). Not thread-safe: one run() at a time.
  virtual void run(const std::function<void(int rank, Communicator& comm)>& fn) = 0;
};

/// world_size (>= 1) ranks for `device` (--device spelling; the CPU's for cpu and auto).
/// World size 1 starts no thread and leaves OpenMP as it is. Throws std::invalid_argument for
/// a device without a rank group or world_size < 1.
std::unique_ptr<RankGroup> make_rank_group(const std::string& device, int world_size);

/// Sizes the CPU kernels' worker threads for this process (kernels/cpu/thread_team.h) and
/// returns the start-up log line naming the count and why, e.g. "threads: 2 (affinity 2 CPUs,
/// cgroup quota 2.0)". threads > 0 overrides the default min(affinity CPUs, ceil(cgroup CPU
/// quota)); 0 keeps it. Call once at start-up, before the model is loaded (tensor-parallel
/// ranks share out the count). Throws std::invalid_argument when threads < 0.
std::string configure_cpu_threads(int threads);

/// The world-size-1 communicator: rank 0 of 1, every collective a no-op.
Communicator& single_rank_communicator();

}  // namespace octet

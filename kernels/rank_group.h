// RankGroup: the tensor-parallel ranks of one model, device-neutral (models/ and engine/ see
// only this and kernels/communicator.h). run(fn) runs fn(rank, comm) on every rank at once,
// rank 0 on the calling thread, and returns when all have finished. On the CPU the ranks are
// persistent threads (kernels/cpu/thread_communicator.h's RankThreads), each with
// max(1, threads / world_size) worker threads. On CUDA (tensor_parallel_size > 1) local rank r
// is a persistent thread bound to GPU r (cudaSetDevice on every run), with its own CudaBackend
// and an NcclCommunicator on that backend's stream (kernels/rank_group_cuda.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/communicator.h"

namespace octet {
class Backend;
}

namespace octet {

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual int world_size() const = 0;
  /// Runs fn on every rank; rethrows the first exception a rank threw once all have returned
  /// (a throwing rank aborts its peers' collectives). Not thread-safe: one run() at a time.
  /// `rank` is the local index in [0, world_size()); comm.rank() / comm.world_size() are the
  /// global ones (they differ only across nodes: global = node_rank * world_size() + local).
  virtual void run(const std::function<void(int rank, Communicator& comm)>& fn) = 0;
  /// The backend local rank `rank` must run on (its communicator's collectives are ordered
  /// with that backend's work), or null when the rank may make its own (the CPU).
  virtual std::shared_ptr<Backend> rank_backend(int rank) const {
    (void)rank;
    return nullptr;
  }
};

/// Where this process's ranks sit in a multi-node group (--nnodes, --node-rank). One node:
/// the defaults (the NCCL id is made in-process). Several: make_rank_group makes the id on
/// node 0 (make_nccl_unique_id) and calls exchange_id on every node with that id (node 0) or
/// an empty one (the others); it returns node 0's 128 bytes (server/cli/rendezvous.h's
/// exchange_rendezvous_id behind a plain function, as Boost stays in server/) and throws, with
/// a clear message, on a timeout.
/// On the CPU (one rank per node, tensor_parallel_size == nnodes) the ranks' collectives go
/// over TCP instead (kernels/cpu/socket_communicator.h): node 0 listens on
/// master_addr:cpu_collective_port, the others connect; exchange_id is not used.
struct RankPlacement {
  int nnodes = 1;
  int node_rank = 0;
  std::function<std::vector<uint8_t>(const std::vector<uint8_t>& own_id)> exchange_id;
  std::string master_addr;
  int cpu_collective_port = 0;
};

/// How long a multi-node start waits for every node to connect (as the rendezvous does).
inline constexpr int64_t kMultiNodeConnectTimeoutMs = 300000;
/// How long a multi-node receive waits for a live peer that sends nothing (a stopped, swapping
/// or hung process; keep-alive only finds dead ones) before the peer counts as lost: in the
/// CPU's collectives, and on node 0's side of the step channel (the others wait for steps as
/// long as node 0 is idle). Ten minutes, torch.distributed's default collective timeout.
inline constexpr int64_t kMultiNodeSilenceTimeoutMs = 600000;

/// Host bytes between the processes of a multi-node run, one per node (vLLM's gloo CPU group
/// for metadata): the engine's per-step broadcast from node 0 on every device. Blocking; a
/// lost peer throws std::runtime_error naming both nodes, and so does every later call.
class HostChannel {
 public:
  virtual ~HostChannel() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Root's `bytes` (any length) to every process: the others' `bytes` are replaced.
  virtual void broadcast_bytes(std::vector<uint8_t>& bytes, int root) = 0;
};

/// Joins the channel of `nnodes` processes as `node_rank` over TCP (kernels/cpu/
/// socket_communicator.h): node 0 listens on addr:port, the others connect; returns once
/// connected (node 0: every node), within `timeout_ms`. `what` names it in messages. Throws
/// std::invalid_argument for bad ranks or ports, std::runtime_error on a timeout or refusal.
std::unique_ptr<HostChannel> make_host_channel(const std::string& addr, int port, int node_rank,
                                               int nnodes, int64_t timeout_ms,
                                               const std::string& what);

/// A new NCCL unique id (128 bytes) for a multi-node start. Throws std::invalid_argument when
/// this build has no NCCL, std::runtime_error when NCCL fails.
std::vector<uint8_t> make_nccl_unique_id();

/// world_size (>= 1, all nodes together) ranks for `device` (--device spelling), of which
/// this process runs world_size / placement.nnodes. CPU (cpu, or auto without a GPU): rank
/// threads on one node; several nodes: one rank per node over TCP (blocks until every node
/// has connected, kMultiNodeConnectTimeoutMs). CUDA ("cuda" or auto with a GPU; world size 1
/// on one node runs on the caller as the CPU's does): local rank r on GPU r, NCCL between all
/// ranks; the ranks' NCCL start-up blocks until every rank of every node has joined. World
/// size 1 starts no thread and leaves OpenMP as it is. Throws std::invalid_argument for
/// world_size < 1, a world_size nnodes does not divide, "cuda:N" with more than one rank
/// (rank r takes GPU r: give "cuda"), fewer GPUs than local ranks, a build without NCCL, a
/// multi-node placement on the CPU with world_size != nnodes or no cpu_collective_port, a
/// CUDA one without a 128-byte id; std::runtime_error when the CPU's nodes cannot connect
/// (timeout, refusal) or when CUDA or NCCL fails at start-up.
std::unique_ptr<RankGroup> make_rank_group(const std::string& device, int world_size,
                                           const RankPlacement& placement = {});

/// Sizes the CPU kernels' worker threads for this process (kernels/cpu/thread_team.h) and
/// returns the start-up log line naming the count and why, e.g. "threads: 2 (affinity 2 CPUs,
/// cgroup quota 2.0)". threads > 0 overrides the default min(affinity CPUs, ceil(cgroup CPU
/// quota)); 0 keeps it. Call once at start-up, before the model is loaded (tensor-parallel
/// ranks share out the count). Throws std::invalid_argument when threads < 0.
std::string configure_cpu_threads(int threads);

/// The world-size-1 communicator: rank 0 of 1, every collective a no-op.
Communicator& single_rank_communicator();

}  // namespace octet

// make_rank_group: the CPU's rank threads behind the device-neutral RankGroup.
#include "kernels/rank_group.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_threads.h"
#include "kernels/cpu/socket_communicator.h"
#include "kernels/cpu/thread_communicator.h"
#include "kernels/cpu/thread_team.h"

namespace octet {

namespace {

class CpuRankGroup final : public RankGroup {
 public:
  explicit CpuRankGroup(int world_size)
      : threads_(world_size, world_size > 1 ? cpu::default_threads_per_rank(world_size) : 0) {}
  int world_size() const override { return threads_.world_size(); }
  void run(const std::function<void(int rank, Communicator& comm)>& fn) override {
    threads_.run(fn);
  }

 private:
  cpu::RankThreads threads_;
};

// Multi-node on the CPU: this process's one rank, on the calling thread, its collectives
// over TCP to the other nodes' ranks.
class SocketRankGroup final : public RankGroup {
 public:
  explicit SocketRankGroup(const RankPlacement& p)
      : comm_(p.master_addr, p.cpu_collective_port, p.node_rank, p.nnodes,
              std::chrono::milliseconds(kMultiNodeConnectTimeoutMs),
              "tensor-parallel collectives") {
    comm_.set_silence_timeout(std::chrono::milliseconds(kMultiNodeSilenceTimeoutMs));
  }
  int world_size() const override { return 1; }
  void run(const std::function<void(int rank, Communicator& comm)>& fn) override {
    fn(0, comm_);
  }

 private:
  cpu::SocketCommunicator comm_;
};

class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum_bf16(uint16_t*, int64_t) override {}
  void all_reduce_max(float*, int64_t) override {}
  void all_gather(const float* send, int64_t count, float* recv) override {
    if (send != recv) std::copy(send, send + count, recv);
  }
  void broadcast(void*, int64_t, int) override {}
};

}  // namespace

#if OCTET_HAVE_CUDA
// kernels/rank_group_cuda.cpp: the NCCL rank group (throws without NCCL).
std::unique_ptr<RankGroup> make_cuda_rank_group(int world_size, const RankPlacement& placement);
#endif

std::unique_ptr<RankGroup> make_rank_group(const std::string& device, int world_size,
                                           const RankPlacement& placement) {
  if (world_size < 1)
    throw std::invalid_argument("tensor_parallel_size must be >= 1, got " +
                                std::to_string(world_size));
  if (placement.nnodes < 1 || placement.node_rank < 0 ||
      placement.node_rank >= placement.nnodes || world_size % placement.nnodes != 0)
    throw std::invalid_argument("rank group: node " + std::to_string(placement.node_rank) +
                                " of " + std::to_string(placement.nnodes) +
                                " nodes with tensor_parallel_size " +
                                std::to_string(world_size) + " (a multiple of the node count)");
  const bool one_node = placement.nnodes == 1;
  // One rank runs on the caller whatever the device: no thread, OpenMP untouched.
  if (world_size == 1 && one_node) return std::make_unique<CpuRankGroup>(world_size);
  const std::string resolved = resolve_device(device);
  if (resolved == "cpu") {
    if (!one_node) {
      if (world_size != placement.nnodes)
        throw std::invalid_argument(
            "multi-node on the CPU runs one rank per node: --tensor-parallel-size must equal "
            "--nnodes " + std::to_string(placement.nnodes) + ", got " +
            std::to_string(world_size));
      if (placement.cpu_collective_port < 1 || placement.master_addr.empty())
        throw std::invalid_argument("multi-node rank group on the CPU: no node 0 address and "
                                    "port for the collectives");
      return std::make_unique<SocketRankGroup>(placement);
    }
    return std::make_unique<CpuRankGroup>(world_size);
  }
  if (resolved != "cuda" && resolved.rfind("cuda:", 0) != 0)
    throw std::invalid_argument("unknown device '" + device +
                                "' (expected cpu, cuda, cuda:N or auto)");
  // "cuda" (or auto with a GPU): local rank r takes cuda:r. A pinned "cuda:N" names one GPU.
  if (device != "cuda" && device != "auto")
    throw std::invalid_argument("tensor_parallel_size " + std::to_string(world_size) +
                                " with --device " + device +
                                ": rank r runs on GPU r, give --device cuda");
#if OCTET_HAVE_CUDA
  return make_cuda_rank_group(world_size, placement);
#else
  throw std::invalid_argument("tensor_parallel_size " + std::to_string(world_size) +
                              " on device '" + resolved + "': this build has no CUDA");
#endif
}

std::string configure_cpu_threads(int threads) {
  if (threads < 0)
    throw std::invalid_argument("--threads must be >= 0 (0: from the CPU affinity and cgroup "
                                "quota), got " + std::to_string(threads));
  const cpu::CpuThreadCount detected = cpu::detect_cpu_threads();
  const int n = threads > 0 ? threads : detected.threads;
  cpu::set_process_threads(n);
  return cpu::threads_log_line(n, threads, detected);
}
#if !OCTET_HAVE_CUDA
std::vector<uint8_t> make_nccl_unique_id() {
  throw std::invalid_argument("multi-node start needs NCCL: this build has no CUDA");
}
#endif

namespace {

class SocketHostChannel final : public HostChannel {
 public:
  SocketHostChannel(const std::string& addr, int port, int node_rank, int nnodes,
                    int64_t timeout_ms, const std::string& what)
      : comm_(addr, port, node_rank, nnodes, std::chrono::milliseconds(timeout_ms), what) {
    if (node_rank == 0)  // node 0 only hears back at start-up; followers idle with node 0
      comm_.set_silence_timeout(std::chrono::milliseconds(kMultiNodeSilenceTimeoutMs));
  }
  int rank() const override { return comm_.rank(); }
  int world_size() const override { return comm_.world_size(); }
  void broadcast_bytes(std::vector<uint8_t>& bytes, int root) override {
    comm_.broadcast_bytes(bytes, root);
  }

 private:
  cpu::SocketCommunicator comm_;
};

}  // namespace

std::unique_ptr<HostChannel> make_host_channel(const std::string& addr, int port, int node_rank,
                                               int nnodes, int64_t timeout_ms,
                                               const std::string& what) {
  return std::make_unique<SocketHostChannel>(addr, port, node_rank, nnodes, timeout_ms, what);
}

Communicator& single_rank_communicator() {
  static SingleRankCommunicator comm;
  return comm;
}

}  // namespace octet

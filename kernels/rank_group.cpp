// make_rank_group: the CPU's rank threads behind the device-neutral RankGroup.
#include "kernels/rank_group.h"

#include <algorithm>
#include <stdexcept>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_threads.h"
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

class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_max(float*, int64_t) override {}
  void all_gather(const float* send, int64_t count, float* recv) override {
    if (send != recv) std::copy(send, send + count, recv);
  }
  void broadcast(void*, int64_t, int) override {}
};

}  // namespace

std::unique_ptr<RankGroup> make_rank_group(const std::string& device, int world_size) {
  if (world_size < 1)
    throw std::invalid_argument("tensor_parallel_size must be >= 1, got " +
                                std::to_string(world_size));
  // One rank runs on the caller whatever the device: no thread, OpenMP untouched.
  if (world_size == 1) return std::make_unique<CpuRankGroup>(world_size);
  const std::string resolved = resolve_device(device);
  if (resolved == "cpu") return std::make_unique<CpuRankGroup>(world_size);
  // The NCCL communicator exists (kernels/cuda/nccl_communicator.h); its rank group, one
  // thread per GPU, is not wired into the model runner yet.
  throw std::invalid_argument("tensor_parallel_size " + std::to_string(world_size) +
                              " on device '" + resolved +
                              "' needs the NCCL rank group, which is not wired yet: use "
                              "--device cpu or --tensor-parallel-size 1");
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

Communicator& single_rank_communicator() {
  static SingleRankCommunicator comm;
  return comm;
}

}  // namespace octet

// The NCCL rank group (kernels/rank_group.h): this process's tensor-parallel ranks on its GPUs,
// local rank r on a persistent thread bound to cuda:r (kernels/cpu/thread_communicator.h's
// RankThreads, whose thread communicators go unused), each with its CudaBackend and an
// NcclCommunicator on that backend's stream. Host C++; built with CUDA only.
#if OCTET_HAVE_CUDA

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/thread_communicator.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/rank_group.h"

#if OCTET_HAVE_NCCL
#include "kernels/cuda/nccl_communicator.h"
#endif

namespace octet {

#if OCTET_HAVE_NCCL

namespace {

// How long a failing rank waits for its peers to fail the same way before aborting NCCL.
constexpr std::chrono::milliseconds kFailureGrace{1000};

void set_device_or_throw(int device) {
  const cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess)
    throw std::runtime_error("CUDA: cudaSetDevice(" + std::to_string(device) +
                             "): " + cudaGetErrorString(err));
}

class NcclRankGroup final : public RankGroup {
 public:
  NcclRankGroup(int world_size, const RankPlacement& placement)
      : local_(world_size / placement.nnodes), threads_(local_, 0) {
    const int gpus = cuda_device_count();
    if (gpus < local_)
      throw std::invalid_argument("tensor_parallel_size " + std::to_string(world_size) +
                                  " needs " + std::to_string(local_) + " GPUs on this node (" +
                                  "rank r on cuda:r), found " + std::to_string(gpus));
    backends_.resize(static_cast<size_t>(local_));
    comms_.resize(static_cast<size_t>(local_));
    // Each rank makes its backend on its own thread, with its device current there.
    threads_.run([&](int r, Communicator&) {
      set_device_or_throw(r);
      backends_[r] = std::shared_ptr<Backend>(make_cuda_backend(r));
    });
    if (placement.nnodes == 1) {
      // One NCCL group call from this thread makes every rank's communicator.
      std::vector<int> devices;
      std::vector<void*> streams;
      for (int r = 0; r < local_; ++r) {
        devices.push_back(r);
        streams.push_back(cuda_backend_stream(*backends_[r]));
      }
      auto made = cuda::make_nccl_communicators(devices, streams);
      for (int r = 0; r < local_; ++r) comms_[r] = std::move(made[r]);
    } else {
      if (!placement.exchange_id)
        throw std::invalid_argument("multi-node rank group: no rendezvous to exchange the NCCL "
                                    "unique id (--nnodes " + std::to_string(placement.nnodes) +
                                    ")");
      std::vector<uint8_t> own;
      if (placement.node_rank == 0) own = make_nccl_unique_id();
      const std::vector<uint8_t> got = placement.exchange_id(own);  // throws on a timeout
      if (got.size() != cuda::kNcclUniqueIdBytes)
        throw std::runtime_error("multi-node rank group: the rendezvous gave " +
                                 std::to_string(got.size()) + " bytes, expected an NCCL id of " +
                                 std::to_string(cuda::kNcclUniqueIdBytes));
      cuda::NcclUniqueId id;
      std::copy(got.begin(), got.end(), id.begin());
      // ncclCommInitRank blocks until every rank of every node joins: all local ranks at once.
      threads_.run([&](int r, Communicator&) {
        comms_[r] = std::make_unique<cuda::NcclCommunicator>(
            id, placement.node_rank * local_ + r, world_size, r,
            cuda_backend_stream(*backends_[r]));
      });
    }
  }

  ~NcclRankGroup() override {
    // Communicators before the backends whose streams they use; each on its device.
    for (int r = 0; r < local_; ++r) {
      cudaSetDevice(r);
      comms_[r].reset();
    }
  }

  int world_size() const override { return local_; }

  std::shared_ptr<Backend> rank_backend(int rank) const override { return backends_.at(rank); }

  void run(const std::function<void(int rank, Communicator& comm)>& fn) override {
    if (aborted_)
      throw std::runtime_error("NCCL rank group: aborted after a rank failed in an earlier "
                               "step; restart the engine");
    // A failure every rank meets (a bad batch, checked before any collective) leaves the
    // group usable. A rank failing alone may leave peers waiting on the device for a
    // collective it never joins: after kFailureGrace without all ranks failing, every
    // communicator is aborted (ncclCommAbort, from this thread), so the peers' collectives
    // fail (an OCTET_CHECK naming them) instead of hanging, and the group refuses later runs.
    std::mutex mu;
    std::condition_variable cv;
    int failed = 0;
    threads_.run([&](int r, Communicator&) {
      try {
        set_device_or_throw(r);
        fn(r, *comms_[r]);
      } catch (...) {
        std::unique_lock<std::mutex> lock(mu);
        ++failed;
        cv.notify_all();
        const bool all = cv.wait_for(lock, kFailureGrace, [&] { return failed == local_; });
        lock.unlock();
        if (!all && !aborted_.exchange(true))
          for (auto& c : comms_) c->abort();
        throw;
      }
    });
  }

 private:
  int local_;
  cpu::RankThreads threads_;
  std::vector<std::shared_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<cuda::NcclCommunicator>> comms_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::unique_ptr<RankGroup> make_cuda_rank_group(int world_size, const RankPlacement& placement) {
  return std::make_unique<NcclRankGroup>(world_size, placement);
}

std::vector<uint8_t> make_nccl_unique_id() {
  const cuda::NcclUniqueId id = cuda::nccl_unique_id();
  return std::vector<uint8_t>(id.begin(), id.end());
}

#else  // CUDA without NCCL

std::unique_ptr<RankGroup> make_cuda_rank_group(int world_size, const RankPlacement&) {
  throw std::invalid_argument("tensor_parallel_size " + std::to_string(world_size) +
                              " on CUDA needs NCCL, and this build has none (install NCCL, "
                              "e.g. libnccl-dev, and re-run cmake), or use "
                              "--tensor-parallel-size 1");
}

std::vector<uint8_t> make_nccl_unique_id() {
  throw std::invalid_argument("multi-node start needs NCCL, and this build has none");
}

#endif

}  // namespace octet

#endif  // OCTET_HAVE_CUDA

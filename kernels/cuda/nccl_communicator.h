// NcclCommunicator: the Communicator (kernels/communicator.h) of one tensor-parallel rank on
// one GPU, over NCCL. Buffers are device memory of that GPU; every collective is enqueued on the
// backend's stream given at construction and returns once queued (the result is ready for the
// later work on that stream, and for the host after a stream synchronisation), so collectives
// can be captured in CUDA graphs with the rest of a step. Built only when CUDA and NCCL are
// found (CMake OCTET_HAVE_NCCL); no CUDA or NCCL type appears here, so host code may include it.
//
// Reduction order: NCCL's ring and tree algorithms reduce each element once and send the
// result to every rank, so all ranks get bit-identical sums (the contract's purpose), but the
// order of the additions is NCCL's (it depends on the algorithm and topology), not 0, 1, ...,
// N-1 as on the CPU: a CPU and a GPU run of the same model may differ in the last bits.
//
// Start-up: rank 0 makes an id (nccl_unique_id) and hands it to every rank, by memory within a
// process or over server/cli/rendezvous.h across nodes; each rank then constructs its
// communicator, which blocks until all world_size ranks have joined. In one process with one
// thread per GPU, make_nccl_communicators does all of it at once.
// Errors: a failing start-up throws std::runtime_error naming the NCCL call, rank and device;
// a failing collective is an OCTET_CHECK abort (a broken invariant or a dead peer).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/communicator.h"

namespace octet::cuda {

/// Bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES), the same as server/cli/rendezvous.h's id.
inline constexpr size_t kNcclUniqueIdBytes = 128;
using NcclUniqueId = std::array<uint8_t, kNcclUniqueIdBytes>;

/// A new NCCL unique id (ncclGetUniqueId): made by rank 0, then given to every rank. Throws
/// std::runtime_error when NCCL fails (e.g. no usable network interface for its bootstrap).
NcclUniqueId nccl_unique_id();

/// The NCCL version as NCCL_VERSION_CODE spells it (e.g. 22809 for 2.28.9), at run time.
int nccl_version();

/// One rank. Thread-compatible: each rank's object is used by one thread at a time, and all
/// ranks make the same collectives in the same order with the same counts.
class NcclCommunicator final : public Communicator {
 public:
  /// Joins the world_size-rank communicator `id` as `rank` (ncclCommInitRank), with CUDA
  /// device `device` made current on the calling thread first. Blocks until every rank has
  /// joined. stream: the backend's cudaStream_t (nullptr = the legacy default stream), on
  /// `device`; it must outlive this object. Throws std::invalid_argument for a rank outside
  /// [0, world_size), std::runtime_error when CUDA or NCCL fails.
  NcclCommunicator(const NcclUniqueId& id, int rank, int world_size, int device, void* stream);
  /// ncclCommDestroy (waits for the queued collectives); after abort(), only frees.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int device() const { return device_; }
  void* stream() const { return stream_; }

  /// buf[count] (device floats) = the element-wise sum over ranks (ncclAllReduce, ncclSum,
  /// in place); bit-identical on every rank, in NCCL's order (see above).
  void all_reduce_sum(float* buf, int64_t count) override;
  /// buf[count] (device BF16 bits) = the element-wise sum over ranks (ncclAllReduce,
  /// ncclBfloat16, ncclSum, in place): half all_reduce_sum's bytes. Bit-identical on every
  /// rank; NCCL adds in FP32 and rounds each partial sum to BF16 in its order (see above), so
  /// the result may differ from the CPU communicators' (one rounding) in the last bits.
  void all_reduce_sum_bf16(uint16_t* buf, int64_t count) override;
  /// buf[count] = the element-wise max over ranks (ncclMax; NaN handling as NCCL's).
  void all_reduce_max(float* buf, int64_t count) override;
  /// recv[world_size * count] = every rank's send[count] in rank order (ncclAllGather); send
  /// may be recv + rank * count (in place), no other overlap.
  void all_gather(const float* send, int64_t count, float* recv) override;
  /// root's buf[bytes] to every rank's buf (ncclBroadcast, in place).
  void broadcast(void* buf, int64_t bytes, int root) override;

  /// ncclCommAbort: ends the communicator at once, so that peers blocked in a collective with
  /// this rank fail instead of hanging (after a rank's error). No collective after this. Safe
  /// from another thread than the rank's (once: later calls do nothing).
  void abort();

 private:
  friend std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(
      const std::vector<int>& devices, const std::vector<void*>& streams);
  struct Adopt {};
  NcclCommunicator(Adopt, void* comm, int rank, int world_size, int device, void* stream);

  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = 0;
  int world_size_ = 1;
  int device_ = 0;
  void* stream_ = nullptr;  // cudaStream_t
  std::atomic<bool> aborted_{false};  // abort() may come from a peer rank's thread
};

/// One communicator per GPU of this process, element r for rank r on devices[r] with
/// streams[r] (one thread per GPU on one node): a new id and every rank's ncclCommInitRank in
/// one NCCL group, from the calling thread. devices must be distinct (NCCL runs one rank per
/// GPU); streams.size() == devices.size(). Throws std::invalid_argument for empty or
/// mismatched lists, std::runtime_error when CUDA or NCCL fails.
std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(
    const std::vector<int>& devices, const std::vector<void*>& streams);

}  // namespace octet::cuda

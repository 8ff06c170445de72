// Communicator: the collectives tensor parallelism needs between the ranks of one model
// (Megatron-LM, Shoeybi et al. 2019: column-parallel then row-parallel linears, one all-reduce
// per pair). Every rank calls the same collectives in the same order with the same counts;
// buffers are memory of the rank's backend. An in-process implementation runs N ranks on N
// threads (kernels/cpu/thread_communicator.h); NCCL's comes with the CUDA backend.
// Errors: mismatched calls between ranks are a broken invariant (OCTET_CHECK abort).
#pragma once

#include <cstdint>

namespace octet {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  /// buf[count] = sum over ranks of each rank's buf[count], in rank order (0, 1, ..., N-1), so
  /// every rank gets the bit-identical result.
  virtual void all_reduce_sum(float* buf, int64_t count) = 0;
  /// buf[count] = max over ranks, element-wise (NaN ignored, as fmaxf).
  virtual void all_reduce_max(float* buf, int64_t count) = 0;
  /// recv[world_size * count] = the ranks' send[count] back to back in rank order.
  virtual void all_gather(const float* send, int64_t count, float* recv) = 0;
  /// Copies root's buf[bytes] to every other rank's buf.
  virtual void broadcast(void* buf, int64_t bytes, int root) = 0;
};

}  // namespace octet

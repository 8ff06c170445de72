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
  /// buf[count] (BF16 bits) = the element-wise sum over ranks, in BF16: half the bytes of
  /// all_reduce_sum, what a row-parallel layer's outputs need on a GPU (vLLM's all-reduce).
  /// The CPU communicators define it exactly: each element widened to FP32 (exact), the FP32
  /// values added in rank order ((b0 + b1) + ...) + b{N-1}, the sum rounded once to BF16, to
  /// nearest even (finite sums past the BF16 range become +-inf; NaN stays NaN, as 0x7FFF),
  /// the same bits on every rank. NCCL's (ncclBfloat16, ncclSum) is bit-identical on every
  /// rank too, but rounds its partial sums to BF16 in its own order. World size 1: unchanged.
  virtual void all_reduce_sum_bf16(uint16_t* buf, int64_t count) = 0;
  /// buf[count] = max over ranks, element-wise (NaN ignored, as fmaxf).
  virtual void all_reduce_max(float* buf, int64_t count) = 0;
  /// recv[world_size * count] = the ranks' send[count] back to back in rank order.
  virtual void all_gather(const float* send, int64_t count, float* recv) = 0;
  /// Copies root's buf[bytes] to every other rank's buf.
  virtual void broadcast(void* buf, int64_t bytes, int root) = 0;
};

}  // namespace octet

// Paged KV cache kernels of the CUDA backend (attention.cu: write_kv_cache and the plan;
// attention_decode.cu, attention_prefill.cu: the kernels): reshape-and-cache (write_kv_cache)
// and causal paged attention (Kwon et al. 2023) with FP32 scores, softmax state and P.V sums.
// Device pointers throughout, semantics of kernels/backend.h. Attention runs two kernels, chosen
// per sequence from its own query count (so a query's result depends on its sequence only):
//  - decode ("paged_decode_split", < kPrefillMinQueries queries): one block per (query, head,
//    partition of kPartitionTokens absolute positions); a row with several partitions writes
//    partial softmax states that "paged_decode_merge" folds in partition order (flash-decoding);
//  - prefill ("paged_prefill_tiled"): one block per (tile of kTileRows queries of a sequence,
//    head), K/V staged through shared memory kKvTile positions at a time, online softmax per
//    query (flash-attention style).
// head_dim <= kMaxHeadDim. The host plans the work from the batch's query_start_loc and seq_lens
// (host copies given by the caller, or read back by CudaBackend with one small device-to-host
// copy that waits for the queued work) and uploads the plan through a ring of kPlanSlots pinned
// buffers: a call waits only for the upload kPlanSlots calls back, not for the queued kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/common/views.h"

namespace octet::cuda_kernels {

inline constexpr int64_t kMaxHeadDim = 256;
inline constexpr int64_t kPartitionTokens = 512;
inline constexpr int64_t kPrefillMinQueries = 8;
inline constexpr int64_t kTileRows = 16;
inline constexpr int64_t kKvTile = 32;
inline constexpr int kPlanSlots = 8;

/// Queues write_kv_cache (backend.h). FP8 caches need k_scale / v_scale.
void write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                    const int64_t* slot_mapping, int64_t n, cudaStream_t stream);

/// Plans and queues paged attention; owns the device work lists and partial-softmax scratch
/// and the pinned host copy of the plan. One per backend (one stream).
class PagedAttention {
 public:
  PagedAttention() = default;
  ~PagedAttention();
  PagedAttention(const PagedAttention&) = delete;
  PagedAttention& operator=(const PagedAttention&) = delete;

  /// host_query_start_loc: [batch.num_seqs + 1], host_seq_lens: [batch.num_seqs], host copies of
  /// the batch's arrays (validated here: a broken batch is an OCTET_CHECK abort).
  void run(const KVCacheView& cache, const float* q, const PagedAttentionBatch& batch,
           const int64_t* host_query_start_loc, const int64_t* host_seq_lens, int64_t num_heads,
           int64_t sliding_window, float softmax_scale, float* out, cudaStream_t stream);

 private:
  void reserve_device(size_t work_bytes, size_t partial_floats, cudaStream_t stream);

  // Pinned host staging of the plans, used in turn; each slot's event is recorded after its
  // upload, so the slot is reusable once that event has completed.
  struct PlanSlot {
    int32_t* pinned = nullptr;
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;
  };
  PlanSlot slots_[kPlanSlots];
  int next_slot_ = 0;
  void* work_ = nullptr;          // device copy of the plan
  size_t work_bytes_ = 0;
  float* partials_ = nullptr;     // [slots, heads, head_dim + 2]: acc, then m and l
  size_t partial_floats_ = 0;
};

}  // namespace octet::cuda_kernels

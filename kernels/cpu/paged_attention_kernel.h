#pragma once
// Internal to paged_attention*.cpp: the per-ISA inner kernel of paged attention. The driver
// (paged_attention.cpp) splits the work into (query token, KV head, partition) pieces, prepares
// the queries and folds the partial results; a kernel computes one partial softmax over a run
// of at most kPartitionTokens cached positions. Everything else (the split, the fold, the final
// normalisation) is common code, so a path's result for one (token, head) is fixed by the
// kernel's arithmetic and the partition boundaries alone.
#include <cstdint>

#include "kernels/cpu/paged_attention.h"

namespace octet::paged_detail {

/// Positions per partition. Partition j of a sequence covers positions [j * P, (j + 1) * P)
/// (cut by the query's window start and by the query's own position), whatever the batch.
inline constexpr int64_t kPartitionTokens = 256;
/// Most query rows in one kernel call (PartialArgs::num_rows).
inline constexpr int64_t kMaxRowsPerCall = 4;
/// Head dims are processed in groups of 64 lanes; q and the partial sums are padded to this.
inline constexpr int64_t kGroupLanes = 64;

constexpr int64_t padded_head_dim(int64_t head_dim) {
  return (head_dim + kGroupLanes - 1) / kGroupLanes * kGroupLanes;
}

/// One partial softmax: query heads g = 0..num_q_heads-1 of num_kv_heads_run adjacent KV heads
/// over positions [begin, end) of one sequence (end - begin <= kPartitionTokens). Every array
/// below and every output runs over those KV heads in order, num_q_heads entries each.
struct PartialArgs {
  DType dtype;
  const uint8_t* k;  // cache.k advanced to the first KV head: slot s's row is k + s * slot_stride
  const uint8_t* v;
  int64_t slot_stride;  // bytes: num_kv_heads * head_dim * element bytes
  int64_t block_size;
  const int32_t* block_table;  // this sequence's row
  int64_t head_dim;
  int64_t num_q_heads;
  // [num_q_heads, padded_head_dim] queries times softmax_scale * k_scale, zero padded, each group
  // of 64 lanes in the kernel's lane order (lane_order()).
  const float* q;
  int64_t begin, end;
  int64_t num_kv_heads_run = 1;  // <= Kernel::max_kv_heads; head h's rows at + h * head_dim
  // num_rows > 1 (Kernel::max_query_vectors > 1 only): query rows of this sequence, row r over
  // [begin, row_ends[r]) (end = the largest); q and every output are [num_rows][heads' entries].
  int64_t num_rows = 1;
  const int64_t* row_ends = nullptr;
};

/// Per-thread scratch floats a kernel needs (zero-initialised once by the caller): scores,
/// reduction tiles, row offsets (int64, kPartitionTokens + 32 of them), two decoded rows.
/// num_q_heads: of all the KV heads of one call (num_q_heads * num_kv_heads_run).
constexpr int64_t partial_scratch_floats(int64_t num_q_heads, int64_t hdp) {
  return num_q_heads * (kPartitionTokens + 16 * 16) + 2 * (kPartitionTokens + 32) + 2 * hdp + 64;
}

/// A kernel writes, for each query head g of the call (KV head h's g-th is h * num_q_heads + g):
/// m[g] = max score, l[g] = sum_t exp(score_t - m[g]) and acc[g * padded_head_dim + lane] =
/// sum_t exp(score_t - m[g]) * code_value(v_t) (no v_scale), in its lane order. A head's
/// results never depend on the other heads of the call.
using PartialFn = void (*)(const PartialArgs& a, float* scratch, float* m, float* l, float* acc);

struct Kernel {
  PartialFn partial;
  // lane_order(dtype)[j] = the element (0..63) of a 64-element group that lane j holds.
  const uint8_t* (*lane_order)(DType);
  int64_t max_head_dim;  // larger heads take another kernel
  const char* name;
  int64_t max_kv_heads = 1;  // PartialArgs::num_kv_heads_run it takes
  // Query vectors (rows times query heads per KV head) that share one pass over K and V; 1: it
  // takes PartialArgs::num_rows == 1 only.
  int64_t max_query_vectors = 1;
};

/// Portable scalar kernel (natural lane order).
Kernel scalar_kernel();
/// AVX2+FMA+F16C kernel; valid only when avx2_kernel_available().
bool avx2_kernel_available();
Kernel avx2_kernel();
/// AVX-512 F/BW/VBMI kernel; valid only when avx512_kernel_available().
bool avx512_kernel_available();
Kernel avx512_kernel();

/// The identity order 0..63.
const uint8_t* natural_lane_order(DType);

/// paged_attention (paged_attention.h) on a given kernel: lets tests and benchmarks run every
/// path this CPU has. Paths agree with each other up to FP32 summation order.
void paged_attention_with(const Kernel& kernel, const KVCacheView& cache, const float* q,
                          const PagedAttentionBatch& batch, int64_t num_heads,
                          int64_t sliding_window, float softmax_scale, float* out);

}  // namespace octet::paged_detail

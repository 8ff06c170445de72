// Paged prefill attention on FlashInfer's batch prefill kernel (FA2: mma.sync tensor cores,
// K/V pages staged through shared memory, FP8 upcast there), issue 26. It takes 16-bit q and
// writes 16-bit output, so a call is three kernels: q x k_scale (per KV head) to 16 bits,
// FlashInfer over the plan's prefill requests (query tiles of kFlashInferPrefillTileQ packed
// (query, head) rows, never split: a row's bits depend on its sequence only), and the output
// x v_scale back to FP32 for the prefill rows. Built for sm_90a only, like flashinfer_decode.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace octet::cuda_kernels {

/// Packed (query, head-of-group) rows per FlashInfer prefill block (fixed: batch invariance).
inline constexpr int64_t kFlashInferPrefillTileQ = 128;

/// One prefill call on device arrays: FlashInferPlan's requests (all of them; work items only
/// for prefill requests), rows [rows, num_heads, head_dim].
struct FlashInferPrefill {
  DType dtype = DType::BF16;        // cache: BF16, F16, FP8_E4M3 or FP8_E5M2
  const void* k = nullptr;          // [num_blocks, block_size, num_kv_heads, head_dim]
  const void* v = nullptr;
  const float* k_scale = nullptr;   // [num_kv_heads], FP8 only
  const float* v_scale = nullptr;
  int64_t block_size = 0, num_kv_heads = 0, head_dim = 0, num_heads = 0;
  const float* q = nullptr;         // FP32 [rows, num_heads, head_dim]
  float* out = nullptr;             // FP32, written for rows with row_is_prefill[row] only
  int64_t rows = 0;
  void* q16 = nullptr;              // scratch, 2 x rows x num_heads x head_dim bytes each
  void* o16 = nullptr;
  // Plan (int32): requests [R (+1)], items [W], rows [rows].
  int64_t num_requests = 0, num_items = 0;
  const int32_t* qo_indptr = nullptr;
  const int32_t* kv_indptr = nullptr;
  const int32_t* kv_indices = nullptr;
  const int32_t* kv_last_page_len = nullptr;
  const int32_t* request_indices = nullptr;
  const int32_t* qo_tile_indices = nullptr;
  const int32_t* kv_tile_indices = nullptr;  // all 0 (no split)
  const int32_t* kv_chunk_tokens = nullptr;  // one int
  const uint8_t* row_is_prefill = nullptr;   // [rows]
  int64_t window_left = -1;
  float softmax_scale = 1.0f;
};

/// Whether the kernels exist for this cache type and head_dim (64 or 128; any group size).
bool flashinfer_prefill_supported(DType dtype, int64_t head_dim);

/// Query tiles of a prefill request of qo_len queries at `group` query heads per KV head.
inline int64_t flashinfer_prefill_tiles(int64_t qo_len, int64_t group) {
  return (qo_len * group + kFlashInferPrefillTileQ - 1) / kFlashInferPrefillTileQ;
}

/// Queues the three kernels. Aborts (OCTET_CHECK) on an unsupported shape; FlashInfer's own
/// refusals (a shared-memory limit) abort with its message.
void flashinfer_prefill(const FlashInferPrefill& a, cudaStream_t stream);

}  // namespace octet::cuda_kernels

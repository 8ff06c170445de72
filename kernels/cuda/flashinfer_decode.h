// Paged decode attention on FlashInfer's batch decode kernel (issue 26): the device side of a
// FlashInferPlan (flashinfer_plan.h) restricted to decode rows. FlashInfer
// (https://github.com/flashinfer-ai/flashinfer, Apache-2.0, headers of PyPI's pinned
// flashinfer-python wheel, cmake/flashinfer.cmake) computes one work item per (item, KV
// head) serving all the head's query heads (GQA read once), K/V pages through cp.async
// 16-byte loads. octet's kernel around FlashInfer's device function runs a capped grid whose
// blocks loop over this call's items (a graph sized for full contexts would otherwise launch
// a block per possible item); octet's own kernel merges the items' partial states in chunk
// order into FP32 rows.
// Compiled for sm_90a only (build time); flashinfer_decode_available() says whether this
// device runs it. No FlashInfer type appears here.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace octet::cuda_kernels {

/// One decode call on device arrays. Requests are indexed by query row (a row with no
/// decode work is an empty request): R = rows. Pages come straight from the block table
/// (flashinfer_plan.h FlashInferDecodeRows): no page list is built or uploaded.
struct FlashInferDecode {
  DType dtype = DType::BF16;        // cache: BF16, F16, FP8_E4M3 or FP8_E5M2
  const void* k = nullptr;          // [num_blocks, block_size, num_kv_heads, head_dim]
  const void* v = nullptr;
  const float* k_scale = nullptr;   // [num_kv_heads], FP8 only (null: 1)
  const float* v_scale = nullptr;
  int64_t block_size = 0, num_kv_heads = 0, head_dim = 0, num_heads = 0;
  const float* q = nullptr;         // [rows, num_heads, head_dim]
  float* out = nullptr;             // [rows, num_heads, head_dim]
  int64_t rows = 0;
  int64_t merge_first_row = 0, merge_rows = 0;  // the rows this call's items belong to
  const int32_t* block_tables = nullptr;     // [num_seqs x max_blocks_per_seq], flattened
  // Plan, int32 [R + 1] / [R] / [W] (FlashInferDecodeRows' arrays).
  const int32_t* page_start = nullptr;
  const int32_t* kv_len = nullptr;
  const int32_t* o_indptr = nullptr;         // row r's items: [o_indptr[r], o_indptr[r + 1])
  const int32_t* request_indices = nullptr;  // [W]
  const int32_t* kv_tile_indices = nullptr;  // [W]
  const int32_t* kv_chunk_tokens = nullptr;  // one int, the fixed split size
  const int32_t* item_count = nullptr;       // one int: the items to do, <= num_items
  int64_t num_items = 0;                     // W: the items' room (a graph's padded size)
  int64_t sm_count = 1;                      // grid: the SMs x resident blocks a SM, over the
                                             // KV heads (blocks loop over the items)
  int64_t window_left = -1;                  // sliding_window - 1, or -1
  float softmax_scale = 1.0f;
  float* partial_out = nullptr;              // [W, num_heads, head_dim] scratch
  float* partial_lse = nullptr;              // [W, num_heads]
};

/// Whether the kernels exist for this cache type, head_dim and query heads per KV head
/// (head_dim 64 or 128; groups 1, 2, 3, 4, 8; 16-bit and FP8 caches).
bool flashinfer_decode_supported(DType dtype, int64_t head_dim, int64_t group_size);

/// Whether the current device runs the FlashInfer kernels (compute capability 9.0: they are
/// built for sm_90a only) and OCTET_ATTENTION_BACKEND does not name octet's own kernels
/// ("OCTET"; "FLASHINFER" or unset: FlashInfer where supported; anything else aborts).
bool flashinfer_decode_available();

/// Queues the decode kernel over the first *a.item_count items and the merge of rows
/// [merge_first_row, merge_first_row + merge_rows) into a.out (two kernels).
/// Aborts (OCTET_CHECK) on an unsupported shape.
void flashinfer_decode(const FlashInferDecode& a, cudaStream_t stream);

}  // namespace octet::cuda_kernels

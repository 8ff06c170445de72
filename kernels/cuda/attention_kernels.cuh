// Internal to attention*.cu: what the paged-attention kernels share (the cache as they see it,
// exact element loads, slot lookup, the work-item formats) and the per-kernel launchers, split
// over attention_decode.cu and attention_prefill.cu so the two compile in parallel.
// Device code; included by .cu files only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/device_math.h"

namespace octet::cuda_kernels::attention_detail {

namespace cm = octet::cuda_math;

constexpr int kThreads = 128;  // 4 warps, both attention kernels
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kDimsPerLane = static_cast<int>(kMaxHeadDim / kWarpSize);  // 8
constexpr int kRowsPerWarp = static_cast<int>(kTileRows / kWarps);       // 4
constexpr int kDecodeItemInts = 5;   // row, seq, begin, end, partial slot (-1: write out)
constexpr int kMergeItemInts = 3;    // row, first slot, partitions
constexpr int kPrefillItemInts = 4;  // seq, first row, rows, position of the first row
static_assert(kTileRows % kWarps == 0 && kMaxHeadDim % kWarpSize == 0);

// The cache as the kernels see it.
struct KvArgs {
  const uint8_t* k;
  const uint8_t* v;
  const float* k_scale;  // [num_kv_heads], FP8 only
  const float* v_scale;
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
  int64_t max_blocks_per_seq;
  int64_t num_blocks;
  int64_t block_size;
  int64_t num_kv_heads;
  int64_t head_dim;
};

constexpr bool is_fp8(DType d) { return d == DType::FP8_E4M3 || d == DType::FP8_E5M2; }

// Exact value of element `i` of a cache array (FP8: the code's value, without its scale).
template <DType D>
__device__ __forceinline__ float load_kv(const uint8_t* __restrict__ base, int64_t i) {
  if constexpr (D == DType::F32) return reinterpret_cast<const float*>(base)[i];
  if constexpr (D == DType::BF16) return cm::bf16_to_float(reinterpret_cast<const uint16_t*>(base)[i]);
  if constexpr (D == DType::F16) return cm::fp16_to_float(reinterpret_cast<const uint16_t*>(base)[i]);
  if constexpr (D == DType::FP8_E4M3) return cm::e4m3_to_float(base[i]);
  if constexpr (D == DType::FP8_E5M2) return cm::e5m2_to_float(base[i]);
  return 0.0f;
}

template <DType D>
__device__ __forceinline__ void store_kv(uint8_t* __restrict__ base, int64_t i, float x, float scale) {
  if constexpr (D == DType::F32) reinterpret_cast<float*>(base)[i] = x;
  if constexpr (D == DType::BF16) reinterpret_cast<uint16_t*>(base)[i] = cm::bf16_from_float(x);
  if constexpr (D == DType::F16) reinterpret_cast<uint16_t*>(base)[i] = cm::fp16_from_float(x);
  if constexpr (D == DType::FP8_E4M3) base[i] = cm::e4m3_from_float(cm::div_rn(x, scale));
  if constexpr (D == DType::FP8_E5M2) base[i] = cm::e5m2_from_float(cm::div_rn(x, scale));
}

// Slot of position p of the sequence whose block-table row is `table`; traps on a bad block id
// (no printf here: its call would make the attention kernels spill registers around it).
__device__ __forceinline__ int64_t slot_of(const KvArgs& kv, const int32_t* table, int64_t p) {
  const int64_t b = table[p / kv.block_size];
  if (b < 0 || b >= kv.num_blocks) __trap();
  return b * kv.block_size + p % kv.block_size;
}


/// One paged_attention call, planned (attention.cu): device work lists and scratch.
struct Launch {
  KvArgs kv;
  const float* q;
  int64_t num_heads, window;
  float scale;
  float* out;
  float* partials;
  const int32_t* decode_items;
  int64_t num_decode;
  const int32_t* merge_items;
  int64_t num_merge;
  const int32_t* prefill_items;
  int64_t num_prefill;
  // Graph replays (attention.h): num_decode / num_merge are the plans' room; the items to do
  // are the first *decode_count / *merge_count (device ints written before each replay).
  // Null: all num_decode / num_merge items (eager).
  const int32_t* decode_count = nullptr;
  const int32_t* merge_count = nullptr;
  // grid.x of the decode and merge kernels at most (PagedAttention: kGridItemsPerSm x SMs);
  // their blocks loop over the items.
  int64_t grid_cap = 1;
};


/// Queue the decode split and merge kernels / the prefill kernel of a plan (nothing when the
/// plan has no such items), for the cache dtype.
void launch_decode(const Launch& a, DType dtype, cudaStream_t stream);
void launch_prefill(const Launch& a, DType dtype, cudaStream_t stream);

}  // namespace octet::cuda_kernels::attention_detail

// Internal to kernels/cuda/flashinfer/*.cu: octet's parameters and attention variant for
// FlashInfer's batch decode device function (BatchDecodeWithPagedKVCacheDevice,
// attention/decode.cuh of FlashInfer 0.7.4), octet's kernel looping it over the items, and the
// launcher of one (head_dim, group size, cache type) instantiation. The function reads
// request `batch_idx`'s query at row batch_idx and writes item bx's partial state (output
// normalised by its own softmax sum, log2-domain log-sum-exp) at slot bx; octet's merge
// (decode.cu) folds them. FP8 caches hold codes of x / scale: k_scale multiplies the logits
// per KV head (before softmax_scale, as the CPU folds it into q), v_scale the merged output.
#pragma once

#include <cuda_fp8.h>
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/variant_helper.cuh>

#include <algorithm>
#include <cstdint>

#include "kernels/common/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flashinfer_decode.h"

namespace octet::cuda_kernels::flashinfer_detail {

/// paged_kv_t reading octet's block table in place: request r's page j is
/// indices[indptr[r] + j] (indices = the flattened [num_seqs, max_blocks_per_seq] table,
/// indptr[r] = the row's first kept page in it, indptr[batch_size] = the table's size), its
/// length kv_len[r]. The decode kernel copies params.paged_kv with `auto` and calls
/// get_length, so this one (not the base's CSR difference) is the one it runs.
template <typename KV>
struct TablePagedKv : flashinfer::paged_kv_t<KV, int32_t> {
  const int32_t* kv_len = nullptr;
  __host__ __device__ __forceinline__ uint32_t get_length(uint32_t batch_idx) const {
    return static_cast<uint32_t>(kv_len[batch_idx]);
  }
};

/// BatchDecodeParams' members the kernel and OctetDecodeVariant read (FP32 q and partials).
template <typename KV>
struct DecodeParams {
  using DTypeQ = float;
  using DTypeKV = KV;
  using DTypeO = float;
  using IdType = int32_t;
  float* q = nullptr;
  TablePagedKv<KV> paged_kv;
  float* o = nullptr;
  float* lse = nullptr;
  uint32_t padded_batch_size = 0;
  uint32_t num_qo_heads = 0;
  int32_t q_stride_n = 0;
  int32_t q_stride_h = 0;
  int32_t window_left = -1;
  float sm_scale = 1.0f;
  float rope_rcp_scale = 1.0f;
  float rope_rcp_theta = 1.0f;
  const float* k_scale = nullptr;
  int32_t* request_indices = nullptr;
  int32_t* kv_tile_indices = nullptr;
  int32_t* kv_chunk_size_ptr = nullptr;
  bool* block_valid_mask = nullptr;  // unused: items past *item_count are never visited
  bool partition_kv = true;
  const int32_t* item_count = nullptr;

  __host__ __device__ __forceinline__ uint32_t get_qo_len(uint32_t) const { return 1; }
  __host__ __device__ __forceinline__ uint32_t get_kv_len(uint32_t batch_idx) const {
    return paged_kv.get_length(batch_idx);
  }
};

/// Softmax attention with octet's sliding window (the query is the request's last position)
/// and per-KV-head k_scale; the output stays unscaled by v_scale (the merge applies it).
struct OctetDecodeVariant : flashinfer::AttentionVariantBase {
  static constexpr bool use_softmax = true;
  uint32_t kv_len;
  uint32_t window_left;
  float sm_scale_log2;

  template <typename Params>
  __device__ __host__ OctetDecodeVariant(const Params& params, uint32_t batch_idx, uint8_t*) {
    kv_len = params.get_kv_len(batch_idx);
    window_left = params.window_left >= 0 ? static_cast<uint32_t>(params.window_left) : kv_len;
    sm_scale_log2 = params.sm_scale * flashinfer::math::log2e;
  }

  REGISTER_LOGITS_TRANSFORM(params, logits, batch_idx, qo_idx, kv_idx, qo_head_idx, kv_head_idx, {
    return params.k_scale != nullptr ? logits * params.k_scale[kv_head_idx] : logits;
  })

  REGISTER_LOGITS_MASK(params, batch_idx, qo_idx, kv_idx, qo_head_idx, kv_head_idx, {
    return kv_idx + 1 + window_left >= kv_len;
  })

  REGISTER_OUTPUT_TRANSFORM(params, output, batch_idx, qo_idx, qo_head_idx, m, d, scale, {
    const float d_rcp = (m != -flashinfer::math::inf) ? flashinfer::math::ptx_rcp(d) : 0.f;
    return output * d_rcp;
  })
};

/// FlashInfer's batch decode device function over items blockIdx.x, + gridDim.x, ... below
/// *item_count, for KV head blockIdx.y: each item's arithmetic is FlashInfer's kernel's, so
/// the bits do not depend on the grid.
template <uint32_t stages, uint32_t tile, uint32_t vec_size, uint32_t bdx, uint32_t bdy,
          uint32_t bdz, typename Params>
__global__ void flashinfer_decode_items_kernel(const __grid_constant__ Params params) {
  extern __shared__ uint8_t smem[];
  const uint32_t n = static_cast<uint32_t>(*params.item_count);
  for (uint32_t item = blockIdx.x; item < n; item += gridDim.x) {
    flashinfer::BatchDecodeWithPagedKVCacheDevice<flashinfer::PosEncodingMode::kNone, stages,
                                                  tile, vec_size, bdx, bdy, bdz,
                                                  OctetDecodeVariant>(params, smem, item,
                                                                      blockIdx.y);
    __syncthreads();  // the next item reuses the shared memory
  }
}

/// Queues the decode kernel of one instantiation (the block shape FlashInfer's own dispatch
/// picks: BatchDecodeWithPagedKVCacheDispatched, sm_80+ two shared-memory stages).
template <uint32_t kHeadDim, uint32_t kGroup, typename KV>
void launch_decode_items(const FlashInferDecode& a, cudaStream_t stream) {
  constexpr uint32_t vec_size = std::max<uint32_t>(16 / sizeof(KV), kHeadDim / 32);
  constexpr uint32_t bdx = kHeadDim / vec_size;
  static_assert(bdx <= 32);
  constexpr uint32_t bdy = kGroup;
  constexpr uint32_t num_threads = std::max<uint32_t>(128, bdx * bdy);
  constexpr uint32_t bdz = num_threads / (bdx * bdy);
  constexpr uint32_t tile = kGroup == 1 ? (sizeof(KV) == 1 ? 2U : 4U) : 1U;
  constexpr uint32_t stages = 2;
  constexpr uint32_t smem =
      static_cast<uint32_t>(std::max<size_t>(2 * stages * tile * bdy * bdz * kHeadDim * sizeof(KV),
                                             bdz * bdy * kHeadDim * sizeof(float)) +
                            std::max<size_t>(tile * num_threads * sizeof(KV*),
                                             2 * bdy * bdz * sizeof(float)));
  auto kernel =
      flashinfer_decode_items_kernel<stages, tile, vec_size, bdx, bdy, bdz, DecodeParams<KV>>;
  // Per call, as FlashInfer's dispatch does (a host-side setting of the current device).
  OCTET_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));

  DecodeParams<KV> p;
  p.q = const_cast<float*>(a.q);
  static_cast<flashinfer::paged_kv_t<KV, int32_t>&>(p.paged_kv) =
      flashinfer::paged_kv_t<KV, int32_t>(
          static_cast<uint32_t>(a.num_kv_heads), static_cast<uint32_t>(a.block_size), kHeadDim,
          static_cast<uint32_t>(a.rows), flashinfer::QKVLayout::kNHD,
          static_cast<KV*>(const_cast<void*>(a.k)), static_cast<KV*>(const_cast<void*>(a.v)),
          const_cast<int32_t*>(a.block_tables), const_cast<int32_t*>(a.page_start),
          /*last_page_len=*/nullptr);
  p.paged_kv.kv_len = a.kv_len;
  p.o = a.partial_out;
  p.lse = a.partial_lse;
  p.padded_batch_size = static_cast<uint32_t>(a.num_items);
  p.num_qo_heads = static_cast<uint32_t>(a.num_heads);
  p.q_stride_n = static_cast<int32_t>(a.num_heads * kHeadDim);
  p.q_stride_h = static_cast<int32_t>(kHeadDim);
  p.window_left = static_cast<int32_t>(a.window_left);
  p.sm_scale = a.softmax_scale;
  p.k_scale = a.k_scale;
  p.request_indices = const_cast<int32_t*>(a.request_indices);
  p.kv_tile_indices = const_cast<int32_t*>(a.kv_tile_indices);
  p.kv_chunk_size_ptr = const_cast<int32_t*>(a.kv_chunk_tokens);
  p.block_valid_mask = nullptr;
  p.partition_kv = true;
  p.item_count = a.item_count;
  // One wave: the blocks that are resident at once (registers, shared memory), over the KV
  // heads; a grid of whole waves keeps every block's share of the items equal.
  // Once per instantiation (the kernels run on sm_90 only, so every device answers the same).
  static const int per_sm = [&] {
    int n = 0;
    OCTET_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, kernel, static_cast<int>(bdx * bdy * bdz), smem));
    return n;
  }();
  const int64_t wave = std::max<int64_t>(1, per_sm * a.sm_count / a.num_kv_heads);
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, std::min(a.num_items, wave))),
                  static_cast<unsigned>(a.num_kv_heads));
  const dim3 block(bdx, bdy, bdz);
  kernel<<<grid, block, smem, stream>>>(p);
  OCTET_CUDA_CHECK_LAUNCH();
}

/// Dispatch of one cache type over (head_dim, group size); false: no such instantiation.
template <typename KV>
bool launch_decode_any(const FlashInferDecode& a, cudaStream_t stream) {
  const int64_t group = a.num_heads / a.num_kv_heads;
#define OCTET_FI_GROUP(HD, G) \
  if (a.head_dim == HD && group == G) return launch_decode_items<HD, G, KV>(a, stream), true;
#define OCTET_FI_HEAD_DIM(HD) \
  OCTET_FI_GROUP(HD, 1) OCTET_FI_GROUP(HD, 2) OCTET_FI_GROUP(HD, 3) OCTET_FI_GROUP(HD, 4) \
  OCTET_FI_GROUP(HD, 8)
  OCTET_FI_HEAD_DIM(64)
  OCTET_FI_HEAD_DIM(128)
#undef OCTET_FI_HEAD_DIM
#undef OCTET_FI_GROUP
  return false;
}

bool launch_decode_bf16(const FlashInferDecode& a, cudaStream_t stream);
bool launch_decode_f16(const FlashInferDecode& a, cudaStream_t stream);
bool launch_decode_e4m3(const FlashInferDecode& a, cudaStream_t stream);
bool launch_decode_e5m2(const FlashInferDecode& a, cudaStream_t stream);

}  // namespace octet::cuda_kernels::flashinfer_detail

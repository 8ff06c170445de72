// Internal to kernels/cuda/flashinfer/prefill*.cu: one instantiation of FlashInfer's batch
// prefill (attention/prefill.cuh of FlashInfer 0.7.4) through its own dispatch
// (BatchPrefillWithPagedKVCacheDispatched: the shared-memory-sized KV tile), causal, sliding
// window (DefaultAttention; window_left -1 sees everything), unsplit (no tmp buffers), no lse.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/variants.cuh>

#include <exception>

#include "kernels/common/check.h"
#include "kernels/cuda/flashinfer_prefill.h"

namespace octet::cuda_kernels::flashinfer_detail {

template <uint32_t kHeadDim, typename Q, typename KV>
void launch_prefill_items(const FlashInferPrefill& a, cudaStream_t stream) {
  using Params = flashinfer::BatchPrefillPagedParams<Q, KV, Q, int32_t>;
  using Variant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/true,
                                               /*soft_cap=*/false, /*alibi=*/false>;
  Params p;
  p.q = static_cast<Q*>(a.q16);
  p.paged_kv = flashinfer::paged_kv_t<KV, int32_t>(
      static_cast<uint32_t>(a.num_kv_heads), static_cast<uint32_t>(a.block_size), kHeadDim,
      static_cast<uint32_t>(a.num_requests), flashinfer::QKVLayout::kNHD,
      static_cast<KV*>(const_cast<void*>(a.k)), static_cast<KV*>(const_cast<void*>(a.v)),
      const_cast<int32_t*>(a.kv_indices), const_cast<int32_t*>(a.kv_indptr),
      const_cast<int32_t*>(a.kv_last_page_len));
  p.q_indptr = const_cast<int32_t*>(a.qo_indptr);
  p.o_indptr = const_cast<int32_t*>(a.qo_indptr);
  p.o = static_cast<Q*>(a.o16);
  p.lse = nullptr;
  p.group_size = flashinfer::uint_fastdiv(static_cast<uint32_t>(a.num_heads / a.num_kv_heads));
  p.num_qo_heads = static_cast<uint32_t>(a.num_heads);
  p.q_stride_n = static_cast<int32_t>(a.num_heads * kHeadDim);
  p.q_stride_h = static_cast<int32_t>(kHeadDim);
  p.window_left = static_cast<int32_t>(a.window_left);
  p.sm_scale = a.softmax_scale;
  p.rope_rcp_scale = 1.0f;
  p.rope_rcp_theta = 1.0f;
  p.request_indices = const_cast<int32_t*>(a.request_indices);
  p.qo_tile_indices = const_cast<int32_t*>(a.qo_tile_indices);
  p.kv_tile_indices = const_cast<int32_t*>(a.kv_tile_indices);
  p.kv_chunk_size_ptr = const_cast<int32_t*>(a.kv_chunk_tokens);
  p.block_valid_mask = nullptr;
  p.max_total_num_rows = static_cast<uint32_t>(a.rows);
  p.total_num_rows = nullptr;
  p.padded_batch_size = static_cast<uint32_t>(a.num_items);
  p.partition_kv = false;
  cudaError_t err = cudaSuccess;
  try {
    err = flashinfer::BatchPrefillWithPagedKVCacheDispatched<
        /*SAME_KV_STRIDES=*/true, static_cast<uint32_t>(kFlashInferPrefillTileQ), kHeadDim,
        kHeadDim, flashinfer::PosEncodingMode::kNone, /*USE_FP16_QK_REDUCTION=*/false,
        flashinfer::MaskMode::kCausal, /*USE_TOKEN_HEAD_SF=*/false, Variant, Params>(
        p, /*tmp_v=*/nullptr, /*tmp_s=*/nullptr, /*enable_pdl=*/false, stream);
  } catch (const std::exception& e) {
    OCTET_CHECK(false, "flashinfer prefill: ", e.what());
  }
  OCTET_CHECK(err == cudaSuccess, "flashinfer prefill: ", cudaGetErrorString(err));
}

template <typename Q, typename KV>
bool launch_prefill_any(const FlashInferPrefill& a, cudaStream_t stream) {
  if (a.head_dim == 64) return launch_prefill_items<64, Q, KV>(a, stream), true;
  if (a.head_dim == 128) return launch_prefill_items<128, Q, KV>(a, stream), true;
  return false;
}

bool launch_prefill_bf16(const FlashInferPrefill& a, cudaStream_t stream);
bool launch_prefill_f16(const FlashInferPrefill& a, cudaStream_t stream);
bool launch_prefill_e4m3(const FlashInferPrefill& a, cudaStream_t stream);
bool launch_prefill_e5m2(const FlashInferPrefill& a, cudaStream_t stream);

}  // namespace octet::cuda_kernels::flashinfer_detail

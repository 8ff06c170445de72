// CudaBackend (cuda_backend_impl.h): the element-wise, RoPE, KV-cache, attention and sampling
// ops, each queued on the backend's stream as the kernels of this folder.
#include <cuda_runtime_api.h>

#include <cstring>

#include "kernels/common/check.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/hadamard.h"
#include "kernels/cuda/sampling.h"

namespace octet {

void CudaBackend::embedding(const TensorRef& table, const int32_t* token_ids, int64_t n,
                            float* out) {
  ck::embedding(table, token_ids, n, out, stream_);
}

void CudaBackend::rms_norm(float* residual, const float* delta, const float* weight, float* out,
                           int64_t m, int64_t n, float eps) {
  ck::rms_norm(residual, delta, weight, out, m, n, eps, stream_);
}

void CudaBackend::rope(float* q, float* k, int64_t n, int64_t num_heads, int64_t num_kv_heads,
                       int64_t head_dim, int64_t rot_dim, const int64_t* positions,
                       const float* inv_freq, RopeLayout layout) {
  ck::rope(q, num_heads, k, num_kv_heads, n, head_dim, rot_dim, positions, inv_freq, layout,
           stream_);
}

void CudaBackend::rope_write_kv(float* q, float* k, const float* v, int64_t n, int64_t num_heads,
                                int64_t num_kv_heads, int64_t head_dim, int64_t rot_dim,
                                const int64_t* positions, const float* inv_freq, RopeLayout layout,
                                const KVCacheView& cache, const int64_t* slot_mapping) {
  OCTET_CHECK(cache.k_token_scale == nullptr && cache.v_token_scale == nullptr,
              "octet: CUDA paged KV: --kv-cache-dtype fp8_per_token_head is not implemented "
              "on CUDA");
  OCTET_CHECK(cache.num_kv_heads == num_kv_heads && cache.head_dim == head_dim,
              "rope_write_kv: k has ", num_kv_heads, " x ", head_dim, ", the cache ",
              cache.num_kv_heads, " x ", cache.head_dim);
  ck::RopeWriteKv a;
  a.q = q;
  a.q_heads = num_heads;
  a.k = k;
  a.v = v;
  a.n = n;
  a.rot_dim = rot_dim;
  a.positions = positions;
  a.inv_freq = inv_freq;
  a.layout = layout;
  a.slots = slot_mapping;
  ck::rope_write_kv(a, cache, stream_);
}

void CudaBackend::hadamard_rotate(float* x, int64_t rows, int64_t head_dim) {
  ck::hadamard_rotate(x, rows, head_dim, stream_);
}

void CudaBackend::rms_norm_quant_fp8(float* residual, const float* delta, const float* weight,
                                     float* out, int64_t m, int64_t n, float eps, uint8_t* q,
                                     float* scale) {
  ck::rms_norm_quant_fp8(residual, delta, weight, out, m, n, eps, q, scale, stream_);
}

void CudaBackend::silu_mul_quant_fp8(const float* gate, const float* up, float* out, int64_t m,
                                     int64_t n, uint8_t* q, float* scale) {
  ck::silu_mul_quant_fp8(gate, up, out, m, n, q, scale, stream_);
}

void CudaBackend::silu_mul(const float* gate, const float* up, float* out, int64_t m, int64_t n) {
  ck::silu_mul(gate, up, out, m, n, stream_);
}

void CudaBackend::gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t m,
                                int64_t n) {
  ck::gelu_tanh_mul(gate, up, out, m, n, stream_);
}

void CudaBackend::row_amax(const float* x, int64_t m, int64_t k, float* amax) {
  ck::row_amax(x, m, k, amax, stream_);
}

void CudaBackend::f32_to_bf16(const float* x, int64_t count, uint16_t* out) {
  ck::f32_to_bf16(x, out, count, stream_);
}

void CudaBackend::bf16_to_f32(const uint16_t* x, int64_t count, float* out) {
  ck::bf16_to_f32(x, out, count, stream_);
}

void CudaBackend::quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const float* amax,
                                       uint8_t* q, float* scale) {
  ck::quantize_fp8_dynamic(x, m, k, amax, q, scale, stream_);
}

void CudaBackend::quantize_fp8_static(const float* x, int64_t m, int64_t k, float scale,
                                      uint8_t* q) {
  OCTET_CHECK(scale > 0.0f && scale <= 3.4028235e38f, "quantize_fp8_static: scale ", scale,
              " must be > 0 and finite");
  ck::quantize_fp8_static(x, m, k, 1.0f / scale, q, stream_);  // vLLM: x * (1 / s)
}

void CudaBackend::write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                                 const int64_t* slot_mapping, int64_t n) {
  OCTET_CHECK(cache.k_token_scale == nullptr && cache.v_token_scale == nullptr,
              "octet: CUDA paged KV: --kv-cache-dtype fp8_per_token_head is not implemented "
              "on CUDA");
  ck::write_kv_cache(cache, k, v, slot_mapping, n, stream_);
}

void CudaBackend::paged_attention(const KVCacheView& cache, const float* q,
                                  const PagedAttentionBatch& batch, int64_t num_heads,
                                  int64_t sliding_window, float softmax_scale, float* out) {
  OCTET_CHECK(batch.num_seqs >= 0, "paged_attention: num_seqs ", batch.num_seqs);
  OCTET_CHECK(cache.k_token_scale == nullptr && cache.v_token_scale == nullptr,
              "octet: CUDA paged KV: --kv-cache-dtype fp8_per_token_head is not implemented "
              "on CUDA");
  if (batch.num_seqs == 0) return;
  if (capture_key_ >= 0) {  // recorded with a plan prepare_replay writes each step
    attention_->capture(cache, q, batch, num_heads, sliding_window, softmax_scale, out, stream_);
    return;
  }
  if (batch.host_query_start_loc != nullptr && batch.host_seq_lens != nullptr) {
    // The caller's host copies: no read-back, nothing waits for the device.
    attention_->run(cache, q, batch, batch.host_query_start_loc, batch.host_seq_lens, num_heads,
                    sliding_window, softmax_scale, out, stream_);
    return;
  }
  // The plan needs the query counts and lengths on the host: one small read-back.
  const size_t n = static_cast<size_t>(batch.num_seqs);
  host_batch_.resize(2 * n + 1);
  OCTET_CHECK((2 * n + 1) * sizeof(int64_t) <= kStagingBytes, "paged_attention: ", n, " sequences");
  auto* staged = static_cast<int64_t*>(staging_);
  OCTET_CUDA_CHECK(cudaMemcpyAsync(staged, batch.query_start_loc, (n + 1) * sizeof(int64_t),
                                   cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(staged + n + 1, batch.seq_lens, n * sizeof(int64_t),
                                   cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::memcpy(host_batch_.data(), staged, (2 * n + 1) * sizeof(int64_t));
  attention_->run(cache, q, batch, host_batch_.data(), host_batch_.data() + n + 1, num_heads,
                  sliding_window, softmax_scale, out, stream_);
}

void CudaBackend::argmax_rows(const float* x, int64_t rows, int64_t width, int32_t* ids) {
  ck::argmax_rows(x, rows, width, ids, stream_);
}

void CudaBackend::sample_rows(float* x, int64_t rows, int64_t width, const SampleRowParams* params,
                              LogitEdit* edits, int32_t* ids) {
  ck::sample_rows(x, rows, width, params, edits, ids, stream_);
}

void CudaBackend::gather_rows(const float* x, int64_t width, const int64_t* rows, int64_t num_rows,
                              float* out) {
  ck::gather_rows(x, width, rows, num_rows, out, stream_);
}

}  // namespace octet

// Launchers of the row-wise and element-wise kernels of the CUDA backend (elementwise.cu). Every
// pointer is device memory, shapes and semantics are those of the Backend op of the same name
// (kernels/backend.h); each call queues its kernel on `stream` and returns. Out-of-range token
// or row ids trap the kernel (a broken invariant: the next synchronisation aborts).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/views.h"

namespace octet::cuda_kernels {

void embedding(const TensorRef& table, const int32_t* token_ids, int64_t n, float* out,
               cudaStream_t stream);
void rms_norm(float* residual, const float* delta, const float* weight, float* out, int64_t m,
              int64_t n, float eps, cudaStream_t stream);
/// RoPE of q [n, q_heads, head_dim] and k [n, k_heads, head_dim] (null: q only), one kernel.
void rope(float* q, int64_t q_heads, float* k, int64_t k_heads, int64_t n, int64_t head_dim,
          int64_t rot_dim, const int64_t* positions, const float* inv_freq, RopeLayout layout,
          cudaStream_t stream);
/// rms_norm then quantize_fp8_dynamic of out (null amax) in one kernel, the same bits.
void rms_norm_quant_fp8(float* residual, const float* delta, const float* weight, float* out,
                        int64_t m, int64_t n, float eps, uint8_t* q, float* scale,
                        cudaStream_t stream);
/// w8a8_scale of a GEMM's sums y [m, n] in place, then rms_norm(residual, y, weight, out) and,
/// with q non-null, quantize_fp8_dynamic of out: one kernel, the same bits. a_scale may be
/// `scale`.
void w8a8_add_rms_norm(float* y, const float* a_scale, bool a_per_row, const float* w_scale,
                       bool w_per_row, const float* bias, float* residual, const float* weight,
                       float* out, int64_t m, int64_t n, float eps, uint8_t* q, float* scale,
                       cudaStream_t stream);
/// A stacked gate/up GEMM's sums acc [m, 2f] (per-row weight scales w_scale [2f], bias [2f] or
/// null): w8a8_scale_split's gate and up, then silu_mul_quant_fp8 into out [m, f], q [m, f],
/// scale [m], in one kernel: the same bits. a_scale may be `scale`.
void w8a8_silu_quant(const float* acc, int64_t m, int64_t f, const float* a_scale,
                     bool a_per_row, const float* w_scale, const float* bias, float* out,
                     uint8_t* q, float* scale, cudaStream_t stream);
/// silu_mul then quantize_fp8_dynamic of out (null amax) in one kernel, the same bits.
void silu_mul_quant_fp8(const float* gate, const float* up, float* out, int64_t m, int64_t n,
                        uint8_t* q, float* scale, cudaStream_t stream);
void silu_mul(const float* gate, const float* up, float* out, int64_t m, int64_t n,
              cudaStream_t stream);
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t m, int64_t n,
                   cudaStream_t stream);
void scale(float* x, int64_t count, float s, cudaStream_t stream);
void row_amax(const float* x, int64_t m, int64_t k, float* amax, cudaStream_t stream);
void quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const float* amax, uint8_t* q,
                          float* scale, cudaStream_t stream);
/// inv_scale: 1 / scale, computed by the caller in FP32.
void quantize_fp8_static(const float* x, int64_t m, int64_t k, float inv_scale, uint8_t* q,
                         cudaStream_t stream);
void gather_rows(const float* x, int64_t width, const int64_t* rows, int64_t num_rows,
                 float* out, cudaStream_t stream);
/// Backend::argmax_rows: per row the first index of its max, -1 when a value is not finite.
void argmax_rows(const float* x, int64_t rows, int64_t width, int32_t* ids, cudaStream_t stream);

/// The W8A8 epilogue (backend.h linear_w8a8_combine): y[i, j] = w8a8_epilogue(((acc[0,i,j] +
/// acc[1,i,j]) + ...), a_scale[i or 0], w_scale[j or 0], bias[j] if any). acc: [groups, m, n]
/// with group g at acc + g * group_stride (elements, >= m * n).
void w8a8_combine(const float* acc, int64_t groups, int64_t group_stride, const float* a_scale,
                  bool a_per_row,
                  const float* w_scale, bool w_per_row, const float* bias, int64_t m, int64_t n,
                  float* y, cudaStream_t stream);
/// The W8A8 epilogue in place over one GEMM's sums: y[i, j] = w8a8_epilogue(y[i, j], a_scale[i
/// or 0], w_scale[j or 0], bias[j] if any), y: [m, n]; the bits of w8a8_combine with one group.
void w8a8_scale(float* y, const float* a_scale, bool a_per_row, const float* w_scale,
                bool w_per_row, const float* bias, int64_t m, int64_t n, cudaStream_t stream);
/// The outputs of a stacked GEMM (merged projections): segment g, columns [begin[g],
/// begin[g + 1]) of the [m, n] sums, is output y[g] [m, begin[g + 1] - begin[g]].
struct SplitOutputs {
  static constexpr int kMax = 4;
  int count = 0;
  int64_t begin[kMax + 1] = {};
  float* y[kMax] = {};
};
/// The W8A8 epilogue of a stacked GEMM's sums acc [m, n] (per-row weight scales w_scale [n],
/// bias [n] or null) written to each segment's own output: the bits of w8a8_scale on each.
void w8a8_scale_split(const float* acc, int64_t m, int64_t n, const float* a_scale,
                      bool a_per_row, const float* w_scale, const float* bias,
                      const SplitOutputs& out, cudaStream_t stream);
/// y[i, j] += bias[j] (one FP32 add), y: [m, n].
void add_bias(float* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream);
/// FP32 -> BF16 bits, round to nearest even (NaN stays NaN), count values.
void f32_to_bf16(const float* src, uint16_t* dst, int64_t count, cudaStream_t stream);
/// BF16 bits -> FP32, exactly, count values.
void bf16_to_f32(const uint16_t* src, float* dst, int64_t count, cudaStream_t stream);
/// E4M3 codes -> BF16 bits, exactly (every E4M3 value is a BF16 value): the sm_80 W8A16 path.
/// src rows of `cols` codes at stride src_ld, dst rows of `cols` at stride dst_ld, `rows` rows.
void e4m3_to_bf16(const uint8_t* src, int64_t src_ld, uint16_t* dst, int64_t dst_ld,
                  int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace octet::cuda_kernels

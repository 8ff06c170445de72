// Row-wise and element-wise kernels of the CUDA backend (elementwise.h). Row kernels run one
// block of kRowThreads per row (a row's reduction order depends on its length only); element
// kernels use grid-stride loops over 64-bit indices. The scalar math is device_math.h's.
#include "kernels/cuda/elementwise.h"

#include <math.h>

#include <algorithm>

#include "kernels/common/check.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/rope.cuh"

namespace octet::cuda_kernels {

namespace cm = octet::cuda_math;

namespace {

constexpr int kRowThreads = 256;
constexpr int kElemThreads = 256;
constexpr int64_t kMaxElemBlocks = 8192;

unsigned elem_blocks(int64_t total) {
  const int64_t b = (total + kElemThreads - 1) / kElemThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(b, kMaxElemBlocks)));
}

// A grid may have at most 2^31 - 1 blocks in x; rows beyond that are a caller's bug.
unsigned row_blocks(int64_t m) {
  OCTET_CHECK(m > 0 && m < (int64_t{1} << 31), "row count ", m);
  return static_cast<unsigned>(m);
}

__device__ __forceinline__ int64_t grid_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// 1 / sqrt(ss / n + eps), RMSNorm's factor from a row's sum of squares.
__device__ __forceinline__ float inv_rms(float ss, int64_t n, float eps) {
  return cm::div_rn(1.0f, sqrtf(cm::add_rn(cm::div_rn(ss, static_cast<float>(n)), eps)));
}

// The end of a fused row kernel: from a (this thread's max |o[j]|) the row's dynamic scale
// (*scale, thread 0) and codes q[j] = fp8(o[j] / s), as quantize_dynamic_kernel. Every thread
// of the block calls it; each quantizes the o[j] it wrote.
__device__ __forceinline__ void quantize_row(const float* o, int64_t n, float a, float* shared,
                                             uint8_t* q, float* scale) {
  a = block_reduce<true>(a, shared);
  const float s = cm::dynamic_scale(a);
  if (threadIdx.x == 0) *scale = s;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) q[j] = cm::quantize_dynamic(o[j], s);
}

// The end of an RMSNorm row kernel: from ss (this thread's sum of squares of the residual row
// r) o = r * inv_rms * weight and, with q, the row's per-token codes (quantize_row). Every
// thread of the block calls it.
__device__ __forceinline__ void norm_row(const float* r, float ss, int64_t n, float eps,
                                         const float* __restrict__ weight, float* o,
                                         float* shared, uint8_t* q, float* scale, int64_t row) {
  ss = block_reduce<false>(ss, shared);
  const float inv = inv_rms(ss, n, eps);
  float a = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    o[j] = cm::mul_rn(cm::mul_rn(r[j], inv), weight[j]);
    a = fmaxf(a, fabsf(o[j]));
  }
  if (q != nullptr) quantize_row(o, n, a, shared, q + row * n, scale + row);  // block-uniform
}

// out: [n, hidden]; table: [rows, hidden] F32 (kBf16 false) or BF16 bits. One block per token.
template <bool kBf16>
__global__ void embedding_kernel(const void* __restrict__ table, int64_t rows, int64_t hidden,
                                 const int32_t* __restrict__ ids, float* __restrict__ out) {
  const int64_t i = blockIdx.x;
  const int64_t t = ids[i];
  if (t < 0 || t >= rows) {
    printf("octet cuda embedding: token id %lld outside [0, %lld)\n", static_cast<long long>(t),
           static_cast<long long>(rows));
    __trap();
  }
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    out[i * hidden + j] =
        kBf16 ? cm::bf16_to_float(static_cast<const uint16_t*>(table)[t * hidden + j])
              : static_cast<const float*>(table)[t * hidden + j];
  }
}

// One block per row: residual += delta (one add), then out = residual * inv_rms * weight and,
// with q, the row's dynamic per-token E4M3 codes (quantize_dynamic_kernel's arithmetic).
__global__ void rms_norm_kernel(float* __restrict__ residual, const float* __restrict__ delta,
                                const float* __restrict__ weight, float* __restrict__ out,
                                int64_t n, float eps, uint8_t* __restrict__ q,
                                float* __restrict__ scale) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  float* r = residual + row * n;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float x = r[j];
    if (delta != nullptr) {
      x = cm::add_rn(x, delta[row * n + j]);
      r[j] = x;  // each element is read and written by this thread only
    }
    ss = __fmaf_rn(x, x, ss);
  }
  norm_row(r, ss, n, eps, weight, out + row * n, shared, q, scale, row);
}

// One block per row of a GEMM's sums y: the W8A8 epilogue in place (w8a8_scale_kernel's
// arithmetic), residual += y, out = rms(residual) * weight (rms_norm_kernel's), then, with q,
// the per-token codes (quantize_dynamic_kernel's). a_scale may be `scale` (q's): each row reads
// its entry before the first block_reduce and writes it after.
__global__ void w8a8_add_rms_norm_kernel(float* __restrict__ y, const float* a_scale,
                                         bool a_per_row, const float* __restrict__ w_scale,
                                         bool w_per_row, const float* __restrict__ bias,
                                         float* __restrict__ residual,
                                         const float* __restrict__ weight,
                                         float* __restrict__ out, int64_t n, float eps,
                                         uint8_t* q, float* scale) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float sa = a_scale[a_per_row ? row : 0];
  float* r = residual + row * n;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float v = cm::w8a8_epilogue(y[row * n + j], sa, w_scale[w_per_row ? j : 0],
                                      bias != nullptr, bias != nullptr ? bias[j] : 0.0f);
    y[row * n + j] = v;
    const float x = cm::add_rn(r[j], v);
    r[j] = x;
    ss = __fmaf_rn(x, x, ss);
  }
  norm_row(r, ss, n, eps, weight, out + row * n, shared, q, scale, row);
}

// One block per row of a stacked gate/up GEMM's sums acc [m, 2f]: both epilogues
// (w8a8_scale_split's arithmetic), silu(gate) * up (silu_mul_kernel's) into out [m, f], then
// the row's per-token codes. a_scale may be `scale` (read before the reduction, written after).
__global__ void w8a8_silu_quant_kernel(const float* __restrict__ acc, int64_t f,
                                       const float* a_scale, bool a_per_row,
                                       const float* __restrict__ w_scale,
                                       const float* __restrict__ bias, float* __restrict__ out,
                                       uint8_t* __restrict__ q, float* scale) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float sa = a_scale[a_per_row ? row : 0];
  const float* r = acc + row * 2 * f;
  float* o = out + row * f;
  float a = 0.0f;
  for (int64_t j = threadIdx.x; j < f; j += blockDim.x) {
    const bool b = bias != nullptr;
    const float g = cm::w8a8_epilogue(r[j], sa, w_scale[j], b, b ? bias[j] : 0.0f);
    const float u = cm::w8a8_epilogue(r[f + j], sa, w_scale[f + j], b, b ? bias[f + j] : 0.0f);
    const float silu = cm::div_rn(g, cm::add_rn(1.0f, expf(-g)));
    o[j] = cm::mul_rn(silu, u);
    a = fmaxf(a, fabsf(o[j]));
  }
  quantize_row(o, f, a, shared, q + row * f, scale + row);
}

// silu_mul_kernel's values for one row per block, then its per-token E4M3 codes. out may alias
// gate (each element is read, then written, by one thread).
__global__ void silu_mul_quant_kernel(const float* gate, const float* __restrict__ up,
                                      float* out, int64_t n, uint8_t* __restrict__ q,
                                      float* __restrict__ scale) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  float a = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float g = gate[row * n + j];
    const float silu = cm::div_rn(g, cm::add_rn(1.0f, expf(-g)));
    const float v = cm::mul_rn(silu, up[row * n + j]);
    out[row * n + j] = v;
    a = fmaxf(a, fabsf(v));
  }
  quantize_row(out + row * n, n, a, shared, q + row * n, scale + row);
}

// One thread per (token, head, rotated pair). x: [n, heads * head_dim].
// q's rows [n, q_heads] then k's [n, k_heads] (k_heads 0: none) in one grid; each pair's
// arithmetic does not depend on which tensor it is in.
__global__ void rope_kernel(float* __restrict__ q, int64_t q_heads, float* __restrict__ k,
                            int64_t k_heads, int64_t n, int64_t head_dim, int64_t half,
                            const int64_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, bool adjacent) {
  const int64_t heads = q_heads + k_heads, total = n * heads * half;
  for (int64_t idx = grid_start(); idx < total; idx += grid_stride()) {
    const int64_t i = idx % half;
    const int64_t th = idx / half;  // token * (q_heads + k_heads) + head
    const int64_t t = th / heads, h = th % heads;
    float* xh = h < q_heads ? q + (t * q_heads + h) * head_dim
                            : k + (t * k_heads + h - q_heads) * head_dim;
    int64_t a, b;
    rope_rotate_pair(xh, i, half, adjacent, static_cast<float>(positions[t]), inv_freq[i], a, b);
  }
}

// out may alias gate: each element is read before it is written, by the same thread.
__global__ void silu_mul_kernel(const float* gate, const float* __restrict__ up, float* out,
                                int64_t total) {
  for (int64_t i = grid_start(); i < total; i += grid_stride()) {
    const float g = gate[i];
    const float silu = cm::div_rn(g, cm::add_rn(1.0f, expf(-g)));
    out[i] = cm::mul_rn(silu, up[i]);
  }
}

// out may alias gate, as silu_mul_kernel. tanhf: CUDA's, within 2 ulp.
__global__ void gelu_tanh_mul_kernel(const float* gate, const float* __restrict__ up, float* out,
                                     int64_t total) {
  for (int64_t i = grid_start(); i < total; i += grid_stride()) {
    const float x = gate[i];
    const float inner = cm::mul_rn(0.7978845608028654f,
                                   cm::add_rn(x, cm::mul_rn(0.044715f, cm::mul_rn(x, cm::mul_rn(x, x)))));
    const float g = cm::mul_rn(cm::mul_rn(0.5f, x), cm::add_rn(1.0f, tanhf(inner)));
    out[i] = cm::mul_rn(g, up[i]);
  }
}

__global__ void scale_kernel(float* x, int64_t total, float s) {
  for (int64_t i = grid_start(); i < total; i += grid_stride()) x[i] = cm::mul_rn(x[i], s);
}

__global__ void row_amax_kernel(const float* __restrict__ x, int64_t k, float* __restrict__ amax) {
  __shared__ float shared[32];
  const float* r = x + static_cast<int64_t>(blockIdx.x) * k;
  float a = 0.0f;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) a = fmaxf(a, fabsf(r[j]));
  a = block_reduce<true>(a, shared);
  if (threadIdx.x == 0) amax[blockIdx.x] = a;
}

// One block per row: amax (given, or the row's own, NaN ignored), scale, codes.
__global__ void quantize_dynamic_kernel(const float* __restrict__ x, int64_t k,
                                        const float* __restrict__ given_amax,
                                        uint8_t* __restrict__ q, float* __restrict__ scale) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* r = x + row * k;
  float a;
  if (given_amax != nullptr) {
    a = given_amax[row];
  } else {
    a = 0.0f;
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) a = fmaxf(a, fabsf(r[j]));
    a = block_reduce<true>(a, shared);
  }
  const float s = cm::dynamic_scale(a);
  if (threadIdx.x == 0) scale[row] = s;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) q[row * k + j] = cm::quantize_dynamic(r[j], s);
}

// The better of two (value, index) candidates: the larger value, the lower index on ties
// (-0 == +0 ties too, as the host's ==). Index -1: no candidate.
__device__ __forceinline__ void argmax_pick(float& v, int32_t& i, float v2, int32_t i2) {
  if (i2 >= 0 && (i < 0 || v2 > v || (v2 == v && i2 < i))) {
    v = v2;
    i = i2;
  }
}

// One block per row: the first index of the row's max, or -1 when a value is not finite.
__global__ void argmax_rows_kernel(const float* __restrict__ x, int64_t width,
                                   int32_t* __restrict__ ids) {
  __shared__ float shared_v[32];
  __shared__ int32_t shared_i[32];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * width;
  float v = 0.0f;
  int32_t i = -1;
  int bad = 0;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    const float e = row[j];
    bad |= !isfinite(e);
    if (i < 0 || e > v) {  // j grows: the first of equal values stays
      v = e;
      i = static_cast<int32_t>(j);
    }
  }
  bad = __syncthreads_or(bad);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    argmax_pick(v, i, __shfl_xor_sync(0xFFFFFFFFu, v, offset),
                __shfl_xor_sync(0xFFFFFFFFu, i, offset));
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) {
    shared_v[warp] = v;
    shared_i[warp] = i;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x / kWarpSize); ++w)
    argmax_pick(v, i, shared_v[w], shared_i[w]);
  ids[blockIdx.x] = bad || width == 0 ? -1 : i;
}

__global__ void quantize_static_kernel(const float* __restrict__ x, int64_t total, float inv,
                                       uint8_t* __restrict__ q) {
  for (int64_t i = grid_start(); i < total; i += grid_stride()) q[i] = cm::quantize_static(x[i], inv);
}

// One block per output row.
__global__ void gather_rows_kernel(const float* __restrict__ x, int64_t width,
                                   const int64_t* __restrict__ rows, float* __restrict__ out) {
  const int64_t r = blockIdx.x;
  const int64_t src = rows[r];
  if (src < 0) {
    printf("octet cuda gather_rows: negative row %lld\n", static_cast<long long>(src));
    __trap();
  }
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) out[r * width + j] = x[src * width + j];
}

// Fused GEMM epilogue: one thread per output, part sums added in group order.
__global__ void w8a8_combine_kernel(const float* __restrict__ acc, int64_t groups,
                                    int64_t group_stride,
                                    const float* __restrict__ a_scale, bool a_per_row,
                                    const float* __restrict__ w_scale, bool w_per_row,
                                    const float* __restrict__ bias, int64_t m, int64_t n,
                                    float* __restrict__ y) {
  const int64_t total = m * n;
  for (int64_t idx = grid_start(); idx < total; idx += grid_stride()) {
    const int64_t i = idx / n, j = idx % n;
    float s = acc[idx];
    for (int64_t g = 1; g < groups; ++g) s = cm::add_rn(s, acc[g * group_stride + idx]);
    y[idx] = cm::w8a8_epilogue(s, a_scale[a_per_row ? i : 0], w_scale[w_per_row ? j : 0],
                               bias != nullptr, bias != nullptr ? bias[j] : 0.0f);
  }
}

__global__ void w8a8_scale_kernel(float* __restrict__ y, const float* __restrict__ a_scale,
                                  bool a_per_row, const float* __restrict__ w_scale,
                                  bool w_per_row, const float* __restrict__ bias, int64_t m,
                                  int64_t n) {
  const int64_t total = m * n;
  for (int64_t idx = grid_start(); idx < total; idx += grid_stride()) {
    const int64_t i = idx / n, j = idx % n;
    y[idx] = cm::w8a8_epilogue(y[idx], a_scale[a_per_row ? i : 0], w_scale[w_per_row ? j : 0],
                               bias != nullptr, bias != nullptr ? bias[j] : 0.0f);
  }
}

// Each output of the stacked GEMM to its weight's own output: column j of segment g (columns
// [begin[g], begin[g + 1])) goes to y[g][i, j - begin[g]].
__global__ void w8a8_scale_split_kernel(const float* __restrict__ acc, int64_t m, int64_t n,
                                        const float* __restrict__ a_scale, bool a_per_row,
                                        const float* __restrict__ w_scale,
                                        const float* __restrict__ bias, SplitOutputs out) {
  const int64_t total = m * n;
  for (int64_t idx = grid_start(); idx < total; idx += grid_stride()) {
    const int64_t i = idx / n, j = idx % n;
    int g = 0;
    while (g + 1 < out.count && j >= out.begin[g + 1]) ++g;
    const int64_t width = out.begin[g + 1] - out.begin[g];
    out.y[g][i * width + j - out.begin[g]] =
        cm::w8a8_epilogue(acc[idx], a_scale[a_per_row ? i : 0], w_scale[j], bias != nullptr,
                          bias != nullptr ? bias[j] : 0.0f);
  }
}

__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t m,
                                int64_t n) {
  const int64_t total = m * n;
  for (int64_t idx = grid_start(); idx < total; idx += grid_stride())
    y[idx] = cm::add_rn(y[idx], bias[idx % n]);
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ src, uint16_t* __restrict__ dst,
                                   int64_t total) {
  for (int64_t idx = grid_start(); idx < total; idx += grid_stride())
    dst[idx] = cm::bf16_from_float(src[idx]);
}

__global__ void bf16_to_f32_kernel(const uint16_t* __restrict__ src, float* __restrict__ dst,
                                   int64_t total) {
  for (int64_t idx = grid_start(); idx < total; idx += grid_stride())
    dst[idx] = cm::bf16_to_float(src[idx]);
}

__global__ void e4m3_to_bf16_kernel(const uint8_t* __restrict__ src, int64_t src_ld,
                                    uint16_t* __restrict__ dst, int64_t dst_ld, int64_t rows,
                                    int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t idx = grid_start(); idx < total; idx += grid_stride()) {
    const int64_t r = idx / cols, c = idx % cols;
    dst[r * dst_ld + c] = cm::bf16_from_float(cm::e4m3_to_float(src[r * src_ld + c]));
  }
}

}  // namespace

void embedding(const TensorRef& table, const int32_t* token_ids, int64_t n, float* out,
               cudaStream_t stream) {
  OCTET_CHECK(table.dtype == DType::F32 || table.dtype == DType::BF16,
              "cuda embedding: table dtype ", dtype_name(table.dtype));
  if (n == 0 || table.cols == 0) return;
  if (table.dtype == DType::F32) {
    embedding_kernel<false><<<row_blocks(n), kRowThreads, 0, stream>>>(
        table.data, table.rows, table.cols, token_ids, out);
  } else {
    embedding_kernel<true><<<row_blocks(n), kRowThreads, 0, stream>>>(
        table.data, table.rows, table.cols, token_ids, out);
  }
  OCTET_CUDA_CHECK_LAUNCH();
}

void rms_norm(float* residual, const float* delta, const float* weight, float* out, int64_t m,
              int64_t n, float eps, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  rms_norm_kernel<<<row_blocks(m), kRowThreads, 0, stream>>>(residual, delta, weight, out, n, eps,
                                                             nullptr, nullptr);
  OCTET_CUDA_CHECK_LAUNCH();
}

void rope(float* q, int64_t q_heads, float* k, int64_t k_heads, int64_t n, int64_t head_dim,
          int64_t rot_dim, const int64_t* positions, const float* inv_freq, RopeLayout layout,
          cudaStream_t stream) {
  OCTET_CHECK(rot_dim >= 0 && rot_dim <= head_dim && rot_dim % 2 == 0, "cuda rope: rot_dim ",
              rot_dim, " head_dim ", head_dim);
  if (k == nullptr) k_heads = 0;
  const int64_t half = rot_dim / 2, total = n * (q_heads + k_heads) * half;
  if (total == 0) return;
  rope_kernel<<<elem_blocks(total), kElemThreads, 0, stream>>>(
      q, q_heads, k, k_heads, n, head_dim, half, positions, inv_freq,
      layout == RopeLayout::AdjacentPairs);
  OCTET_CUDA_CHECK_LAUNCH();
}

void rms_norm_quant_fp8(float* residual, const float* delta, const float* weight, float* out,
                       int64_t m, int64_t n, float eps, uint8_t* q, float* scale,
                       cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  rms_norm_kernel<<<row_blocks(m), kRowThreads, 0, stream>>>(residual, delta, weight, out, n, eps,
                                                             q, scale);
  OCTET_CUDA_CHECK_LAUNCH();
}

void w8a8_add_rms_norm(float* y, const float* a_scale, bool a_per_row, const float* w_scale,
                       bool w_per_row, const float* bias, float* residual, const float* weight,
                       float* out, int64_t m, int64_t n, float eps, uint8_t* q, float* scale,
                       cudaStream_t stream) {
  if (m == 0) return;
  w8a8_add_rms_norm_kernel<<<row_blocks(m), kRowThreads, 0, stream>>>(
      y, a_scale, a_per_row, w_scale, w_per_row, bias, residual, weight, out, n, eps, q, scale);
  OCTET_CUDA_CHECK_LAUNCH();
}

void w8a8_silu_quant(const float* acc, int64_t m, int64_t f, const float* a_scale,
                     bool a_per_row, const float* w_scale, const float* bias, float* out,
                     uint8_t* q, float* scale, cudaStream_t stream) {
  if (m == 0 || f == 0) return;
  w8a8_silu_quant_kernel<<<row_blocks(m), kRowThreads, 0, stream>>>(acc, f, a_scale, a_per_row,
                                                                    w_scale, bias, out, q, scale);
  OCTET_CUDA_CHECK_LAUNCH();
}

void silu_mul_quant_fp8(const float* gate, const float* up, float* out, int64_t m, int64_t n,
                        uint8_t* q, float* scale, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  silu_mul_quant_kernel<<<row_blocks(m), kRowThreads, 0, stream>>>(gate, up, out, n, q, scale);
  OCTET_CUDA_CHECK_LAUNCH();
}

void silu_mul(const float* gate, const float* up, float* out, int64_t m, int64_t n,
              cudaStream_t stream) {
  const int64_t total = m * n;
  if (total == 0) return;
  silu_mul_kernel<<<elem_blocks(total), kElemThreads, 0, stream>>>(gate, up, out, total);
  OCTET_CUDA_CHECK_LAUNCH();
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t m, int64_t n,
                   cudaStream_t stream) {
  const int64_t total = m * n;
  if (total == 0) return;
  gelu_tanh_mul_kernel<<<elem_blocks(total), kElemThreads, 0, stream>>>(gate, up, out, total);
  OCTET_CUDA_CHECK_LAUNCH();
}

void scale(float* x, int64_t count, float s, cudaStream_t stream) {
  if (count == 0) return;
  scale_kernel<<<elem_blocks(count), kElemThreads, 0, stream>>>(x, count, s);
  OCTET_CUDA_CHECK_LAUNCH();
}

void row_amax(const float* x, int64_t m, int64_t k, float* amax, cudaStream_t stream) {
  if (m == 0) return;
  row_amax_kernel<<<row_blocks(m), kRowThreads, 0, stream>>>(x, k, amax);
  OCTET_CUDA_CHECK_LAUNCH();
}

void quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const float* amax, uint8_t* q,
                          float* scale, cudaStream_t stream) {
  if (m == 0) return;
  quantize_dynamic_kernel<<<row_blocks(m), kRowThreads, 0, stream>>>(x, k, amax, q, scale);
  OCTET_CUDA_CHECK_LAUNCH();
}

void argmax_rows(const float* x, int64_t rows, int64_t width, int32_t* ids,
                 cudaStream_t stream) {
  if (rows == 0) return;
  argmax_rows_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(x, width, ids);
  OCTET_CUDA_CHECK_LAUNCH();
}

void quantize_fp8_static(const float* x, int64_t m, int64_t k, float inv_scale, uint8_t* q,
                         cudaStream_t stream) {
  const int64_t total = m * k;
  if (total == 0) return;
  quantize_static_kernel<<<elem_blocks(total), kElemThreads, 0, stream>>>(x, total, inv_scale, q);
  OCTET_CUDA_CHECK_LAUNCH();
}

void gather_rows(const float* x, int64_t width, const int64_t* rows, int64_t num_rows,
                 float* out, cudaStream_t stream) {
  if (num_rows == 0 || width == 0) return;
  gather_rows_kernel<<<row_blocks(num_rows), kRowThreads, 0, stream>>>(x, width, rows, out);
  OCTET_CUDA_CHECK_LAUNCH();
}

void w8a8_combine(const float* acc, int64_t groups, int64_t group_stride, const float* a_scale,
                  bool a_per_row,
                  const float* w_scale, bool w_per_row, const float* bias, int64_t m, int64_t n,
                  float* y, cudaStream_t stream) {
  const int64_t total = m * n;
  OCTET_CHECK(groups >= 1 && group_stride >= total, "cuda w8a8_combine: groups ", groups,
              " stride ", group_stride);
  if (total == 0) return;
  w8a8_combine_kernel<<<elem_blocks(total), kElemThreads, 0, stream>>>(
      acc, groups, group_stride, a_scale, a_per_row, w_scale, w_per_row, bias, m, n, y);
  OCTET_CUDA_CHECK_LAUNCH();
}

void w8a8_scale(float* y, const float* a_scale, bool a_per_row, const float* w_scale,
                bool w_per_row, const float* bias, int64_t m, int64_t n, cudaStream_t stream) {
  const int64_t total = m * n;
  if (total == 0) return;
  w8a8_scale_kernel<<<elem_blocks(total), kElemThreads, 0, stream>>>(y, a_scale, a_per_row,
                                                                     w_scale, w_per_row, bias,
                                                                     m, n);
  OCTET_CUDA_CHECK_LAUNCH();
}

void w8a8_scale_split(const float* acc, int64_t m, int64_t n, const float* a_scale,
                      bool a_per_row, const float* w_scale, const float* bias,
                      const SplitOutputs& out, cudaStream_t stream) {
  OCTET_CHECK(out.count >= 1 && out.count <= SplitOutputs::kMax && out.begin[0] == 0 &&
                  out.begin[out.count] == n,
              "cuda w8a8_scale_split: ", out.count, " outputs over ", n, " columns");
  const int64_t total = m * n;
  if (total == 0) return;
  w8a8_scale_split_kernel<<<elem_blocks(total), kElemThreads, 0, stream>>>(
      acc, m, n, a_scale, a_per_row, w_scale, bias, out);
  OCTET_CUDA_CHECK_LAUNCH();
}

void add_bias(float* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream) {
  const int64_t total = m * n;
  if (total == 0 || bias == nullptr) return;
  add_bias_kernel<<<elem_blocks(total), kElemThreads, 0, stream>>>(y, bias, m, n);
  OCTET_CUDA_CHECK_LAUNCH();
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  f32_to_bf16_kernel<<<elem_blocks(count), kElemThreads, 0, stream>>>(src, dst, count);
  OCTET_CUDA_CHECK_LAUNCH();
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  bf16_to_f32_kernel<<<elem_blocks(count), kElemThreads, 0, stream>>>(src, dst, count);
  OCTET_CUDA_CHECK_LAUNCH();
}

void e4m3_to_bf16(const uint8_t* src, int64_t src_ld, uint16_t* dst, int64_t dst_ld,
                  int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t total = rows * cols;
  if (total == 0) return;
  e4m3_to_bf16_kernel<<<elem_blocks(total), kElemThreads, 0, stream>>>(src, src_ld, dst, dst_ld,
                                                                      rows, cols);
  OCTET_CUDA_CHECK_LAUNCH();
}

}  // namespace octet::cuda_kernels

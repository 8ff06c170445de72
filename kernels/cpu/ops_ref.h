#pragma once
// Plain, readable FP32 reference ops for a Llama-style forward pass. Every faster kernel
// (AVX2/FP8 on the CPU, CUDA) is tested against these. Shapes are row-major; names follow HF.
// Threads: linear_ref splits output rows across OpenMP threads; each dot product is one
// `omp simd` reduction, so results are deterministic for a given build and thread count.
#include <cstdint>

#include "kernels/common/dtype.h"

namespace octet::ref {

/// y[n] = x[n] / sqrt(mean(x^2) + eps) * weight[n]   (RMSNorm, Zhang & Sennrich 2019)
/// x, y: [n] (may alias); weight: [n].
void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps);

/// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n] when bias != nullptr).
/// x: [m, k]; w: [n, k] row-major (PyTorch nn.Linear layout, [out, in]); y: [m, n].
void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
            int64_t k);

/// Rotate in place x: [num_heads, head_dim] at position `pos` with inv_freq: [rot_dim/2]
/// (angle_i = pos * inv_freq[i]); only the first rot_dim dims of each head rotate.
void rope(float* x, int64_t num_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
          const float* inv_freq, RopeLayout layout);

/// In place softmax over n values (max-subtracted, FP32).
void softmax(float* x, int64_t n);

/// out[n] = silu(gate[n]) * up[n], silu(x) = x / (1 + exp(-x))  (SwiGLU, Shazeer 2020).
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

/// out[n] = gelu_tanh(gate[n]) * up[n], gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x +
/// 0.044715 x^3))) (GeGLU; PyTorch's gelu(approximate="tanh")). out may alias gate or up.
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n);

/// Causal grouped-query attention for one query token over num_ctx cached tokens.
/// q: [num_heads, head_dim]; k, v: [num_ctx, num_kv_heads, head_dim] (token-major);
/// out: [num_heads, head_dim]. Query head h reads KV head h / (num_heads / num_kv_heads).
/// scores = q.k * scale, softmax over the num_ctx tokens, weighted sum of v, all FP32.
/// The caller passes exactly the tokens the query may see (causal mask = num_ctx = pos + 1).
void attention(const float* q, const float* k, const float* v, float* out, int64_t num_heads,
               int64_t num_kv_heads, int64_t head_dim, int64_t num_ctx, float scale);

}  // namespace octet::ref

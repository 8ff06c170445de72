#include "kernels/cpu/ops_ref.h"
#include "kernels/cpu/thread_team.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace octet::ref {

void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
  for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * weight[i];
}

void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
            int64_t k) {
  cpu::parallel_for(0, m * n, [&](int64_t lo, int64_t hi) {  // (i, j) pairs, row-major
    for (int64_t ij = lo; ij < hi; ++ij) {
      const int64_t i = ij / n, j = ij % n;
      const float* xr = x + i * k;
      const float* wr = w + j * k;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int64_t t = 0; t < k; ++t) acc += xr[t] * wr[t];
      y[i * n + j] = acc + (bias ? bias[j] : 0.0f);
    }
  }, m * n * k > 65536);
}

void rope(float* x, int64_t num_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
          const float* inv_freq, RopeLayout layout) {
  const int64_t half = rot_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      // float32 angle, as Hugging Face computes it (position * inv_freq).
      const float angle = static_cast<float>(pos) * inv_freq[i];
      const float c = std::cos(angle), s = std::sin(angle);
      const int64_t a = layout == RopeLayout::AdjacentPairs ? 2 * i : i;
      const int64_t b = layout == RopeLayout::AdjacentPairs ? 2 * i + 1 : i + half;
      const float x0 = xh[a], x1 = xh[b];
      xh[a] = x0 * c - x1 * s;
      xh[b] = x0 * s + x1 * c;
    }
  }
}

void softmax(float* x, int64_t n) {
  const float mx = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x))) * up[i];
  }
}

void attention(const float* q, const float* k, const float* v, float* out, int64_t num_heads,
               int64_t num_kv_heads, int64_t head_dim, int64_t num_ctx, float scale) {
  const int64_t group = num_heads / num_kv_heads;
  std::vector<float> scores(num_ctx);
  for (int64_t h = 0; h < num_heads; ++h) {
    const int64_t kvh = h / group;
    const float* qh = q + h * head_dim;
    for (int64_t t = 0; t < num_ctx; ++t) {
      const float* kt = k + (t * num_kv_heads + kvh) * head_dim;
      float dot = 0.0f;
      for (int64_t d = 0; d < head_dim; ++d) dot += qh[d] * kt[d];
      scores[t] = dot * scale;
    }
    softmax(scores.data(), num_ctx);
    float* oh = out + h * head_dim;
    std::fill(oh, oh + head_dim, 0.0f);
    for (int64_t t = 0; t < num_ctx; ++t) {
      const float* vt = v + (t * num_kv_heads + kvh) * head_dim;
      const float p = scores[t];
      for (int64_t d = 0; d < head_dim; ++d) oh[d] += p * vt[d];
    }
  }
}

}  // namespace octet::ref

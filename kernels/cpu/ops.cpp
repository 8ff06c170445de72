// Run-time choice between the AVX2 ops (ops_avx2.cpp) and the plain references (for linear: a
// batch-invariant scalar kernel), and the multi-row wrappers.
#include "kernels/cpu/ops.h"

#include <cstdint>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/thread_team.h"

namespace octet::cpu {

void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  if (fp8_avx2_available()) {
    avx2::rms_norm(x, weight, y, n, eps);
  } else {
    ref::rms_norm(x, weight, y, n, eps);
  }
}

void rms_norm_rows(const float* x, const float* weight, float* y, int64_t m, int64_t n,
                   float eps) {
  cpu::parallel_for_each(0, m, [&](int64_t i) {
    rms_norm(x + i * n, weight, y + i * n, n, eps);
  }, m * n >= 32768);
}

namespace scalar {

// Per (row, output): 8 partial sums (lane l takes t = l mod 8, as the AVX2 path's lanes), added
// in lane order, then + bias. The lanes are independent, so a compiler may vectorise them
// without changing a bit; nothing depends on m, the row's position or the thread count.
void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
            int64_t k) {
  if (m <= 0 || n <= 0) return;
  const int64_t k8 = k / 8 * 8;
  cpu::parallel_for_each(0, n, [&](int64_t j) {
    const float* wr = w + j * k;
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * k;
      float lane[8] = {};
      for (int64_t t = 0; t < k8; t += 8)
        for (int l = 0; l < 8; ++l) lane[l] += xr[t + l] * wr[t + l];
      for (int64_t t = k8; t < k; ++t) lane[t - k8] += xr[t] * wr[t];
      float acc = 0.0f;
      for (float v : lane) acc += v;
      y[i * n + j] = acc + (bias ? bias[j] : 0.0f);
    }
  }, m * n * k > 65536);
}

}  // namespace scalar

void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
            int64_t k) {
  if (fp8_avx2_available()) {
    avx2::linear(x, w, bias, y, m, n, k);
  } else {
    scalar::linear(x, w, bias, y, m, n, k);
  }
}

void rope(float* x, int64_t num_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
          const float* inv_freq, RopeLayout layout) {
  if (fp8_avx2_available()) {
    avx2::rope(x, num_heads, head_dim, rot_dim, pos, inv_freq, layout);
  } else {
    ref::rope(x, num_heads, head_dim, rot_dim, pos, inv_freq, layout);
  }
}

void rope_rows(float* x, int64_t num_tokens, int64_t row_stride, int64_t num_heads,
               int64_t head_dim, int64_t rot_dim, const int64_t* positions,
               const float* inv_freq, RopeLayout layout) {
  cpu::parallel_for_each(0, num_tokens, [&](int64_t t) {
    cpu::rope(x + t * row_stride, num_heads, head_dim, rot_dim, positions[t], inv_freq, layout);
  }, num_tokens * num_heads * head_dim >= 32768);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  if (!fp8_avx2_available()) {
    ref::silu_mul(gate, up, out, n);
    return;
  }
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  cpu::parallel_for_each(0, chunks, [&](int64_t c) {
    const int64_t i0 = c * kChunk, len = n - i0 < kChunk ? n - i0 : kChunk;
    avx2::silu_mul(gate + i0, up + i0, out + i0, len);
  }, chunks > 4);
}

}  // namespace octet::cpu

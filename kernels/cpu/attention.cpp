#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <omp.h>

#include "kernels/cpu/ops_ref.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define OCTET_ATTN_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace octet::cpu {

namespace {

#ifdef OCTET_ATTN_AVX2
OCTET_ATTN_AVX2 inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  const __m256 s8 = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float r = _mm_cvtss_f32(s);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

// out[d] += p * v[d]
OCTET_ATTN_AVX2 inline void axpy(float p, const float* v, float* out, int64_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(out + i)));
  for (; i < n; ++i) out[i] += p * v[i];
}

OCTET_ATTN_AVX2 void head(const float* qh, const float* k, const float* v, float* oh,
                          int64_t kvh, int64_t num_kv_heads, int64_t head_dim, int64_t num_ctx,
                          float scale, float* scores) {
  const int64_t stride = num_kv_heads * head_dim;
  float mx = -INFINITY;
  for (int64_t t = 0; t < num_ctx; ++t) {
    scores[t] = dot(qh, k + t * stride + kvh * head_dim, head_dim) * scale;
    mx = std::max(mx, scores[t]);
  }
  float sum = 0.0f;
  for (int64_t t = 0; t < num_ctx; ++t) {
    scores[t] = std::exp(scores[t] - mx);
    sum += scores[t];
  }
  const float inv = 1.0f / sum;
  std::fill(oh, oh + head_dim, 0.0f);
  for (int64_t t = 0; t < num_ctx; ++t)
    axpy(scores[t] * inv, v + t * stride + kvh * head_dim, oh, head_dim);
}
#endif

}  // namespace

void attention(const float* q, const float* k, const float* v, float* out, int64_t num_heads,
               int64_t num_kv_heads, int64_t head_dim, int64_t num_ctx, float scale) {
#ifdef OCTET_ATTN_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) {
    const int64_t group = num_heads / num_kv_heads;
    // Never nest: inside a caller's parallel region (prefill runs tokens in parallel) the heads
    // run on the calling thread; libgomp would otherwise start a fresh nested team per call.
#pragma omp parallel if (num_heads * num_ctx * head_dim >= 65536 && !omp_in_parallel())
    {
      std::vector<float> scores(static_cast<size_t>(num_ctx));
#pragma omp for schedule(static)
      for (int64_t h = 0; h < num_heads; ++h)
        head(q + h * head_dim, k, v, out + h * head_dim, h / group, num_kv_heads, head_dim,
             num_ctx, scale, scores.data());
    }
    return;
  }
#endif
  ref::attention(q, k, v, out, num_heads, num_kv_heads, head_dim, num_ctx, scale);
}

}  // namespace octet::cpu

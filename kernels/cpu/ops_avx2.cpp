// AVX2+FMA versions of the FP32 ops (contracts in ops.h / ops_ref.h). Function-level target
// attributes, so the library needs no -mavx2; ops.cpp calls in here only after
// fp8_avx2_available() said yes. Scalar tails that must round exactly like the reference live
// in noinline functions without the FMA target, so the compiler cannot contract them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>


#include "kernels/common/check.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/ops_gemm_avx2.h"
#include "kernels/cpu/thread_team.h"

namespace octet::cpu::avx2 {

namespace {

[[noreturn]] void die_without_avx2(const char* function) {
  ::octet::detail::check_failed(__FILE__, __LINE__, "avx2 available",
                                ::octet::detail::check_message(
                                    "octet: ", function, " needs AVX2+FMA+F16C on x86-64,",
                                    " which this build/CPU lacks"));
}

// The reference rotation of one pair, kept out of the FMA-enabled code (see the file comment).
__attribute__((noinline)) void rotate_pair(float* xa, float* xb, float c, float s) {
  const float x0 = *xa, x1 = *xb;
  *xa = x0 * c - x1 * s;
  *xb = x0 * s + x1 * c;
}

__attribute__((noinline)) void rms_scale_tail(const float* x, const float* weight, float* y,
                                              int64_t n, float inv) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * weight[i];
}

}  // namespace

#if OCTET_GEMM_AVX2_BUILT

namespace {

OCTET_AVX2 void rms_norm_impl(const float* x, const float* weight, float* y, int64_t n,
                              float eps) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    s0 = _mm256_fmadd_ps(a, a, s0);
    s1 = _mm256_fmadd_ps(b, b, s1);
  }
  if (i + 8 <= n) {
    const __m256 a = _mm256_loadu_ps(x + i);
    s0 = _mm256_fmadd_ps(a, a, s0);
    i += 8;
  }
  if (i < n) {
    const __m256 a = _mm256_maskload_ps(x + i, gemm_avx2::tail_mask(n - i));
    s1 = _mm256_fmadd_ps(a, a, s1);
  }
  const __m256 z = _mm256_setzero_ps();
  alignas(16) float part[4];
  _mm_store_ps(part, gemm_avx2::hsum4(_mm256_add_ps(s0, s1), z, z, z));
  const float inv = 1.0f / std::sqrt(part[0] / static_cast<float>(n) + eps);
  const __m256 vinv = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 8 <= n; i += 8)  // (x * inv) * weight, the reference's order
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv),
                                          _mm256_loadu_ps(weight + i)));
  rms_scale_tail(x + i, weight + i, y + i, n - i, inv);
}

OCTET_AVX2 void silu_mul_impl(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = gemm_avx2::exp8(_mm256_xor_ps(g, sign));
    _mm256_storeu_ps(out + i,
                     _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    const __m256i mask = gemm_avx2::tail_mask(n - i);
    const __m256 g = _mm256_maskload_ps(gate + i, mask);
    const __m256 e = gemm_avx2::exp8(_mm256_xor_ps(g, sign));
    _mm256_maskstore_ps(out + i, mask,
                        _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)),
                                      _mm256_maskload_ps(up + i, mask)));
  }
}

// No contraction here: GCC would fuse the intrinsic mul + sub into an FMA, which rounds once
// where the reference rounds twice.
#if defined(__clang__)
#define OCTET_NO_CONTRACT
#else
#define OCTET_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#endif
OCTET_AVX2 OCTET_NO_CONTRACT void rope_impl(float* x, int64_t num_heads, int64_t head_dim, int64_t rot_dim,
                          int64_t pos, const float* inv_freq, RopeLayout layout) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  const int64_t half = rot_dim / 2;
  // cos/sin once per frequency, duplicated per pair for the adjacent layout.
  std::vector<float> cs(static_cast<size_t>(2 * rot_dim + 16));
  float* c = cs.data();
  float* s = cs.data() + rot_dim + 8;
  for (int64_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];  // as the reference
    const float ci = std::cos(angle), si = std::sin(angle);
    if (layout == RopeLayout::AdjacentPairs) {
      c[2 * i] = c[2 * i + 1] = ci;
      s[2 * i] = s[2 * i + 1] = si;
    } else {
      c[i] = ci;
      s[i] = si;
    }
  }
  for (int64_t h = 0; h < num_heads; ++h) {
    float* xh = x + h * head_dim;
    if (layout == RopeLayout::HalfSplit) {
      int64_t i = 0;
      for (; i + 8 <= half; i += 8) {
        const __m256 x0 = _mm256_loadu_ps(xh + i), x1 = _mm256_loadu_ps(xh + half + i);
        const __m256 vc = _mm256_loadu_ps(c + i), vs = _mm256_loadu_ps(s + i);
        _mm256_storeu_ps(xh + i, _mm256_sub_ps(_mm256_mul_ps(x0, vc), _mm256_mul_ps(x1, vs)));
        _mm256_storeu_ps(xh + half + i,
                         _mm256_add_ps(_mm256_mul_ps(x0, vs), _mm256_mul_ps(x1, vc)));
      }
      for (; i < half; ++i) rotate_pair(xh + i, xh + half + i, c[i], s[i]);
    } else {
      // Lanes (2i, 2i+1): even = x0 c - x1 s, odd = x1 c + x0 s (ADDSUBPS of x*c and swap(x)*s).
      int64_t d = 0;
      for (; d + 8 <= 2 * half; d += 8) {
        const __m256 v = _mm256_loadu_ps(xh + d);
        const __m256 swapped = _mm256_permute_ps(v, 0xB1);
        _mm256_storeu_ps(xh + d, _mm256_addsub_ps(_mm256_mul_ps(v, _mm256_loadu_ps(c + d)),
                                                  _mm256_mul_ps(swapped, _mm256_loadu_ps(s + d))));
      }
      for (; d < 2 * half; d += 2) rotate_pair(xh + d, xh + d + 1, c[d], s[d]);
    }
  }
}

// Batch invariant: both shapes run dot_tile, whose per-output sum (one 8-lane FMA chain over k,
// masked tail, hsum4) is the same for every tile shape; the bias is added after it in both.
OCTET_AVX2 void linear_impl(const float* x, const float* w, const float* bias, float* y,
                            int64_t m, int64_t n, int64_t k) {
  if (m == 1) {
    constexpr int64_t kRowsPerBlock = 16;
    const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
    cpu::parallel_for_each(0, blocks, [&](int64_t b) {
      const int64_t j0 = b * kRowsPerBlock, j1 = std::min(n, j0 + kRowsPerBlock);
      gemm_avx2::dot_block(x, k, 1, w + j0 * k, k, j1 - j0, k, y + j0, n);
      if (bias)
        for (int64_t j = j0; j < j1; ++j) y[j] += bias[j];
    }, n * k >= 65536);
    return;
  }
  // Blocks of weight rows (nb x k FP32, <= ~128 KiB) stay in L2 while all m rows stream past.
  const int threads = cpu::parallel_width();
  int64_t nb = std::max<int64_t>(4, (32768 / std::max<int64_t>(k, 1)) / 4 * 4);
  nb = std::min(nb, std::max<int64_t>(4, (n / (2 * threads) + 3) / 4 * 4));
  const int64_t blocks = (n + nb - 1) / nb;
  cpu::parallel_for_each(0, blocks, [&](int64_t b) {
    const int64_t j0 = b * nb, rows = std::min(nb, n - j0);
    gemm_avx2::dot_block(x, k, m, w + j0 * k, k, rows, k, y + j0, n);
    if (bias)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = j0; j < j0 + rows; ++j) y[i * n + j] += bias[j];
  }, m * n * k >= 262144);
}

}  // namespace

void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  if (!fp8_avx2_available()) die_without_avx2(__func__);
  rms_norm_impl(x, weight, y, n, eps);
}
void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
            int64_t k) {
  if (!fp8_avx2_available()) die_without_avx2(__func__);
  if (m <= 0 || n <= 0) return;
  linear_impl(x, w, bias, y, m, n, k);
}
void rope(float* x, int64_t num_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
          const float* inv_freq, RopeLayout layout) {
  if (!fp8_avx2_available()) die_without_avx2(__func__);
  rope_impl(x, num_heads, head_dim, rot_dim, pos, inv_freq, layout);
}
void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  if (!fp8_avx2_available()) die_without_avx2(__func__);
  silu_mul_impl(gate, up, out, n);
}

#else  // not x86-64

void rms_norm(const float*, const float*, float*, int64_t, float) { die_without_avx2(__func__); }
void linear(const float*, const float*, const float*, float*, int64_t, int64_t, int64_t) {
  die_without_avx2(__func__);
}
void rope(float*, int64_t, int64_t, int64_t, int64_t, const float*, RopeLayout) {
  die_without_avx2(__func__);
}
void silu_mul(const float*, const float*, float*, int64_t) { die_without_avx2(__func__); }

#endif

}  // namespace octet::cpu::avx2

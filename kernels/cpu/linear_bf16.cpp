#include "kernels/common/check.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/thread_team.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define OCTET_X86 1
#endif

namespace octet {

namespace {

inline float widen(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#ifdef OCTET_X86
#define OCTET_BF16_TARGET __attribute__((target("avx2,fma")))
// 8 FP32 lanes: bf16 widened by a shift (F16C not needed), lanes summed 4 + 4, 2 + 2, 1 + 1.
struct Avx2Lanes {
  using Vec = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kWideOutputs = 3;  // 12 accumulators + 3 weights + 1 x: 16 ymm
  static constexpr int kGemvOutputs = 4;  // m = 1: 4 independent chains
  OCTET_BF16_TARGET static Vec zero() { return _mm256_setzero_ps(); }
  OCTET_BF16_TARGET static Vec load_w(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  OCTET_BF16_TARGET static Vec load_x(const float* p) { return _mm256_loadu_ps(p); }
  OCTET_BF16_TARGET static Vec fma(Vec x, Vec w, Vec acc) { return _mm256_fmadd_ps(x, w, acc); }
  OCTET_BF16_TARGET static float hsum(Vec v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
#include "kernels/cpu/linear_bf16_tiles.h"

// --- Rows8x8 (pack_bf16_rows8x8): the same sums as tile<Avx2Lanes, ...>, one stream ----------
// y[i * n + r0 + r] for i < MR, r < NR and r0 + r < rows: x rows (stride k) . rows r0.. of the
// 8-row block blk (k values each, Rows8x8): the FMA chain, hsum and add_tail of tile().
template <int MR, int NR>
OCTET_BF16_TARGET void packed_tile(const float* x, const uint16_t* blk, int64_t r0, int64_t rows,
                                   int64_t k, float* y, int64_t n) {
  const int64_t kv = k & ~int64_t{7};
  __m256 acc[MR * NR];  // 1-D: GCC keeps a 2-D array of vectors on the stack
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i * NR + r] = Avx2Lanes::zero();
  for (int64_t t = 0; t < kv; t += 8) {
    const uint16_t* p = blk + t * 8 + r0 * 8;  // the step's 64 values, from row r0's 8
    // The GEMV reads one stream: 1 KiB ahead (Zen 3, 49152 x 576 from DRAM: 29-31 GB/s;
    // 2 KiB 23-26, 4 KiB 24-27).
    if (r0 == 0) {  // the block's first pass brings it in; later passes find it in L1
      _mm_prefetch(reinterpret_cast<const char*>(p + 512), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + 544), _MM_HINT_T0);
    }
    if (MR == 1) {  // each weight vector loaded where it is used: 8 + 1 + 1 registers
      const __m256 xv = Avx2Lanes::load_x(x + t);
      for (int r = 0; r < NR; ++r)
        acc[r] = Avx2Lanes::fma(xv, Avx2Lanes::load_w(p + r * 8), acc[r]);
      continue;
    }
    __m256 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = Avx2Lanes::load_x(x + i * k + t);
    for (int r = 0; r < NR; ++r) {
      const __m256 wv = Avx2Lanes::load_w(p + r * 8);
      for (int i = 0; i < MR; ++i) acc[i * NR + r] = Avx2Lanes::fma(xv[i], wv, acc[i * NR + r]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR && r0 + r < rows; ++r) {
      const float s = Avx2Lanes::hsum(acc[i * NR + r]);
      y[i * n + r0 + r] =
          kv < k ? add_tail(s, x + i * k + kv, blk + kv * 8 + (r0 + r) * (k - kv), k - kv) : s;
    }
}

// MR rows of x over one 8-row block: all 8 outputs per tile at m = 1 (one stream), else 4 per
// tile (MR <= 3: 12 accumulators + 3 x + 1 weight registers).
template <int MR>
OCTET_BF16_TARGET void packed_block(const float* x, const uint16_t* blk, int64_t rows, int64_t k,
                                    float* y, int64_t n) {
  if (MR == 1) {
    packed_tile<1, 8>(x, blk, 0, rows, k, y, n);
    return;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += 4) packed_tile<MR, 4>(x, blk, r0, rows, k, y, n);
}
#undef OCTET_BF16_TARGET
#endif

}  // namespace

bool linear_bf16_avx2_available() {
#ifdef OCTET_X86
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
#else
  return false;
#endif
}

void linear_bf16_scalar(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                        int64_t k) {
  cpu::parallel_for_each(0, n, [&](int64_t j) {
    const uint16_t* wr = w + j * k;
    for (int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * k;
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t) acc += xr[t] * widen(wr[t]);
      y[i * n + j] = acc;
    }
  }, n * k > 65536);
}

void linear_bf16_avx2(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                      int64_t k) {
#ifdef OCTET_X86
  if (linear_bf16_avx2_available())
    return linear_bf16_tiles<Avx2Lanes>(x, w, y, m, n, k, /*one_block_per_piece=*/false);
#endif
  OCTET_CHECK(false, "octet: linear_bf16_avx2 needs AVX2+FMA, which this build/CPU lacks");
}

int64_t bf16_rows8x8_elements(int64_t n, int64_t k) { return (n + 7) / 8 * 8 * k; }

void pack_bf16_rows8x8(const uint16_t* src, int64_t n, int64_t k, uint16_t* dst) {
  const int64_t kv = k & ~int64_t{7}, tail = k - kv;
  std::memset(dst, 0, static_cast<size_t>(bf16_rows8x8_elements(n, k)) * 2);
  for (int64_t j = 0; j < n; ++j) {
    uint16_t* blk = dst + j / 8 * 8 * k;
    const int64_t r = j % 8;
    for (int64_t t = 0; t < kv; ++t) blk[t / 8 * 64 + r * 8 + t % 8] = src[j * k + t];
    for (int64_t t = 0; t < tail; ++t) blk[kv * 8 + r * tail + t] = src[j * k + kv + t];
  }
}

void linear_bf16_rows8x8(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n,
                         int64_t k) {
#ifdef OCTET_X86
  if (linear_bf16_avx2_available()) {
    // Work items of 6 blocks (48 rows, as the row-major path's): their weights stay in L2
    // while the tiles of rows of x pass.
    constexpr int64_t kBlocks = 6;
    const int64_t blocks = (n + 7) / 8, items = (blocks + kBlocks - 1) / kBlocks;
    cpu::parallel_for_each(0, items, [&](int64_t it) {
      const int64_t b1 = std::min(blocks, (it + 1) * kBlocks);
      // Tiles of up to 3 rows of x. Against the row-major path (Zen 3, 49152 x 576 from DRAM,
      // 2 threads): m = 1 1.38x, 2-3 1.07x, 5 1.5x, 8 1.2x, 16 1.15x faster; m = 4 0.92x
      // (3 + 1 rows; 2 + 2 was 0.88x, 4 rows x 2 outputs 0.8x), 64 0.96x.
      for (int64_t i0 = 0; i0 < m; i0 += 3) {
        const float* xi = x + i0 * k;
        for (int64_t b = it * kBlocks; b < b1; ++b) {
          const uint16_t* blk = w + b * 8 * k;
          const int64_t rows = std::min<int64_t>(8, n - b * 8);
          float* yi = y + i0 * n + b * 8;
          switch (std::min<int64_t>(3, m - i0)) {
            case 3: packed_block<3>(xi, blk, rows, k, yi, n); break;
            case 2: packed_block<2>(xi, blk, rows, k, yi, n); break;
            default: packed_block<1>(xi, blk, rows, k, yi, n); break;
          }
        }
      }
    }, n * k * m > 65536);
    return;
  }
#endif
  OCTET_CHECK(false, "octet: linear_bf16_rows8x8 needs AVX2+FMA, which this build/CPU lacks");
}

Bf16Layout linear_bf16_preferred_layout() {
  return !linear_bf16_avx512_available() && linear_bf16_avx2_available() ? Bf16Layout::Rows8x8
                                                                          : Bf16Layout::RowMajor;
}

void linear_bf16_avx512_unavailable() {
  OCTET_CHECK(false, "octet: linear_bf16_avx512 needs AVX-512F, which this build/CPU lacks");
  std::abort();
}

void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k) {
  if (linear_bf16_avx512_available()) return linear_bf16_avx512(x, w, y, m, n, k);
  if (linear_bf16_avx2_available()) return linear_bf16_avx2(x, w, y, m, n, k);
  linear_bf16_scalar(x, w, y, m, n, k);
}

namespace ref {
void linear_bf16(const float* x, const uint16_t* w, float* y, int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t t = 0; t < k; ++t) acc += x[i * k + t] * widen(w[j * k + t]);
      y[i * n + j] = acc;
    }
}
}  // namespace ref

}  // namespace octet

// Long-context paged attention accuracy (issue 11: "FP32 accumulation everywhere in attention"):
// one sequence of 65536 cached positions, host reference in float64 over the exact values the
// cache holds, on every backend (backend_test_support.h: the CPU always, CUDA where a GPU is
// present, else reported skipped). Queries: 2 decode rows (CUDA: split over 512-position
// partitions + merge) and an 8-row chunk at the end (CUDA: the tiled prefill kernel), 4 query
// heads over 1 KV head (GQA), head_dim 64, KV dtypes BF16, FP8 E4M3 (per-head scale) and F32,
// full attention and a 40000-position sliding window.
//
// The context is built so that the output depends on the whole context: scores spread over
// [-6, 6] (a softmax that keeps e^-12 of its weight on the smallest ones), with "needles"
// (scores near the maximum) early, in the middle and at the end.
//
// Bound, per output element (o = sum_t p_t v_t / sum_t p_t over n visible positions):
//   |o - ref| <= (4 E + C eps) * max_t |v_t|,  eps = 2^-23 = 2u,
//   E = (d + 4) eps * max_t scale * sum_i |q_i k_ti| (an FP32 score of d products, from q
//       pre-scaled once, errs by at most that; it moves each softmax weight by a relative <= 2E),
//   C: the rounding of the FP32 sums a backend takes. Any order of summing k terms errs by at
//       most (k - 1) u of the sum of their magnitudes (Higham, Accuracy and Stability, 4.2), and
//       each rescale or merge adds <= 2 u; so a sum split in chains of length P whose results
//       are merged sequentially errs by <= (P + 2 n / P + 8) u:
//        - CPU: 256-position partitions folded in order: C = 3 * (256 + 2 * 256) + 16.
//        - CUDA decode rows: 4 warps of <= 128-position chains per 512-position partition, the
//          warps merged, then the partitions: C = 3 * (128 + 4 + 2 * 128) + 16.
//        - CUDA prefill rows: each 32-position tile summed on its own, the tiles rescaled and
//          added in order: C = 3 * (32 + 2 * n / 32) + 16.
// For scale: the bounds come to about 5e-4 * max|v| (CPU, CUDA decode) and 2e-3 * max|v| (CUDA
// prefill) here, while a BF16 or FP16 accumulator rounds a running sum near max|v| by up to
// 2^-9 or 2^-12 of it at each of the 65536 additions.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/backend_op_reference.h"
#include "kernels/backend_test_support.h"
#include "kernels/minifloat_reference.h"

using namespace octet;
using namespace octet_test;

namespace {

constexpr int64_t kContext = 65536, kHeadDim = 64, kHeads = 4, kKvHeads = 1, kBlock = 16;
constexpr int64_t kDecodeRows = 2, kChunkRows = 8;

// Cache element encoding as the contract says (16-bit RNE; FP8 fp8(x / scale)), and the exact
// FP32 value a kernel reads back.
void encode(DType d, float x, float scale, uint8_t* dst, float* value) {
  switch (d) {
    case DType::F32: std::memcpy(dst, &x, 4); *value = x; break;
    case DType::BF16: {
      const uint16_t b = ref_bf16(x);
      std::memcpy(dst, &b, 2);
      *value = static_cast<float>(code_value(kBf16, b));
      break;
    }
    default: {
      *dst = ref_fp8(d, x / scale);
      *value = static_cast<float>(ref_fp8_value(d, *dst) * double(scale));
      break;
    }
  }
}

struct LongContext {
  DType dtype;
  std::vector<uint8_t> kbytes, vbytes;
  std::vector<float> k_val, v_val;  // [pos][d], exact values
  std::vector<int32_t> table;       // one sequence
  std::vector<float> q;             // [rows, heads, d]
  float k_scale = 1, v_scale = 1;
};

LongContext make_context(DType dtype) {
  LongContext c;
  c.dtype = dtype;
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t eb = dtype_bytes(dtype), nblocks = kContext / kBlock;
  c.table.resize(static_cast<size_t>(nblocks));
  std::iota(c.table.begin(), c.table.end(), 0);
  std::shuffle(c.table.begin(), c.table.end(), rng);
  // Keys along a fixed direction with random strength give scores spread over [-6, 6];
  // needles: a few positions near +6 at the start, middle and end.
  std::vector<float> dir(kHeadDim);
  for (float& x : dir) x = u(rng);
  double norm = 0;
  for (float x : dir) norm += double(x) * x;
  for (float& x : dir) x = static_cast<float>(x / std::sqrt(norm));
  std::vector<float> k(kContext * kHeadDim), v(kContext * kHeadDim);
  for (int64_t p = 0; p < kContext; ++p) {
    float strength = u(rng) * 6.0f;
    if (p < 3 || (p >= kContext / 2 && p < kContext / 2 + 3) || p >= kContext - 3) strength = 5.9f;
    for (int64_t j = 0; j < kHeadDim; ++j) {
      k[p * kHeadDim + j] = strength * dir[j] * 8.0f + 0.05f * u(rng);  // q . k / sqrt(d) ~ strength
      v[p * kHeadDim + j] = 2.0f * u(rng);
    }
  }
  if (dtype_is_fp8(dtype)) {
    c.k_scale = 60.0f / fp8_max_value(dtype);  // |k| <= ~50
    c.v_scale = 2.5f / fp8_max_value(dtype);
  }
  c.kbytes.assign(kContext * kHeadDim * eb, 0);
  c.vbytes.assign(kContext * kHeadDim * eb, 0);
  c.k_val.resize(k.size());
  c.v_val.resize(v.size());
  for (int64_t p = 0; p < kContext; ++p) {
    const int64_t slot = int64_t{c.table[p / kBlock]} * kBlock + p % kBlock;
    for (int64_t j = 0; j < kHeadDim; ++j) {
      encode(dtype, k[p * kHeadDim + j], c.k_scale, &c.kbytes[(slot * kHeadDim + j) * eb],
             &c.k_val[p * kHeadDim + j]);
      encode(dtype, v[p * kHeadDim + j], c.v_scale, &c.vbytes[(slot * kHeadDim + j) * eb],
             &c.v_val[p * kHeadDim + j]);
    }
  }
  // Queries: the key direction (scaled by +-1 and 0.5 per head, so some heads see a peaked and
  // some a flat softmax) plus noise.
  const int64_t rows = kDecodeRows + kChunkRows;
  c.q.resize(rows * kHeads * kHeadDim);
  const float head_mul[kHeads] = {1.0f, -1.0f, 0.5f, 0.25f};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t j = 0; j < kHeadDim; ++j)
        c.q[(r * kHeads + h) * kHeadDim + j] = head_mul[h] * dir[j] + 0.02f * u(rng);
  return c;
}

// Runs one sequence with `nq` query rows (the last nq positions of the context) starting at
// query row q0 of c.q; returns [nq, heads, d].
std::vector<float> run(Backend& be, const LongContext& c, int64_t q0, int64_t nq, int64_t window,
                       float scale) {
  Buffer kc = be.allocate(static_cast<int64_t>(c.kbytes.size()));
  Buffer vc = be.allocate(static_cast<int64_t>(c.vbytes.size()));
  be.upload(kc, 0, c.kbytes.data(), static_cast<int64_t>(c.kbytes.size()));
  be.upload(vc, 0, c.vbytes.data(), static_cast<int64_t>(c.vbytes.size()));
  const auto d_ks = to_device(be, std::vector<float>{c.k_scale});
  const auto d_vs = to_device(be, std::vector<float>{c.v_scale});
  const auto d_table = to_device(be, c.table);
  const auto d_qsl = to_device(be, std::vector<int64_t>{0, nq});
  const auto d_lens = to_device(be, std::vector<int64_t>{kContext});
  const int64_t width = kHeads * kHeadDim;
  const auto d_q = to_device(be, std::vector<float>(c.q.begin() + q0 * width,
                                                    c.q.begin() + (q0 + nq) * width));
  auto d_out = device_zeros<float>(be, nq * width);
  const KVCacheView view{kc.data(), vc.data(), c.dtype, kContext / kBlock, kBlock, kKvHeads,
                         kHeadDim, d_ks.data(), d_vs.data()};
  const PagedAttentionBatch batch{1, d_qsl.data(), d_lens.data(), d_table.data(),
                                  kContext / kBlock};
  be.paged_attention(view, d_q.data(), batch, kHeads, window, scale, d_out.data());
  return to_host(be, d_out);
}

// float64 reference and the bound of the file comment with chain constant C.
void reference(const LongContext& c, int64_t q0, int64_t nq, int64_t window, float scale,
               double chain_c, std::vector<double>& ref, std::vector<double>& tol) {
  ref.assign(nq * kHeads * kHeadDim, 0);
  tol.assign(ref.size(), 0);
  std::vector<double> s(kContext);
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t pos = kContext - nq + i;
    const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
    for (int64_t h = 0; h < kHeads; ++h) {
      const float* qh = c.q.data() + ((q0 + i) * kHeads + h) * kHeadDim;
      double mx = -INFINITY, smax = 0;
      for (int64_t p = lo; p <= pos; ++p) {
        const float* kp = c.k_val.data() + p * kHeadDim;
        double dot = 0, mag = 0;
        for (int64_t j = 0; j < kHeadDim; ++j) {
          dot += double(qh[j]) * kp[j];
          mag += std::fabs(double(qh[j]) * kp[j]);
        }
        s[p] = dot * scale;
        mx = std::max(mx, s[p]);
        smax = std::max(smax, mag * scale);
      }
      double z = 0;
      std::vector<double> o(kHeadDim, 0.0);
      double vmax = 0;
      for (int64_t p = lo; p <= pos; ++p) {
        const double w = std::exp(s[p] - mx);
        z += w;
        const float* vp = c.v_val.data() + p * kHeadDim;
        for (int64_t j = 0; j < kHeadDim; ++j) {
          o[j] += w * vp[j];
          vmax = std::max(vmax, std::fabs(double(vp[j])));
        }
      }
      const double e_score = double(kHeadDim + 4) * kEps * smax;
      for (int64_t j = 0; j < kHeadDim; ++j) {
        const int64_t idx = (i * kHeads + h) * kHeadDim + j;
        ref[idx] = o[j] / z;
        tol[idx] = (4 * e_score + chain_c * kEps) * vmax;
      }
    }
  }
}

void long_context_case(Backend& be) {
  const bool cpu = be.name() == "cpu";
  const double n = double(kContext);
  const double c_cpu = 3 * (256 + 2 * n / 256) + 16;
  const double c_cuda_decode = 3 * (128 + 4 + 2 * n / 512) + 16;
  const double c_cuda_prefill = 3 * (32 + 2 * n / 32) + 16;
  const float scale = 1.0f / std::sqrt(float(kHeadDim));
  for (DType dtype : {DType::BF16, DType::FP8_E4M3, DType::F32}) {
    const LongContext c = make_context(dtype);
    for (int64_t window : {int64_t{0}, int64_t{40000}}) {
      CAPTURE(dtype_name(dtype), window);
      std::vector<double> ref, tol;
      const std::vector<float> dec = run(be, c, 0, kDecodeRows, window, scale);
      reference(c, 0, kDecodeRows, window, scale, cpu ? c_cpu : c_cuda_decode, ref, tol);
      check_close(dec, ref, tol, "decode rows at 64K context");
      const std::vector<float> chunk = run(be, c, kDecodeRows, kChunkRows, window, scale);
      reference(c, kDecodeRows, kChunkRows, window, scale, cpu ? c_cpu : c_cuda_prefill, ref, tol);
      check_close(chunk, ref, tol, "8-row chunk at 64K context");
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i)
        worst = std::max(worst, std::fabs(double(chunk[i]) - ref[i]));
      std::printf("%s %s window %lld: 8-row chunk max |err| %.3g (bound %.3g)\n",
                  be.name().c_str(), dtype_name(dtype), static_cast<long long>(window), worst,
                  *std::max_element(tol.begin(), tol.end()));
    }
  }
}
BACKEND_TEST_CASE("paged_attention at a 64K context against float64", long_context_case)

}  // namespace

// Every op of kernels/backend.h against a plain host reference written here (double precision,
// or the independent minifloat oracle of minifloat_reference.h for FP8/BF16/FP16 codes), on every
// backend (backend_test_support.h: "cpu", and "cuda", reported skipped where unavailable).
// Shapes have tails (sizes not multiples of 8/16/32), m = 1 and m > 1. Each op states its
// tolerance and why: bit-exact where the contract fixes the result (copies, quantization codes
// and scales, KV writes, RoPE on the CPU), FP32 summation-order bounds elsewhere, of the form
// |y - y_ref| <= c * eps * sum |terms| (eps = 2^-23 = 2u, u the FP32 unit roundoff, so the
// bounds carry a factor 2 of slack over the worst case). All data goes through Backend
// buffers, so a device backend runs these cases unchanged.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/backend_op_reference.h"
#include "kernels/backend_test_support.h"
#include "kernels/cpu/sample_rows.h"
#include "kernels/minifloat_reference.h"
#include "kernels/mismatch_log.h"

using namespace octet;
using octet_test::DeviceArray;
using octet_test::device_zeros;
using octet_test::MismatchLog;
using octet_test::to_device;
using octet_test::to_host;

using namespace octet_test;

namespace {

// ---- Buffers ------------------------------------------------------------------------------------

// allocate gives zeroed memory (also memory a freed, dirtied buffer of the same size returned);
// upload and download move exactly the bytes asked for, at byte offsets.
void buffers_case(Backend& be) {
  for (int64_t bytes : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{4099},
                        int64_t{(3 << 20) + 13}}) {
    CAPTURE(bytes);
    for (int round = 0; round < 2; ++round) {
      Buffer b = be.allocate(bytes);
      REQUIRE(b.bytes() == bytes);
      REQUIRE(b.data() != nullptr);
      std::vector<uint8_t> host(static_cast<size_t>(bytes), 0xAB);
      be.download(b, 0, host.data(), bytes);
      CHECK(std::all_of(host.begin(), host.end(), [](uint8_t x) { return x == 0; }));
      std::vector<uint8_t> junk(static_cast<size_t>(bytes), 0x5A);
      be.upload(b, 0, junk.data(), bytes);  // dirty it before it is freed
    }
  }
  const Buffer empty = be.allocate(0);
  CHECK(empty.empty());
  CHECK(empty.data() == nullptr);

  const int64_t bytes = 1237;
  Buffer b = be.allocate(bytes);
  std::vector<uint8_t> expect(bytes, 0);
  auto put = [&](int64_t offset, int64_t len, uint8_t seed) {
    std::vector<uint8_t> src(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) src[i] = static_cast<uint8_t>(seed + 7 * i);
    be.upload(b, offset, src.data(), len);
    std::copy(src.begin(), src.end(), expect.begin() + offset);
  };
  put(101, 300, 3);
  put(0, 1, 200);
  put(bytes - 5, 5, 77);
  put(350, 20, 9);  // overlaps the first upload's tail
  std::vector<uint8_t> all(bytes, 0xEE);
  be.download(b, 0, all.data(), bytes);
  check_identical(all, expect, "whole buffer after uploads at offsets");
  for (auto [offset, len] : {std::pair<int64_t, int64_t>{150, 77}, {bytes - 3, 3}, {0, 2}}) {
    std::vector<uint8_t> part(static_cast<size_t>(len) + 2, 0xEE);  // guard bytes stay
    be.download(b, offset, part.data(), len);
    std::vector<uint8_t> want(expect.begin() + offset, expect.begin() + offset + len);
    want.push_back(0xEE);
    want.push_back(0xEE);
    check_identical(part, want, "download at offset " + std::to_string(offset));
  }
  be.synchronize();
}
BACKEND_TEST_CASE("buffers allocate zeroed and upload and download at offsets", buffers_case)

// ---- embedding ----------------------------------------------------------------------------------

// Bit-exact: an F32 row is copied and a BF16 value widens exactly (its bits are the top half of
// the FP32 value).
void embedding_case(Backend& be) {
  std::mt19937 rng(1);
  const int64_t vocab = 37;
  for (int64_t hidden : {int64_t{45}, int64_t{131}}) {
    const std::vector<float> table = uniform(rng, vocab * hidden, -3, 3);
    std::vector<uint16_t> table_bf16(table.size());
    std::uniform_int_distribution<int> any_bits(0, 0xFFFF);
    for (uint16_t& w : table_bf16) {
      do w = static_cast<uint16_t>(any_bits(rng));
      while ((w & 0x7F80) == 0x7F80);  // no inf / NaN
    }
    const auto d_table = to_device(be, table);
    const auto d_table_bf16 = to_device(be, table_bf16);
    for (const std::vector<int32_t>& ids :
         {std::vector<int32_t>{5}, std::vector<int32_t>{0, 36, 5, 5, 17, 36, 1}}) {
      const int64_t n = static_cast<int64_t>(ids.size());
      CAPTURE(hidden, n);
      const auto d_ids = to_device(be, ids);
      std::vector<float> expect(n * hidden), expect_bf16(n * hidden);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < hidden; ++j) {
          expect[i * hidden + j] = table[ids[i] * hidden + j];
          expect_bf16[i * hidden + j] =
              std::bit_cast<float>(uint32_t{table_bf16[ids[i] * hidden + j]} << 16);
        }
      auto out = device_zeros<float>(be, n * hidden);
      be.embedding(TensorRef{d_table.data(), DType::F32, vocab, hidden}, d_ids.data(), n,
                   out.data());
      check_identical(to_host(be, out), expect, "embedding F32");
      be.embedding(TensorRef{d_table_bf16.data(), DType::BF16, vocab, hidden}, d_ids.data(), n,
                   out.data());
      check_identical(to_host(be, out), expect_bf16, "embedding BF16");
    }
  }
}
BACKEND_TEST_CASE("embedding F32 and BF16 tables", embedding_case)

// ---- rms_norm -----------------------------------------------------------------------------------

// residual += delta is one FP32 add: bit-exact. out: the sum of squares has only positive terms,
// so any FP32 order errs by <= (n-1)u relative; the sqrt halves that, and mean, + eps, sqrt,
// reciprocal or division and the two products add <= ~6u: |out - ref| <= (n/2 + 8) * eps * |ref|.
void rms_norm_case(Backend& be) {
  std::mt19937 rng(2);
  const float eps = 1e-5f;
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 45}, {4, 131}, {3, 576}}) {
    for (bool fused : {false, true}) {
      CAPTURE(m, n, fused);
      std::vector<float> residual = uniform(rng, m * n, -2, 2);
      for (int64_t j = 0; j < n; ++j) residual[j] *= 300.0f;            // a large row
      if (m > 1) for (int64_t j = 0; j < n; ++j) residual[n + j] *= 1e-3f;  // a small one
      const std::vector<float> delta = uniform(rng, m * n, -1, 1);
      const std::vector<float> weight = uniform(rng, n, 0.5f, 1.5f);
      const auto d_res = to_device(be, residual);
      const auto d_delta = to_device(be, delta);
      const auto d_w = to_device(be, weight);
      auto d_out = device_zeros<float>(be, m * n);
      be.rms_norm(d_res.data(), fused ? d_delta.data() : nullptr, d_w.data(), d_out.data(), m, n,
                  eps);
      std::vector<float> res_expect = residual;
      if (fused)
        for (size_t i = 0; i < res_expect.size(); ++i) res_expect[i] = residual[i] + delta[i];
      check_identical(to_host(be, d_res), res_expect, "residual after the fused add");
      std::vector<double> ref(m * n), tol(m * n);
      for (int64_t i = 0; i < m; ++i) {
        double ss = 0;
        for (int64_t j = 0; j < n; ++j) ss += double(res_expect[i * n + j]) * res_expect[i * n + j];
        const double inv = 1.0 / std::sqrt(ss / double(n) + double(eps));
        for (int64_t j = 0; j < n; ++j) {
          ref[i * n + j] = double(res_expect[i * n + j]) * inv * weight[j];
          tol[i * n + j] = (0.5 * double(n) + 8) * kEps * std::fabs(ref[i * n + j]);
        }
      }
      check_close(to_host(be, d_out), ref, tol, "rms_norm out");
    }
  }
}
BACKEND_TEST_CASE("rms_norm with and without the fused residual add", rms_norm_case)

// ---- rope ---------------------------------------------------------------------------------------

// The reference of the contract (kernels/cpu/ops_ref.h ref::rope): FP32 angle pos * inv_freq[i],
// std::cos / std::sin of it, unfused products (this file compiles with -std=c++20: no FMA
// contraction). The CPU backend must match it bit for bit (kernels/cpu/ops.h promises rope
// bit-identical to ref::rope). A device's cosf/sinf are not the host libm (CUDA: <= 2 ulp each),
// so elsewhere: |y - ref| <= 4 * eps * (|x0| + |x1|) (2 ulp of c and s, two products and a sum).
void rope_reference(float* x, int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                    const float* inv_freq, RopeLayout layout) {
  const int64_t half = rot_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
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

void check_rope(Backend& be, const std::vector<float>& got, const std::vector<float>& input,
                const std::vector<float>& expect, const std::string& what) {
  if (be.name() == "cpu") {
    check_identical(got, expect, what);
    return;
  }
  // Pairs are unknown here; |x0| + |x1| <= 2 * max |x| of the head (inputs are in [-2, 2]).
  std::vector<double> ref(expect.begin(), expect.end()), tol(expect.size(), 4 * kEps * 4.0);
  for (size_t i = 0; i < input.size(); ++i)
    if (input[i] == expect[i]) tol[i] = 0;  // dims past rot_dim are untouched
  check_close(got, ref, tol, what);
}

void rope_case(Backend& be) {
  struct Config {
    int64_t n, heads, kv_heads, head_dim, rot_dim;
  };
  std::mt19937 rng(3);
  for (const Config c : {Config{1, 4, 2, 64, 64}, Config{5, 3, 1, 36, 24}, Config{3, 2, 2, 18, 18},
                         Config{7, 6, 2, 40, 16}}) {
    for (RopeLayout layout : {RopeLayout::AdjacentPairs, RopeLayout::HalfSplit}) {
      for (bool with_k : {true, false}) {
        CAPTURE(c.n, c.heads, c.kv_heads, c.head_dim, c.rot_dim, int(layout), with_k);
        std::vector<int64_t> positions(c.n);
        std::uniform_int_distribution<int64_t> pos_d(1, 8191);
        for (int64_t& p : positions) p = pos_d(rng);
        positions[0] = 0;
        if (c.n > 2) positions[2] = 131071;
        std::vector<float> inv_freq(c.rot_dim / 2);
        for (size_t i = 0; i < inv_freq.size(); ++i)
          inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * double(i) / double(c.rot_dim)));
        const std::vector<float> q = uniform(rng, c.n * c.heads * c.head_dim, -2, 2);
        const std::vector<float> k = uniform(rng, c.n * c.kv_heads * c.head_dim, -2, 2);
        std::vector<float> q_expect = q, k_expect = k;
        for (int64_t t = 0; t < c.n; ++t) {
          rope_reference(q_expect.data() + t * c.heads * c.head_dim, c.heads, c.head_dim,
                         c.rot_dim, positions[t], inv_freq.data(), layout);
          rope_reference(k_expect.data() + t * c.kv_heads * c.head_dim, c.kv_heads, c.head_dim,
                         c.rot_dim, positions[t], inv_freq.data(), layout);
        }
        const auto d_q = to_device(be, q);
        const auto d_k = to_device(be, k);
        const auto d_pos = to_device(be, positions);
        const auto d_inv = to_device(be, inv_freq);
        be.rope(d_q.data(), with_k ? d_k.data() : nullptr, c.n, c.heads, c.kv_heads, c.head_dim,
                c.rot_dim, d_pos.data(), d_inv.data(), layout);
        check_rope(be, to_host(be, d_q), q, q_expect, "rope q");
        if (with_k) check_rope(be, to_host(be, d_k), k, k_expect, "rope k");
      }
    }
  }
}
BACKEND_TEST_CASE("rope both layouts with partial rotary and without k", rope_case)

// ---- silu_mul -----------------------------------------------------------------------------------

// exp within 2 ulp (the CPU's vector exp: Cephes polynomial; CUDA expf: 2 ulp), then 1 + e, the
// division and the product: relative error <= ~2 eps + 3u; |out - ref| <= 8 * eps * |ref|. Plus
// an absolute |g u| * 2^-126 for gates below -88, where exp(-g) passes FLT_MAX: libm overflows to
// inf (silu -> -0) but the CPU's vector exp clamps its argument at 88.376 (e^88.376 ~ 2^127.7),
// giving g u / 2^127.7 (~1e-36) instead of ~1e-42: negligible, but outside the relative bound.
void silu_mul_case(Backend& be) {
  std::mt19937 rng(4);
  // The last shape passes the CPU backend's OpenMP threshold.
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 45}, {4, 303}, {40, 1003}}) {
    for (bool in_place : {false, true}) {
      CAPTURE(m, n, in_place);
      std::vector<float> gate = uniform(rng, m * n, -12, 12);
      gate[0] = -100.0f;
      gate[1] = 100.0f;
      gate[2] = 0.0f;
      gate[3] = -0.0f;
      gate[4] = -87.5f;
      const std::vector<float> up = uniform(rng, m * n, -3, 3);
      const auto d_gate = to_device(be, gate);
      const auto d_up = to_device(be, up);
      auto d_out = device_zeros<float>(be, m * n);
      float* out = in_place ? d_gate.data() : d_out.data();
      be.silu_mul(d_gate.data(), d_up.data(), out, m, n);
      std::vector<double> ref(m * n), tol(m * n);
      for (int64_t i = 0; i < m * n; ++i) {
        const double g = gate[i];
        ref[i] = g / (1.0 + std::exp(-g)) * up[i];
        tol[i] = 8 * kEps * std::fabs(ref[i]) + std::fabs(g * up[i]) * 0x1p-126;
      }
      check_close(to_host(be, in_place ? d_gate : d_out), ref, tol, "silu_mul");
    }
  }
}
BACKEND_TEST_CASE("silu_mul out of place and in place", silu_mul_case)

// gelu_tanh_mul against 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) u in double. FP32 has a
// few roundings in the polynomial and product (relative ~8 eps) plus tanh's own error and the
// inner argument's, which near tanh = -1 are absolute (1 + tanh cancels): <= ~4 eps * 0.5 |g u|.
// So |out - ref| <= 8 eps |ref| + 8 eps |g u|.
void gelu_tanh_mul_case(Backend& be) {
  std::mt19937 rng(14);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 45}, {4, 303}, {40, 1003}}) {
    for (bool in_place : {false, true}) {
      CAPTURE(m, n, in_place);
      std::vector<float> gate = uniform(rng, m * n, -12, 12);
      gate[0] = -100.0f;
      gate[1] = 100.0f;
      gate[2] = 0.0f;
      gate[3] = -3.0f;
      const std::vector<float> up = uniform(rng, m * n, -3, 3);
      const auto d_gate = to_device(be, gate);
      const auto d_up = to_device(be, up);
      auto d_out = device_zeros<float>(be, m * n);
      float* out = in_place ? d_gate.data() : d_out.data();
      be.gelu_tanh_mul(d_gate.data(), d_up.data(), out, m, n);
      std::vector<double> ref(m * n), tol(m * n);
      for (int64_t i = 0; i < m * n; ++i) {
        const double g = gate[i];
        const double z = std::sqrt(2.0 / 3.14159265358979323846) * (g + 0.044715 * g * g * g);
        ref[i] = 0.5 * g * (1.0 + std::tanh(z)) * up[i];
        tol[i] = 8 * kEps * std::fabs(ref[i]) + 8 * kEps * std::fabs(g * up[i]);
      }
      check_close(to_host(be, in_place ? d_gate : d_out), ref, tol, "gelu_tanh_mul");
    }
  }
}
BACKEND_TEST_CASE("gelu_tanh_mul out of place and in place", gelu_tanh_mul_case)

// scale: one FP32 multiply, bit-exact.
void scale_case(Backend& be) {
  std::mt19937 rng(15);
  for (int64_t count : {int64_t{1}, int64_t{1003}, int64_t{40 * 640}}) {
    CAPTURE(count);
    const std::vector<float> x = uniform(rng, count, -5, 5);
    const float s = std::sqrt(640.0f);
    const auto d_x = to_device(be, x);
    be.scale(d_x.data(), count, s);
    const std::vector<float> got = to_host(be, d_x);
    int64_t bad = 0;
    for (int64_t i = 0; i < count; ++i) bad += got[i] != x[i] * s;
    CHECK(bad == 0);
  }
}
BACKEND_TEST_CASE("scale multiplies in place", scale_case)

// ---- row_amax -----------------------------------------------------------------------------------

// Rows with the edge cases of a per-token maximum: NaNs first, in the middle and last (ignored),
// all zeros, -0, a negative maximum, a huge value. Row r of the result is r % 6's kind.
std::vector<float> amax_rows(std::mt19937& rng, int64_t m, int64_t k) {
  std::vector<float> x = uniform(rng, m * k, -1, 1);
  for (int64_t r = 0; r < m; ++r) {
    float* row = x.data() + r * k;
    switch (r % 6) {
      case 0: for (int64_t j = 0; j < k; ++j) row[j] *= 10.0f; break;
      case 1: row[0] = kNaN; row[k / 2] = kNaN; row[k - 1] = kNaN; row[k / 3] = -5.5f; break;
      case 2: std::fill(row, row + k, 0.0f); break;
      case 3: std::fill(row, row + k, 0.0f); row[k - 1] = -0.0f; row[0] = 1e-7f; break;
      case 4: row[k / 2] = -7.25f; break;
      case 5: row[k - 1] = 3e30f; break;
    }
  }
  return x;
}

// Bit-exact: a maximum of absolute values involves no rounding.
void row_amax_case(Backend& be) {
  std::mt19937 rng(5);
  for (auto [m, k] :  // the last: past the OpenMP threshold
       {std::pair<int64_t, int64_t>{1, 45}, {6, 131}, {7, 1007}, {3, 1}, {70, 1007}}) {
    CAPTURE(m, k);
    const std::vector<float> x = amax_rows(rng, m, k);
    std::vector<float> expect(m, 0.0f);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j)
        if (!std::isnan(x[r * k + j])) expect[r] = std::max(expect[r], std::fabs(x[r * k + j]));
    const auto d_x = to_device(be, x);
    auto d_amax = device_zeros<float>(be, m);
    be.row_amax(d_x.data(), m, k, d_amax.data());
    const std::vector<float> got = to_host(be, d_amax);
    for (int64_t r = 0; r < m; ++r) {
      INFO("row " << r << ": expected " << expect[r] << ", got " << got[r]);
      CHECK(got[r] == expect[r]);  // +0 and -0 are both a zero maximum
    }
  }
}
BACKEND_TEST_CASE("row_amax ignores NaN", row_amax_case)

// ---- quantize_fp8_dynamic / quantize_fp8_static ------------------------------------------------

constexpr float kMinActivationScale = 1.0f / (448.0f * 512.0f);

// Bit-exact scales and codes (vLLM's rule, kernels/cpu/w8a8.h): scale = max(amax / 448, 1 / (448 *
// 512)) in FP32, q = fp8_e4m3(x / scale) with true FP32 division, RNE, saturating, NaN -> 0x7F,
// -0 -> 0x80. The codes are what a W8A8 model's output depends on: no tolerance.
void quantize_dynamic_case(Backend& be) {
  std::mt19937 rng(6);
  for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 45}, {6, 131}, {7, 1007}, {70, 1007}}) {
    std::vector<float> x = amax_rows(rng, m, k);
    for (int64_t j = 0; j < k; ++j) x[j] *= 1e-6f;  // row 0: tiny, scale clamps to the minimum
    if (m > 1) {  // row m - 1: amax 448 * kTieScale, so scale kTieScale, and ties x / scale
      const std::vector<float> mids = fp8_midpoints(DType::FP8_E4M3);
      float* row = x.data() + (m - 1) * k;
      row[0] = 448 * kTieScale;
      for (int64_t j = 1; j < k; ++j)
        row[j] = (j % 2 ? kTieScale : -kTieScale) * mids[static_cast<size_t>(j) % mids.size()];
    }
    for (bool given_amax : {false, true}) {
      CAPTURE(m, k, given_amax);
      std::vector<float> amax(m, 0.0f);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < k; ++j)
          if (!std::isnan(x[r * k + j])) amax[r] = std::max(amax[r], std::fabs(x[r * k + j]));
      if (given_amax)  // a row split over ranks: the global maximum is larger, or (bad caller)
        for (int64_t r = 0; r < m; ++r)  // smaller, which saturates
          amax[r] = r % 3 == 0 ? amax[r] * 2.5f : r % 3 == 1 ? amax[r] * 0.5f : amax[r];
      std::vector<float> scale_expect(m);
      std::vector<uint8_t> q_expect(m * k);
      for (int64_t r = 0; r < m; ++r) {
        scale_expect[r] = std::max(amax[r] / 448.0f, kMinActivationScale);
        for (int64_t j = 0; j < k; ++j)
          q_expect[r * k + j] = ref_fp8(DType::FP8_E4M3, x[r * k + j] / scale_expect[r]);
      }
      const auto d_x = to_device(be, x);
      const auto d_amax = to_device(be, amax);
      auto d_q = device_zeros<uint8_t>(be, m * k);
      auto d_scale = device_zeros<float>(be, m);
      be.quantize_fp8_dynamic(d_x.data(), m, k, given_amax ? d_amax.data() : nullptr,
                              d_q.data(), d_scale.data());
      check_identical(to_host(be, d_scale), scale_expect, "dynamic scales");
      check_identical(to_host(be, d_q), q_expect, "dynamic codes");
    }
  }
}
BACKEND_TEST_CASE("quantize_fp8_dynamic with and without a given amax", quantize_dynamic_case)

// Bit-exact: q = fp8_e4m3(x * (1 / scale)), the FP32 reciprocal first (vLLM's static rule).
void quantize_static_case(Backend& be) {
  std::mt19937 rng(7);
  for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 45}, {3, 131}}) {
    for (float scale : {0.0173f, kTieScale, 1.0f / 448.0f}) {
      CAPTURE(m, k, scale);
      std::vector<float> x = uniform(rng, m * k, -8, 8);
      if (scale == kTieScale) {  // odd elements: ties of x / scale (see fp8_midpoints)
        const std::vector<float> mids = fp8_midpoints(DType::FP8_E4M3);
        for (int64_t i = 5; i < m * k; i += 2)
          x[i] = kTieScale * mids[static_cast<size_t>(i) % mids.size()];
      }
      x[0] = kNaN;
      x[1] = -0.0f;
      x[2] = 1e6f;    // saturates to 448
      x[3] = -1e6f;   // to -448
      x[4] = 1e-9f;   // underflows to 0
      std::vector<uint8_t> expect(m * k);
      const float inv = 1.0f / scale;
      for (int64_t i = 0; i < m * k; ++i) expect[i] = ref_fp8(DType::FP8_E4M3, x[i] * inv);
      const auto d_x = to_device(be, x);
      auto d_q = device_zeros<uint8_t>(be, m * k);
      be.quantize_fp8_static(d_x.data(), m, k, scale, d_q.data());
      check_identical(to_host(be, d_q), expect, "static codes");
    }
  }
}
BACKEND_TEST_CASE("quantize_fp8_static", quantize_static_case)

// ---- gather_rows --------------------------------------------------------------------------------

// Bit-exact: a copy.
void gather_rows_case(Backend& be) {
  std::mt19937 rng(14);
  for (int64_t width : {int64_t{45}, int64_t{1003}}) {
    const int64_t total = 23;
    const std::vector<float> x = uniform(rng, total * width, -5, 5);
    const auto d_x = to_device(be, x);
    for (const std::vector<int64_t>& rows :
         {std::vector<int64_t>{7}, std::vector<int64_t>{22, 0, 5, 5, 17}}) {
      const int64_t n = static_cast<int64_t>(rows.size());
      CAPTURE(width, n);
      std::vector<float> expect;
      for (int64_t r : rows) expect.insert(expect.end(), x.begin() + r * width,
                                           x.begin() + (r + 1) * width);
      const auto d_rows = to_device(be, rows);
      auto d_out = device_zeros<float>(be, n * width);
      be.gather_rows(d_x.data(), width, d_rows.data(), n, d_out.data());
      check_identical(to_host(be, d_out), expect, "gather_rows");
    }
  }
}
BACKEND_TEST_CASE("gather_rows", gather_rows_case)

// ---- argmax_rows --------------------------------------------------------------------------------

// The first index of each row's max (ties: the lowest, -0 == +0 as ==), -1 for a row holding a
// NaN or an infinity (either sign), against a loop written here; widths below, at and past the
// CUDA block's 256 threads, the max in the last element, ties across threads.
void argmax_rows_case(Backend& be) {
  std::mt19937 rng(21);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t width : {int64_t{1}, int64_t{7}, int64_t{256}, int64_t{300}, int64_t{49152}}) {
    CAPTURE(width);
    const int64_t rows = 9;
    std::vector<float> x = uniform(rng, rows * width, -30, 30);
    auto at = [&](int64_t r, int64_t j) -> float& {
      return x[r * width + std::min(j, width - 1)];
    };
    at(1, width - 1) = 99.0f;                 // the max at the end
    at(2, 3) = at(2, 200) = at(2, 1) = 50.0f;  // ties: index 1 (or the last column) wins
    at(3, 0) = 0.0f;                           // all zeros of both signs: index 0
    for (int64_t j = 0; j < width; ++j) at(3, j) = j % 2 ? -0.0f : 0.0f;
    at(4, 5) = std::numeric_limits<float>::quiet_NaN();
    at(5, 2) = inf;
    at(6, 0) = -inf;
    for (int64_t j = 0; j < width; ++j) at(7, j) = -1e30f;  // all equal, finite
    std::vector<int32_t> expect(rows);
    for (int64_t r = 0; r < rows; ++r) {
      int32_t best = 0;
      bool finite = true;
      for (int64_t j = 0; j < width; ++j) {
        finite = finite && std::isfinite(x[r * width + j]);
        if (x[r * width + j] > x[r * width + best]) best = static_cast<int32_t>(j);
      }
      expect[r] = finite ? best : -1;
    }
    CHECK(expect[4] == -1);
    CHECK(expect[5] == -1);
    CHECK(expect[6] == -1);
    const auto d_x = to_device(be, x);
    auto d_ids = device_zeros<int32_t>(be, rows);
    be.argmax_rows(d_x.data(), rows, width, d_ids.data());
    CHECK(to_host(be, d_ids) == expect);
  }
}
BACKEND_TEST_CASE("argmax_rows", argmax_rows_case)

// ---- sample_rows ---------------------------------------------------------------------------------

// Each row's token is the CPU reference's (kernels/cpu/sample_rows.h, itself checked against the
// host sampler in test_device_sampling) for greedy, temperature, top_k, top_p (a flat row whose
// top_p bucket holds thousands of tokens: several rounds of the walk), min_p, non-finite and
// skipped rows mixed in one call; the rows not sampled keep their logits. Small widths (what
// gpu_check's sanitizers run) and vocabulary-sized ones.
void sample_rows_widths(Backend& be, std::initializer_list<int64_t> widths) {
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t width : widths) {
    CAPTURE(width);
    const int64_t rows = 12;
    std::vector<float> x(static_cast<size_t>(rows * width));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < width; ++j)
        x[r * width + j] = normal(rng) * (r % 3 == 1 ? 0.05f : 3.0f);  // rows 1, 4, 7, 10 flat
    x[2 * width] = std::numeric_limits<float>::quiet_NaN();  // row 2: non-finite
    std::vector<SampleRowParams> p(static_cast<size_t>(rows));
    const float inv_t[] = {1.0f, 1.0f / 0.7f, 1.0f / 1.3f};
    for (int64_t r = 0; r < rows; ++r) {
      SampleRowParams& q = p[static_cast<size_t>(r)];
      q.mode = r == 3 ? SampleRowParams::kSkip
                      : r == 0 || r == 9 ? SampleRowParams::kGreedy : SampleRowParams::kSample;
      q.u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      q.inv_temperature = inv_t[r % 3];
      q.top_k = r == 5 ? 40 : r == 6 ? static_cast<int32_t>(width - 1) : 0;
      q.top_p = r == 1 || r == 4 ? 0.9f : r == 7 ? 0.3f : r == 10 ? 0.999f : 1.0f;
      q.min_p = r == 8 ? 0.05f : 0.0f;
    }
    p[11].u = std::nextafter(1.0, 0.0);
    // Logits processing: rows 9 (greedy) and 10 get a bias, a mask, a repetition penalty and
    // counts on their first tokens; row 8's bias of 3e38 on a logit near 3e38 makes +inf (the
    // row is put back and reported).
    std::vector<LogitEdit> edits;
    for (int64_t r : {9, 10}) {
      p[static_cast<size_t>(r)].edit_begin = static_cast<int32_t>(edits.size());
      for (int32_t t = 0; t < std::min<int32_t>(4, static_cast<int32_t>(width)); ++t) {
        LogitEdit e;
        e.token = t;
        e.flags = t == 0 ? LogitEdit::kBias : t == 1 ? LogitEdit::kMask
                  : t == 2 ? LogitEdit::kRepeat : LogitEdit::kCount | LogitEdit::kRepeat;
        e.bias = 6.0f;
        e.repetition = 1.3f;
        e.frequency = 0.75f;
        e.presence = -0.5f;
        edits.push_back(e);
      }
      p[static_cast<size_t>(r)].edit_count =
          static_cast<int32_t>(edits.size()) - p[static_cast<size_t>(r)].edit_begin;
    }
    x[8 * width] = 3e38f;
    LogitEdit inf;
    inf.flags = LogitEdit::kBias;
    inf.bias = 3e38f;
    p[8].edit_begin = static_cast<int32_t>(edits.size());
    p[8].edit_count = 1;
    edits.push_back(inf);
    std::vector<int32_t> expect(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      expect[static_cast<size_t>(r)] =
          sample_row_reference(x.data() + r * width, width, p[static_cast<size_t>(r)],
                               edits.data());
    CHECK(expect[2] == kSampleNonFinite);
    CHECK(expect[3] == kSampleSkipped);
    CHECK(expect[8] == kSampleNonFinite);
    auto d_x = to_device(be, x);
    const auto d_p = to_device(be, p);
    auto d_edits = to_device(be, edits);
    auto d_ids = device_zeros<int32_t>(be, rows);
    be.sample_rows(d_x.data(), rows, width, d_p.data(), d_edits.data(), d_ids.data());
    CHECK(to_host(be, d_ids) == expect);
    const std::vector<float> after = to_host(be, d_x);
    for (int64_t r : {2, 3, 8})
      CHECK(std::memcmp(after.data() + r * width, x.data() + r * width,
                        static_cast<size_t>(width) * sizeof(float)) == 0);
  }
}
void sample_rows_case(Backend& be) { sample_rows_widths(be, {1, 7, 256, 257, 1000}); }
void sample_rows_vocab_case(Backend& be) { sample_rows_widths(be, {49152, 128256}); }
BACKEND_TEST_CASE("sample_rows", sample_rows_case)
BACKEND_TEST_CASE("sample_rows vocabulary widths", sample_rows_vocab_case)

// ---- hadamard_rotate ----------------------------------------------------------------------------

// Reference: the dense product y_i = sum_j (-1)^popcount(i & j) x_j / sqrt(n) in double (the
// Sylvester Hadamard matrix written out, not a butterfly). The op's FWHT adds each output from
// n terms in log2(n) levels, each level rounding once, then one multiply by the rounded
// 1 / sqrt(n): |y - y_ref| <= ~(log2(n) + 2) u sum_j |x_j| / sqrt(n) (u = eps / 2), so the bound
// B = (log2(n) + 2) * eps * sum |x| / sqrt(n) has a factor 2 of slack.
std::vector<double> hadamard_reference(const std::vector<float>& x, int64_t rows, int64_t n) {
  std::vector<double> y(x.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) {
      double acc = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const double v = x[r * n + j];
        acc += (std::popcount(static_cast<uint64_t>(i & j)) % 2 == 0) ? v : -v;
      }
      y[r * n + i] = acc * scale;
    }
  return y;
}

// Against the dense reference; H applied twice is the identity within rounding (H / sqrt(n) is
// orthogonal and symmetric); batch invariant: each of 17 rows rotated alone is bit-identical to
// the same row rotated among all of them.
void hadamard_case(Backend& be) {
  std::mt19937 rng(15);
  // head_dim 1 (identity), small and Llama sizes; the 600 x 128 shape passes the CPU backend's
  // threading threshold.
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 2}, {17, 8}, {1, 64}, {17, 64},
                         {5, 128}, {600, 128}, {2, 256}}) {
    CAPTURE(rows, n);
    const std::vector<float> x = uniform(rng, static_cast<size_t>(rows * n), -4, 4);
    auto d = to_device(be, x);
    be.hadamard_rotate(d.data(), rows, n);
    const std::vector<float> y = to_host(be, d);
    const std::vector<double> ref = hadamard_reference(x, rows, n);
    const double levels = std::log2(static_cast<double>(n));
    std::vector<double> tol(ref.size());
    for (int64_t r = 0; r < rows; ++r) {
      double l1 = 0.0;
      for (int64_t j = 0; j < n; ++j) l1 += std::fabs(x[r * n + j]);
      for (int64_t i = 0; i < n; ++i)
        tol[r * n + i] = (levels + 2) * kEps * l1 / std::sqrt(static_cast<double>(n));
    }
    check_close(y, ref, tol, "hadamard_rotate");

    // Twice: x again. With B the bound above, the first pass's error e (|e| <= B) goes through
    // H / sqrt(n): |(H e)_i| / sqrt(n) <= sqrt(n) B; the second pass adds at most
    // (levels + 2) u sum |y| / sqrt(n) <= (levels + 2) u sum |x| = sqrt(n) B / 2 (sum |y| <=
    // sqrt(n) |y|_2 = sqrt(n) |x|_2 <= sqrt(n) sum |x|). Together <= 1.5 sqrt(n) B; allowed
    // 2 sqrt(n) B.
    be.hadamard_rotate(d.data(), rows, n);
    const std::vector<float> back = to_host(be, d);
    std::vector<double> xd(x.begin(), x.end()), tol2(ref.size());
    for (size_t i = 0; i < tol.size(); ++i)
      tol2[i] = tol[i] * 2 * std::sqrt(static_cast<double>(n));
    check_close(back, xd, tol2, "hadamard_rotate twice");
  }
  // Batch invariance, m = 1 vs m = 17, bit for bit.
  for (int64_t n : {int64_t{8}, int64_t{64}, int64_t{128}}) {
    CAPTURE(n);
    const int64_t m = 17;
    const std::vector<float> x = uniform(rng, static_cast<size_t>(m * n), -4, 4);
    auto d_all = to_device(be, x);
    be.hadamard_rotate(d_all.data(), m, n);
    const std::vector<float> all = to_host(be, d_all);
    for (int64_t i = 0; i < m; ++i) {
      CAPTURE(i);
      const std::vector<float> row(x.begin() + i * n, x.begin() + (i + 1) * n);
      auto d_row = to_device(be, row);
      be.hadamard_rotate(d_row.data(), 1, n);
      check_identical(to_host(be, d_row),
                      std::vector<float>(all.begin() + i * n, all.begin() + (i + 1) * n),
                      "hadamard_rotate m=1 vs m=17");
    }
  }
  // rows = 0 is a no-op.
  auto d_none = device_zeros<float>(be, 8);
  be.hadamard_rotate(d_none.data(), 0, 8);
  CHECK(to_host(be, d_none) == std::vector<float>(8, 0.0f));
}
BACKEND_TEST_CASE("hadamard_rotate against the dense Hadamard product, twice, m=1 vs m=17",
                  hadamard_case)

}  // namespace

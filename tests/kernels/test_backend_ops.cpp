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
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/backend_test_support.h"
#include "kernels/minifloat_reference.h"
#include "kernels/mismatch_log.h"

using namespace octet;
using octet_test::DeviceArray;
using octet_test::device_zeros;
using octet_test::MismatchLog;
using octet_test::to_device;
using octet_test::to_host;

namespace {

constexpr float kEps = std::numeric_limits<float>::epsilon();  // 2^-23
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- Host helpers -----------------------------------------------------------------------------

std::vector<float> uniform(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }

// Reference encoders (independent of kernels/cpu: nearest-value search over the format's table).
uint8_t ref_fp8(DType d, float x) {
  return octet_test::reference_fp8(d == DType::FP8_E4M3 ? octet_test::kE4M3 : octet_test::kE5M2,
                                   static_cast<double>(x));
}
float ref_fp8_value(DType d, uint8_t code) {
  return static_cast<float>(
      octet_test::code_value(d == DType::FP8_E4M3 ? octet_test::kE4M3 : octet_test::kE5M2, code));
}
uint16_t ref_bf16(float x) {
  return static_cast<uint16_t>(octet_test::round_to_code(
      octet_test::kBf16, x, octet_test::Overflow::kToInfinity, 0x7FFF));
}
uint16_t ref_fp16(float x) {
  return static_cast<uint16_t>(octet_test::round_to_code(
      octet_test::kFp16, x, octet_test::Overflow::kToInfinity, 0x7FFF));
}

// Midpoints between consecutive normal codes of an FP8 format. x = s * mid is exact in FP32 for
// s = 61 * 2^e, and x / s == mid is a tie (RNE: to the even code), while x * (1 / s) with the
// FP32 reciprocal lands off the tie for about half of them (59 of 118 for E4M3): they tell the
// contract's two quantization rules (true division, reciprocal multiply) apart, and RNE from
// rounding half up or truncation. Random inputs almost never do (a 1-ulp difference changes a
// code with probability ~2^-20).
std::vector<float> fp8_midpoints(DType d) {
  const octet_test::MiniFloat& f = d == DType::FP8_E4M3 ? octet_test::kE4M3 : octet_test::kE5M2;
  std::vector<float> mids;
  for (uint32_t c = 1u << f.mantissa_bits; c < f.max_code(); ++c)
    mids.push_back(static_cast<float>(
        (octet_test::code_value(f, c) + octet_test::code_value(f, c + 1)) / 2));
  return mids;
}
constexpr float kTieScale = 61 * 0x1p-6f;  // 0.953125, see fp8_midpoints

// Random finite E4M3 codes (every code but the NaNs 0x7F / 0xFF), all binades.
std::vector<uint8_t> random_e4m3_codes(std::mt19937& rng, size_t n) {
  std::uniform_int_distribution<int> d(0, 253);
  std::vector<uint8_t> v(n);
  for (uint8_t& c : v) {
    const int r = d(rng);
    c = static_cast<uint8_t>(r < 127 ? r : r + 1);  // skip 0x7F; 253 + 1 = 0xFE
  }
  return v;
}

// ---- Comparisons: one assertion per array, the first mismatches printed -------------------------

template <typename T>
void check_identical(const std::vector<T>& got, const std::vector<T>& expect,
                     const std::string& what) {
  MismatchLog log;
  if (got.size() != expect.size()) log.add("size %zu, expected %zu", got.size(), expect.size());
  for (size_t i = 0; i < std::min(got.size(), expect.size()); ++i) {
    if (std::memcmp(&got[i], &expect[i], sizeof(T)) == 0) continue;
    if constexpr (std::is_same_v<T, float>)
      log.add("[%zu]: expected %a (0x%08X), got %a (0x%08X)", i, expect[i], bits_of(expect[i]),
              got[i], bits_of(got[i]));
    else
      log.add("[%zu]: expected 0x%llX, got 0x%llX", i,
              static_cast<unsigned long long>(expect[i]),
              static_cast<unsigned long long>(got[i]));
  }
  INFO(what << ": " << log.summary());
  CHECK(log.count() == 0);
}

// |got[i] - ref[i]| <= tol[i] for every i (a NaN fails).
void check_close(const std::vector<float>& got, const std::vector<double>& ref,
                 const std::vector<double>& tol, const std::string& what) {
  MismatchLog log;
  double worst = 0;  // largest error / tolerance seen
  if (got.size() != ref.size()) log.add("size %zu, expected %zu", got.size(), ref.size());
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (tol[i] > 0) worst = std::max(worst, err / tol[i]);
    if (!(err <= tol[i]))
      log.add("[%zu]: ref %.9g, got %.9g, |err| %.3g > tol %.3g", i, ref[i],
              static_cast<double>(got[i]), err, tol[i]);
  }
  INFO(what << ": " << log.summary() << " (worst error / tolerance " << worst << ")");
  CHECK(log.count() == 0);
}

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

// ---- linear (F32, BF16) -------------------------------------------------------------------------

struct LinearShape {
  int64_t m, n, k;
};
constexpr LinearShape kLinearShapes[] = {{1, 37, 45}, {5, 70, 133}, {17, 19, 67}, {3, 5, 7},
                                         {2, 3, 1},   {33, 130, 515}};

// FP32 accumulation in any order (lanes, tiles, FMA): |err| <= k u sum |x w| (Higham, recursive
// and blocked sums); the bias add one more rounding: |y - ref| <= (k + 2) eps (sum |x w| + |b|).
void linear_case(Backend& be) {
  std::mt19937 rng(8);
  for (const LinearShape s : kLinearShapes) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (bool with_bias : {false, true}) {
        CAPTURE(s.m, s.n, s.k, dtype_name(dtype), with_bias);
        const std::vector<float> x = uniform(rng, s.m * s.k, -2, 2);
        std::vector<float> w = uniform(rng, s.n * s.k, -1, 1);
        std::vector<uint16_t> w_bf16(w.size());
        for (size_t i = 0; i < w.size(); ++i) {
          w_bf16[i] = ref_bf16(w[i]);
          if (dtype == DType::BF16) w[i] = std::bit_cast<float>(uint32_t{w_bf16[i]} << 16);
        }
        const std::vector<float> bias = uniform(rng, s.n, -4, 4);
        const auto d_x = to_device(be, x);
        const auto d_w = to_device(be, w);
        const auto d_w_bf16 = to_device(be, w_bf16);
        const auto d_bias = to_device(be, bias);
        auto d_y = device_zeros<float>(be, s.m * s.n);
        WeightRef ref_w;
        ref_w.data = dtype == DType::F32 ? static_cast<const void*>(d_w.data()) : d_w_bf16.data();
        ref_w.dtype = dtype;
        ref_w.n = s.n;
        ref_w.k = s.k;
        ref_w.bias = with_bias ? d_bias.data() : nullptr;
        be.linear(d_x.data(), s.m, ref_w, d_y.data());
        std::vector<double> ref(s.m * s.n), tol(s.m * s.n);
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t o = 0; o < s.n; ++o) {
            double acc = 0, mag = 0;
            for (int64_t j = 0; j < s.k; ++j) {
              const double t = double(x[i * s.k + j]) * w[o * s.k + j];
              acc += t;
              mag += std::fabs(t);
            }
            const double b = with_bias ? bias[o] : 0.0;
            ref[i * s.n + o] = acc + b;
            tol[i * s.n + o] = double(s.k + 2) * kEps * (mag + std::fabs(b));
          }
        check_close(to_host(be, d_y), ref, tol, "linear");
      }
    }
  }
}
BACKEND_TEST_CASE("linear F32 and BF16 weights with and without bias", linear_case)

// ---- linear_w8a8 --------------------------------------------------------------------------------

// A product of two E4M3 values is exact in FP32 (4-bit significands, exponents >= -18), so only
// the FP32 sum's order and the three final roundings (a_scale * s_w, the scaling, + bias) differ:
// |y - ref| <= (k + 4) eps (|a_scale s_w| sum |qa qw| + |b|).
void linear_w8a8_case(Backend& be) {
  std::mt19937 rng(9);
  for (const LinearShape s : kLinearShapes) {
    for (ScaleGranularity w_gran : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor}) {
      for (ScaleGranularity a_gran : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor}) {
        for (bool with_bias : {false, true}) {
          const bool a_dynamic = a_gran == ScaleGranularity::PerRow;
          CAPTURE(s.m, s.n, s.k, w_gran == ScaleGranularity::PerRow, a_dynamic, with_bias);
          const std::vector<uint8_t> qa = random_e4m3_codes(rng, s.m * s.k);
          const std::vector<uint8_t> qw = random_e4m3_codes(rng, s.n * s.k);
          const std::vector<float> w_scale =
              uniform(rng, w_gran == ScaleGranularity::PerRow ? s.n : 1, 1e-3f, 1e-2f);
          const std::vector<float> a_scale = uniform(rng, a_dynamic ? s.m : 1, 1e-3f, 3e-2f);
          const std::vector<float> bias = uniform(rng, s.n, -4, 4);
          const auto d_qa = to_device(be, qa);
          const auto d_qw = to_device(be, qw);
          const auto d_ws = to_device(be, w_scale);
          const auto d_as = to_device(be, a_scale);
          const auto d_bias = to_device(be, bias);
          auto d_y = device_zeros<float>(be, s.m * s.n);
          WeightRef w{d_qw.data(), DType::FP8_E4M3, s.n, s.k, d_ws.data(), w_gran,
                      with_bias ? d_bias.data() : nullptr};
          be.linear_w8a8(d_qa.data(), d_as.data(), a_gran, s.m, w, d_y.data());
          std::vector<double> ref(s.m * s.n), tol(s.m * s.n);
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t o = 0; o < s.n; ++o) {
              double acc = 0, mag = 0;
              for (int64_t j = 0; j < s.k; ++j) {
                const double t = double(ref_fp8_value(DType::FP8_E4M3, qa[i * s.k + j])) *
                                 ref_fp8_value(DType::FP8_E4M3, qw[o * s.k + j]);
                acc += t;
                mag += std::fabs(t);
              }
              const double sc = double(a_scale[a_dynamic ? i : 0]) *
                                w_scale[w_gran == ScaleGranularity::PerRow ? o : 0];
              const double b = with_bias ? bias[o] : 0.0;
              ref[i * s.n + o] = acc * sc + b;
              tol[i * s.n + o] = double(s.k + 4) * kEps * (mag * std::fabs(sc) + std::fabs(b));
            }
          check_close(to_host(be, d_y), ref, tol, "linear_w8a8");
        }
      }
    }
  }
}
BACKEND_TEST_CASE("linear_w8a8 per-row and per-tensor weight and activation scales",
                  linear_w8a8_case)

// ---- Batch invariance of linear and linear_w8a8 -------------------------------------------------

// Row i of an m = 17 batch is bit-identical to the same row run alone (m = 1): the contract's
// batch invariance (each output's FP32 sum is the same instruction sequence whatever m is).
void linear_batch_invariance_case(Backend& be) {
  std::mt19937 rng(10);
  const int64_t m = 17, n = 37, k = 133;
  const std::vector<float> x = uniform(rng, m * k, -2, 2);
  const std::vector<float> w = uniform(rng, n * k, -1, 1);
  std::vector<uint16_t> w_bf16(w.size());
  for (size_t i = 0; i < w.size(); ++i) w_bf16[i] = ref_bf16(w[i]);
  const std::vector<float> bias = uniform(rng, n, -1, 1);
  const std::vector<uint8_t> qa = random_e4m3_codes(rng, m * k);
  const std::vector<uint8_t> qw = random_e4m3_codes(rng, n * k);
  const std::vector<float> w_scale = uniform(rng, n, 1e-3f, 1e-2f);
  const std::vector<float> a_scale = uniform(rng, m, 1e-3f, 3e-2f);
  const auto d_x = to_device(be, x);
  const auto d_w = to_device(be, w);
  const auto d_w_bf16 = to_device(be, w_bf16);
  const auto d_bias = to_device(be, bias);
  const auto d_qa = to_device(be, qa);
  const auto d_qw = to_device(be, qw);
  const auto d_ws = to_device(be, w_scale);
  const auto d_as = to_device(be, a_scale);
  auto d_y = device_zeros<float>(be, m * n);
  auto d_y1 = device_zeros<float>(be, n);
  auto d_row = device_zeros<float>(be, k);      // row i alone, in its own buffer
  auto d_qrow = device_zeros<uint8_t>(be, k);
  auto d_srow = device_zeros<float>(be, 1);

  auto compare = [&](const std::string& what, auto run_one) {
    const std::vector<float> all = to_host(be, d_y);
    MismatchLog log;
    for (int64_t i = 0; i < m; ++i) {
      run_one(i);
      const std::vector<float> one = to_host(be, d_y1);
      for (int64_t o = 0; o < n; ++o)
        if (bits_of(one[o]) != bits_of(all[i * n + o]))
          log.add("row %lld out %lld: m=17 %a, m=1 %a", static_cast<long long>(i),
                  static_cast<long long>(o), all[i * n + o], one[o]);
    }
    INFO(what << ": " << log.summary());
    CHECK(log.count() == 0);
  };
  for (DType dtype : {DType::F32, DType::BF16}) {
    WeightRef wr{dtype == DType::F32 ? static_cast<const void*>(d_w.data()) : d_w_bf16.data(),
                 dtype, n, k, nullptr, ScaleGranularity::PerRow, d_bias.data()};
    be.linear(d_x.data(), m, wr, d_y.data());
    compare(std::string("linear ") + dtype_name(dtype), [&](int64_t i) {
      be.upload(d_row.buffer, 0, x.data() + i * k, k * 4);
      be.linear(d_row.data(), 1, wr, d_y1.data());
    });
  }
  for (ScaleGranularity a_gran : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor}) {
    const bool a_dynamic = a_gran == ScaleGranularity::PerRow;
    WeightRef wr{d_qw.data(), DType::FP8_E4M3, n, k, d_ws.data(), ScaleGranularity::PerRow,
                 d_bias.data()};
    be.linear_w8a8(d_qa.data(), d_as.data(), a_gran, m, wr, d_y.data());
    compare(a_dynamic ? "linear_w8a8 dynamic" : "linear_w8a8 static", [&](int64_t i) {
      be.upload(d_qrow.buffer, 0, qa.data() + i * k, k);
      be.upload(d_srow.buffer, 0, a_scale.data() + (a_dynamic ? i : 0), 4);
      be.linear_w8a8(d_qrow.data(), d_srow.data(), a_gran, 1, wr, d_y1.data());
    });
  }
}
BACKEND_TEST_CASE("linear and linear_w8a8 are batch invariant m=1 vs m=17",
                  linear_batch_invariance_case)

// ---- KV cache: dtypes, encoding, write_kv_cache ------------------------------------------------

/// The KV cache dtypes: every one KVCacheView lists (kernels/common/views.h), F32 (calibration
/// runs) included, so every backend must store and attend over all five.
const DType kKVDTypes[] = {DType::BF16, DType::F16, DType::FP8_E4M3, DType::FP8_E5M2, DType::F32};

// Host encoding of one element as the contract says (backend.h write_kv_cache): 16-bit RNE
// (overflow to inf, NaN -> 0x7FFF), FP8 fp8(x / scale) with FP32 division, RNE, saturation.
void encode_kv(DType d, float x, float scale, uint8_t* dst) {
  switch (d) {
    case DType::F32: std::memcpy(dst, &x, 4); break;
    case DType::BF16: { const uint16_t b = ref_bf16(x); std::memcpy(dst, &b, 2); break; }
    case DType::F16: { const uint16_t b = ref_fp16(x); std::memcpy(dst, &b, 2); break; }
    case DType::FP8_E4M3:
    case DType::FP8_E5M2: *dst = ref_fp8(d, x / scale); break;
  }
}

// Exact FP32 value a kernel reads back: 16-bit values widen exactly; FP8: float(q) * scale.
float decode_kv(DType d, const uint8_t* src, float scale) {
  switch (d) {
    case DType::F32: { float x; std::memcpy(&x, src, 4); return x; }
    case DType::BF16: {
      uint16_t b;
      std::memcpy(&b, src, 2);
      return static_cast<float>(octet_test::code_value(octet_test::kBf16, b));
    }
    case DType::F16: {
      uint16_t b;
      std::memcpy(&b, src, 2);
      return static_cast<float>(octet_test::code_value(octet_test::kFp16, b));
    }
    case DType::FP8_E4M3:
    case DType::FP8_E5M2: return ref_fp8_value(d, *src) * scale;
  }
  return 0;
}

// Per-KV-head scales for a dtype (distinct per head; FP8 ones map inputs in [-2.5, 2.5] below the
// top code), or empty for 16/32-bit caches (the view then passes null scales). Head 0's scale is
// 61 * 2^e (see fp8_midpoints).
std::vector<float> kv_scales(DType d, int64_t kv_heads, bool v) {
  if (!dtype_is_fp8(d)) return {};
  std::vector<float> s(kv_heads);
  for (int64_t h = 0; h < kv_heads; ++h)
    s[h] = d == DType::FP8_E4M3 ? (h == 0 ? 61 * 0x1p-13f : (v ? 0.008f : 0.006f) * (1 + 0.37f * h))
                                : (h == 0 ? kTieScale : (v ? 0.5f : 0.25f) * float(1 << h));
  return s;
}

// Bit-exact: the contract fixes every stored byte; skipped (negative) slots and unwritten slots
// keep the cache's previous bytes.
void write_kv_cache_case(Backend& be) {
  std::mt19937 rng(11);
  const int64_t num_blocks = 4, block_size = 16, kv_heads = 3, head_dim = 36;
  const int64_t row = kv_heads * head_dim;  // elements per slot
  for (DType dtype : kKVDTypes) {
    const int64_t eb = dtype_bytes(dtype);
    const int64_t cache_bytes = num_blocks * block_size * row * eb;
    std::vector<uint8_t> sentinel(cache_bytes);
    for (int64_t i = 0; i < cache_bytes; ++i) sentinel[i] = static_cast<uint8_t>(0xA5 ^ (i * 13));
    const std::vector<float> k_scale = kv_scales(dtype, kv_heads, false);
    const std::vector<float> v_scale = kv_scales(dtype, kv_heads, true);
    const auto d_ks = to_device(be, k_scale);
    const auto d_vs = to_device(be, v_scale);
    for (const std::vector<int64_t>& slots :
         {std::vector<int64_t>{47},
          std::vector<int64_t>{5, -1, 63, 0, 17, 16, -7, 40, 31, 32, 2}}) {
      const int64_t n = static_cast<int64_t>(slots.size());
      CAPTURE(dtype_name(dtype), n);
      std::vector<float> k = uniform(rng, n * row, -2.5f, 2.5f);
      std::vector<float> v = uniform(rng, n * row, -2.5f, 2.5f);
      if (n > 4) {
        // Head 0 of tokens 0..2: FP8 scale * midpoints (ties of x / scale, see fp8_midpoints);
        // heads 1 and 2: BF16 and F16 ties (RNE, not truncation or half up). Others random.
        const std::vector<float> mids = dtype_is_fp8(dtype) ? fp8_midpoints(dtype)
                                                            : std::vector<float>{};
        const float bf16_ties[] = {std::bit_cast<float>(0x3F808000u),   // -> 0x3F80
                                   std::bit_cast<float>(0x3F818000u),   // -> 0x3F82
                                   std::bit_cast<float>(0xBFC08000u)};  // -> 0xBFC0
        const float fp16_ties[] = {1.0f + 0x1p-11f,      // -> 1.0 (0x3C00)
                                   1.0f + 3 * 0x1p-11f,  // -> 1 + 2^-9 (0x3C02)
                                   -(2.0f + 0x1p-10f)};  // -> -2.0 (0xC000)
        for (int64_t t = 0; t < 3; ++t)
          for (int64_t j = 0; j < head_dim; ++j) {
            float* kt = k.data() + t * row;
            float* vt = v.data() + t * row;
            if (!mids.empty()) {
              const float mid = mids[static_cast<size_t>(t * head_dim + j) % mids.size()];
              kt[j] = k_scale[0] * (j % 2 ? mid : -mid);
              vt[j] = v_scale[0] * mid;
            }
            kt[head_dim + j] = bf16_ties[j % 3];
            vt[2 * head_dim + j] = fp16_ties[j % 3];
          }
        k[3 * row + 3] = 1e6f;              // FP8: saturates; BF16: finite; F16: inf
        k[row + 4 + 2 * head_dim] = -1e6f;  // a skipped token's value
        k[5 * row + 5] = kNaN;              // NaN stays NaN
        v[3 * row + 7] = -0.0f;             // keeps its sign
        v[3 * row + 2] = 1e-7f;             // FP8 subnormal or zero after scaling
        v[4 * row + 35] = 70000.0f;         // F16: rounds to inf
      }
      const auto d_k = to_device(be, k);
      const auto d_v = to_device(be, v);
      const auto d_slots = to_device(be, slots);
      Buffer kc = be.allocate(cache_bytes), vc = be.allocate(cache_bytes);
      be.upload(kc, 0, sentinel.data(), cache_bytes);
      be.upload(vc, 0, sentinel.data(), cache_bytes);
      KVCacheView view{kc.data(), vc.data(), dtype, num_blocks, block_size, kv_heads, head_dim,
                       k_scale.empty() ? nullptr : d_ks.data(),
                       v_scale.empty() ? nullptr : d_vs.data()};
      be.write_kv_cache(view, d_k.data(), d_v.data(), d_slots.data(), n);
      std::vector<uint8_t> k_expect = sentinel, v_expect = sentinel;
      for (int64_t t = 0; t < n; ++t) {
        if (slots[t] < 0) continue;
        for (int64_t h = 0; h < kv_heads; ++h)
          for (int64_t j = 0; j < head_dim; ++j) {
            const int64_t src = t * row + h * head_dim + j;
            const int64_t dst = (slots[t] * row + h * head_dim + j) * eb;
            encode_kv(dtype, k[src], k_scale.empty() ? 1.0f : k_scale[h], &k_expect[dst]);
            encode_kv(dtype, v[src], v_scale.empty() ? 1.0f : v_scale[h], &v_expect[dst]);
          }
      }
      std::vector<uint8_t> k_got(cache_bytes), v_got(cache_bytes);
      be.download(kc, 0, k_got.data(), cache_bytes);
      be.download(vc, 0, v_got.data(), cache_bytes);
      check_identical(k_got, k_expect, "K cache bytes");
      check_identical(v_got, v_expect, "V cache bytes");
    }
  }
}
BACKEND_TEST_CASE("write_kv_cache every KV dtype with per-head scales and negative slots",
                  write_kv_cache_case)

// ---- paged_attention ----------------------------------------------------------------------------

struct SeqSpec {
  int64_t seq_len, num_queries;
};

// A paged cache filled on the host (reference encoding, shuffled block ids, block-table padding
// pointing at other sequences' blocks so that reading past a sequence's blocks shows), with the
// exact FP32 values a kernel reads back, and the batch arrays in backend memory.
struct AttentionSetup {
  int64_t num_heads = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  DType dtype = DType::BF16;
  std::vector<SeqSpec> seqs;
  // host
  std::vector<std::vector<float>> k_val, v_val;  // [seq][pos * kv_heads * head_dim + ...]
  std::vector<int64_t> query_start_loc, seq_lens;
  std::vector<int32_t> block_tables;
  int64_t max_blocks_per_seq = 0, num_blocks = 0;
  std::vector<float> q;  // [num_tokens, num_heads, head_dim]
  std::vector<float> k_scale, v_scale;
  // device
  Buffer kc, vc;
  DeviceArray<float> d_ks, d_vs, d_q;

  int64_t num_tokens() const { return query_start_loc.back(); }
  KVCacheView view() const {
    return KVCacheView{kc.data(), vc.data(), dtype, num_blocks, block_size, kv_heads, head_dim,
                       k_scale.empty() ? nullptr : d_ks.data(),
                       v_scale.empty() ? nullptr : d_vs.data()};
  }
};

AttentionSetup make_attention(Backend& be, std::mt19937& rng, int64_t num_heads,
                              int64_t kv_heads, int64_t head_dim, int64_t block_size, DType dtype,
                              std::vector<SeqSpec> seqs) {
  AttentionSetup a;
  a.num_heads = num_heads;
  a.kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.block_size = block_size;
  a.dtype = dtype;
  a.seqs = std::move(seqs);
  const int64_t row = kv_heads * head_dim, eb = dtype_bytes(dtype);
  const int64_t num_seqs = static_cast<int64_t>(a.seqs.size());
  int64_t total_blocks = 0;
  for (const SeqSpec& s : a.seqs) {
    const int64_t nb = (s.seq_len + block_size - 1) / block_size;
    a.max_blocks_per_seq = std::max(a.max_blocks_per_seq, nb + 1);  // >= 1 padding entry each
    total_blocks += nb;
  }
  a.num_blocks = total_blocks + 2;  // two blocks nobody owns
  std::vector<int32_t> ids(a.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  a.k_scale = kv_scales(dtype, kv_heads, false);
  a.v_scale = kv_scales(dtype, kv_heads, true);
  std::vector<uint8_t> kbytes(a.num_blocks * block_size * row * eb, 0),
      vbytes(kbytes.size(), 0);
  a.block_tables.assign(num_seqs * a.max_blocks_per_seq, 0);
  a.query_start_loc = {0};
  int64_t next_block = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const SeqSpec& spec = a.seqs[s];
    const int64_t nb = (spec.seq_len + block_size - 1) / block_size;
    for (int64_t b = 0; b < a.max_blocks_per_seq; ++b)  // padding: some other sequence's block
      a.block_tables[s * a.max_blocks_per_seq + b] =
          b < nb ? ids[next_block + b] : ids[(next_block + nb) % total_blocks];
    std::vector<float> kv = uniform(rng, spec.seq_len * row, -2.5f, 2.5f);
    std::vector<float> vv = uniform(rng, spec.seq_len * row, -2.5f, 2.5f);
    a.k_val.emplace_back(spec.seq_len * row);
    a.v_val.emplace_back(spec.seq_len * row);
    for (int64_t p = 0; p < spec.seq_len; ++p) {
      const int64_t slot = int64_t{ids[next_block + p / block_size]} * block_size + p % block_size;
      for (int64_t h = 0; h < kv_heads; ++h)
        for (int64_t j = 0; j < head_dim; ++j) {
          const int64_t src = p * row + h * head_dim + j;
          const int64_t dst = (slot * row + h * head_dim + j) * eb;
          const float ks = a.k_scale.empty() ? 1.0f : a.k_scale[h];
          const float vs = a.v_scale.empty() ? 1.0f : a.v_scale[h];
          encode_kv(dtype, kv[src], ks, &kbytes[dst]);
          encode_kv(dtype, vv[src], vs, &vbytes[dst]);
          a.k_val.back()[src] = decode_kv(dtype, &kbytes[dst], ks);
          a.v_val.back()[src] = decode_kv(dtype, &vbytes[dst], vs);
        }
    }
    next_block += nb;
    a.seq_lens.push_back(spec.seq_len);
    a.query_start_loc.push_back(a.query_start_loc.back() + spec.num_queries);
  }
  a.q = uniform(rng, a.num_tokens() * num_heads * head_dim, -2, 2);
  a.kc = be.allocate(static_cast<int64_t>(kbytes.size()));
  a.vc = be.allocate(static_cast<int64_t>(vbytes.size()));
  be.upload(a.kc, 0, kbytes.data(), static_cast<int64_t>(kbytes.size()));
  be.upload(a.vc, 0, vbytes.data(), static_cast<int64_t>(vbytes.size()));
  a.d_ks = to_device(be, a.k_scale);
  a.d_vs = to_device(be, a.v_scale);
  a.d_q = to_device(be, a.q);
  return a;
}

// Runs sequences [first, first + count) of `a` as one batch; returns out [their rows, heads, dim].
std::vector<float> run_attention(Backend& be, const AttentionSetup& a, int64_t first,
                                 int64_t count, int64_t window, float softmax_scale) {
  const int64_t q0 = a.query_start_loc[first], q1 = a.query_start_loc[first + count];
  std::vector<int64_t> qsl;
  for (int64_t s = first; s <= first + count; ++s) qsl.push_back(a.query_start_loc[s] - q0);
  const std::vector<int64_t> lens(a.seq_lens.begin() + first, a.seq_lens.begin() + first + count);
  const std::vector<int32_t> table(a.block_tables.begin() + first * a.max_blocks_per_seq,
                                   a.block_tables.begin() + (first + count) * a.max_blocks_per_seq);
  const int64_t width = a.num_heads * a.head_dim;
  const std::vector<float> q(a.q.begin() + q0 * width, a.q.begin() + q1 * width);
  const auto d_qsl = to_device(be, qsl);
  const auto d_lens = to_device(be, lens);
  const auto d_table = to_device(be, table);
  const auto d_q = to_device(be, q);
  auto d_out = device_zeros<float>(be, (q1 - q0) * width);
  PagedAttentionBatch batch{count, d_qsl.data(), d_lens.data(), d_table.data(),
                            a.max_blocks_per_seq};
  be.paged_attention(a.view(), d_q.data(), batch, a.num_heads, window, softmax_scale,
                     d_out.data());
  return to_host(be, d_out);
}

// Reference in double over the exact FP32 values the cache holds. Tolerance per output element
// (o = sum_t p_t v_t over the n visible positions):
//   each score errs by <= E = (d + 4) eps * scale * max_t sum_i |q_i k_ti| (FP32 dot of d terms,
//   the FP8 dequantization and scale products), which moves every softmax weight by a relative
//   <= 2E; exp (<= 2 ulp), the FP32 sum of n weights and the normalisation add <= (n + 4) u;
//   the FP32 V sum <= n u sum p_t |v_t|; split-softmax rescaling a few u more. So
//   |o_j - ref_j| <= (4 E + (n + 8) eps) * max_t |v_tj|  (a factor ~2 above the first-order
//   bound).
void attention_reference(const AttentionSetup& a, int64_t window, float softmax_scale,
                         std::vector<double>& ref, std::vector<double>& tol) {
  const int64_t d = a.head_dim, group = a.num_heads / a.kv_heads, row = a.kv_heads * d;
  ref.assign(a.num_tokens() * a.num_heads * d, 0);
  tol.assign(ref.size(), 0);
  for (size_t s = 0; s < a.seqs.size(); ++s) {
    const int64_t nq = a.query_start_loc[s + 1] - a.query_start_loc[s], len = a.seq_lens[s];
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t token = a.query_start_loc[s] + i, pos = len - nq + i;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      for (int64_t h = 0; h < a.num_heads; ++h) {
        const int64_t kvh = h / group;
        const float* qh = a.q.data() + (token * a.num_heads + h) * d;
        std::vector<double> score;
        double mag = 0, mx = -INFINITY;
        for (int64_t p = lo; p <= pos; ++p) {
          const float* kp = a.k_val[s].data() + p * row + kvh * d;
          double dot = 0, m = 0;
          for (int64_t j = 0; j < d; ++j) {
            dot += double(qh[j]) * kp[j];
            m += std::fabs(double(qh[j]) * kp[j]);
          }
          score.push_back(dot * softmax_scale);
          mx = std::max(mx, score.back());
          mag = std::max(mag, m * softmax_scale);
        }
        double z = 0;
        for (double& x : score) z += (x = std::exp(x - mx));
        const double e_score = double(d + 4) * kEps * mag;
        const double n = double(score.size());
        for (int64_t j = 0; j < d; ++j) {
          double o = 0, vmax = 0;
          for (int64_t p = lo; p <= pos; ++p) {
            const float vj = a.v_val[s][p * row + kvh * d + j];
            o += score[p - lo] * vj;
            vmax = std::max(vmax, std::fabs(double(vj)));
          }
          const int64_t idx = (token * a.num_heads + h) * d + j;
          ref[idx] = o / z;
          tol[idx] = (4 * e_score + (n + 8) * kEps) * vmax + 1e-30;
        }
      }
    }
  }
}

struct AttentionConfig {
  int64_t num_heads, kv_heads, head_dim, block_size;
  std::vector<SeqSpec> seqs;
  std::vector<int64_t> windows;
};

// Varlen batches: a first decode step, decodes mid-block, a whole prefill, a chunked prefill
// ending mid-block, a long context (> 256: the CPU's flash-decoding partitions); GQA (3 query
// heads per KV head), MQA, MHA; head dims 36, 64 and 144 (past the AVX-512 kernel's 128); block
// sizes 16 and 5; windows 0 (full), 1, 7, one block, and one longer than every sequence.
const std::vector<AttentionConfig>& attention_configs() {
  static const std::vector<AttentionConfig> configs = {
      {6, 2, 36, 16, {{1, 1}, {37, 1}, {20, 20}, {50, 13}, {300, 2}}, {0, 1, 7, 16, 1000}},
      {4, 1, 64, 5, {{9, 3}, {1, 1}, {23, 23}, {18, 1}}, {0, 4}},
      {2, 2, 144, 16, {{33, 2}, {17, 17}}, {0, 9}},
  };
  return configs;
}

void paged_attention_case(Backend& be) {
  std::mt19937 rng(12);
  for (const AttentionConfig& c : attention_configs()) {
    for (DType dtype : kKVDTypes) {
      const AttentionSetup a =
          make_attention(be, rng, c.num_heads, c.kv_heads, c.head_dim, c.block_size, dtype, c.seqs);
      const float softmax_scale = 1.0f / std::sqrt(float(c.head_dim));
      for (int64_t window : c.windows) {
        CAPTURE(c.num_heads, c.kv_heads, c.head_dim, c.block_size, dtype_name(dtype), window);
        const std::vector<float> got = run_attention(
            be, a, 0, static_cast<int64_t>(a.seqs.size()), window, softmax_scale);
        std::vector<double> ref, tol;
        attention_reference(a, window, softmax_scale, ref, tol);
        check_close(got, ref, tol, "paged_attention");
      }
    }
  }
}
BACKEND_TEST_CASE("paged_attention varlen GQA sliding windows every KV dtype",
                  paged_attention_case)

// Each sequence run alone is bit-identical to its rows in the whole batch (37 query rows of 5
// sequences, among them a decode row: m = 1 vs m = 37), for every KV dtype and a window.
void paged_attention_batch_invariance_case(Backend& be) {
  std::mt19937 rng(13);
  const AttentionConfig& c = attention_configs()[0];
  for (DType dtype : kKVDTypes) {
    const AttentionSetup a =
        make_attention(be, rng, c.num_heads, c.kv_heads, c.head_dim, c.block_size, dtype, c.seqs);
    for (int64_t window : {int64_t{0}, int64_t{7}}) {
      CAPTURE(dtype_name(dtype), window);
      const float scale = 1.0f / std::sqrt(float(c.head_dim));
      const int64_t num_seqs = static_cast<int64_t>(a.seqs.size());
      const std::vector<float> all = run_attention(be, a, 0, num_seqs, window, scale);
      const int64_t width = c.num_heads * c.head_dim;
      for (int64_t s = 0; s < num_seqs; ++s) {
        const std::vector<float> alone = run_attention(be, a, s, 1, window, scale);
        const std::vector<float> in_batch(all.begin() + a.query_start_loc[s] * width,
                                          all.begin() + a.query_start_loc[s + 1] * width);
        INFO("sequence " << s);
        check_identical(alone, in_batch, "sequence alone vs in the batch");
      }
    }
  }
}
BACKEND_TEST_CASE("paged_attention is batch invariant", paged_attention_batch_invariance_case)

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

}  // namespace

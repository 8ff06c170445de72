// The fast FP32 ops (kernels/cpu/ops.h) against the plain references (ops_ref.h), through the
// dispatching entry points and the explicit AVX2 ones. Tolerances, u = 2^-24:
//   rope: bit-identical (same angle, same cos/sin, same unfused mul/sub).
//   linear: summation order only; each order errs by <= (k - 1) u S, S = sum |x w|, so
//     |y - y_ref| <= 2 k u S + 2 u |bias| + 1e-37.
//   rms_norm: the sum of squares differs by <= 2 n u sum x^2 (relative 2 n u), which moves
//     1/sqrt(.) by <= n u relative, plus 4 roundings: |y - y_ref| <= (n + 4) u |y_ref| + 1e-37.
//   silu_mul: vector exp (<= 2 ulp) instead of std::exp; 1 + e, the division and the product add
//     3 roundings: |y - y_ref| <= 8 u |y_ref| + 1e-36 (the absolute part covers exp clamping for
//     gate < -87, where both results are below 1e-36).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/ops_ref.h"

using namespace octet;

namespace {

constexpr double kU = 0x1p-24;

std::vector<float> normal(std::mt19937& rng, int64_t count, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = d(rng);
  return v;
}

bool have_avx2() {
  if (!fp8_avx2_available()) WARN("AVX2+FMA+F16C not available: only the fallback is tested");
  return fp8_avx2_available();
}

}  // namespace

TEST_CASE("cpu::linear agrees with ref::linear up to summation order", "[ops]") {
  using Fn = void (*)(const float*, const float*, const float*, float*, int64_t, int64_t,
                      int64_t);
  std::vector<std::pair<Fn, const char*>> paths{{&cpu::linear, "dispatch"}};
  if (have_avx2()) paths.push_back({&cpu::avx2::linear, "avx2"});
  struct Case {
    int64_t m, n, k;
  };
  const Case cases[] = {{1, 5, 13},    {1, 576, 576}, {1, 192, 1536}, {1, 1536, 576},
                        {2, 37, 64},   {7, 192, 576}, {64, 576, 576}, {130, 37, 1536},
                        {130, 192, 13}, {3, 4, 8},    {4, 9, 17}};
  std::mt19937 rng(5);
  for (const auto& [fn, name] : paths) {
    for (const auto& c : cases) {
      for (bool with_bias : {false, true}) {
        const auto x = normal(rng, c.m * c.k), w = normal(rng, c.n * c.k, 0.05f);
        const auto bias = normal(rng, c.n);
        const float* b = with_bias ? bias.data() : nullptr;
        std::vector<float> y(static_cast<size_t>(c.m * c.n), -1.0f), y_ref(y.size(), -2.0f);
        ref::linear(x.data(), w.data(), b, y_ref.data(), c.m, c.n, c.k);
        fn(x.data(), w.data(), b, y.data(), c.m, c.n, c.k);
        int64_t bad = 0;
        for (int64_t i = 0; i < c.m; ++i)
          for (int64_t j = 0; j < c.n; ++j) {
            double sum_abs = 0;
            for (int64_t t = 0; t < c.k; ++t)
              sum_abs += std::fabs(double(x[i * c.k + t]) * w[j * c.k + t]);
            const double tol =
                2.0 * c.k * kU * sum_abs + (with_bias ? 2.0 * kU * std::fabs(bias[j]) : 0) + 1e-37;
            bad += !(std::fabs(double(y[i * c.n + j]) - y_ref[i * c.n + j]) <= tol);
          }
        INFO(name << " m=" << c.m << " n=" << c.n << " k=" << c.k << " bias=" << with_bias);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("cpu::rms_norm agrees with ref::rms_norm", "[ops]") {
  std::mt19937 rng(9);
  for (int64_t n : {1, 7, 8, 13, 64, 576, 1536}) {
    const auto x = normal(rng, 3 * n, 3.0f), w = normal(rng, n);
    std::vector<float> y_ref(x.size());
    for (int64_t r = 0; r < 3; ++r)
      ref::rms_norm(x.data() + r * n, w.data(), y_ref.data() + r * n, n, 1e-5f);
    auto check = [&](const std::vector<float>& y, const char* name) {
      int64_t bad = 0;
      for (size_t i = 0; i < y.size(); ++i)
        bad += !(std::fabs(double(y[i]) - y_ref[i]) <= (n + 4) * kU * std::fabs(y_ref[i]) + 1e-37);
      INFO(name << " n=" << n);
      CHECK(bad == 0);
    };
    std::vector<float> y(x.size());
    for (int64_t r = 0; r < 3; ++r)
      cpu::rms_norm(x.data() + r * n, w.data(), y.data() + r * n, n, 1e-5f);
    check(y, "dispatch");
    cpu::rms_norm_rows(x.data(), w.data(), y.data(), 3, n, 1e-5f);
    check(y, "rows");
    std::vector<float> inplace = x;  // x and y may alias
    cpu::rms_norm_rows(inplace.data(), w.data(), inplace.data(), 3, n, 1e-5f);
    check(inplace, "in place");
    if (have_avx2()) {
      for (int64_t r = 0; r < 3; ++r)
        cpu::avx2::rms_norm(x.data() + r * n, w.data(), y.data() + r * n, n, 1e-5f);
      check(y, "avx2");
    }
  }
}

TEST_CASE("cpu::rope is bit-identical to ref::rope in both layouts", "[ops]") {
  std::mt19937 rng(13);
  struct Case {
    int64_t heads, head_dim, rot_dim;
  };
  const Case cases[] = {{9, 64, 64}, {3, 64, 32}, {2, 16, 12}, {4, 128, 128}, {1, 8, 8},
                        {5, 96, 96}, {2, 40, 40}};
  for (const auto& c : cases) {
    std::vector<float> inv(static_cast<size_t>(c.rot_dim / 2));
    for (size_t i = 0; i < inv.size(); ++i)
      inv[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(c.rot_dim));
    for (auto layout : {RopeLayout::AdjacentPairs, RopeLayout::HalfSplit}) {
      for (int64_t pos : {0, 1, 37, 4095, 100000}) {
        const auto x = normal(rng, c.heads * c.head_dim);
        auto expect = x;
        ref::rope(expect.data(), c.heads, c.head_dim, c.rot_dim, pos, inv.data(), layout);
        auto got = x;
        cpu::rope(got.data(), c.heads, c.head_dim, c.rot_dim, pos, inv.data(), layout);
        INFO("heads=" << c.heads << " d=" << c.head_dim << " rot=" << c.rot_dim
                      << " pos=" << pos << " half_split=" << (layout == RopeLayout::HalfSplit));
        CHECK(got == expect);
        if (fp8_avx2_available()) {
          got = x;
          cpu::avx2::rope(got.data(), c.heads, c.head_dim, c.rot_dim, pos, inv.data(), layout);
          CHECK(got == expect);
        }
      }
    }
  }
  // rope_rows: token t at positions[t], rows strided.
  const int64_t tokens = 5, heads = 3, d = 64, stride = heads * d + 7;
  std::vector<float> inv(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / d);
  const std::vector<int64_t> positions{4, 0, 99, 3, 12};
  const auto x = normal(rng, tokens * stride);
  auto expect = x, got = x;
  for (int64_t t = 0; t < tokens; ++t)
    ref::rope(expect.data() + t * stride, heads, d, d, positions[t], inv.data(),
              RopeLayout::HalfSplit);
  cpu::rope_rows(got.data(), tokens, stride, heads, d, d, positions.data(), inv.data(),
                 RopeLayout::HalfSplit);
  CHECK(got == expect);
}

TEST_CASE("cpu::silu_mul agrees with ref::silu_mul", "[ops]") {
  std::mt19937 rng(17);
  for (int64_t n : {1, 7, 8, 15, 1536, 100000}) {
    auto gate = normal(rng, n, 4.0f);
    const auto up = normal(rng, n);
    if (n > 8) {  // extremes: exp overflow/underflow regions and zero
      gate[0] = 0.0f;
      gate[1] = 100.0f;
      gate[2] = -100.0f;
      gate[3] = 88.5f;
      gate[4] = -88.5f;
      gate[5] = -87.0f;
    }
    std::vector<float> y_ref(static_cast<size_t>(n)), y(y_ref.size());
    ref::silu_mul(gate.data(), up.data(), y_ref.data(), n);
    auto check = [&](const char* name) {
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i)
        bad += !(std::fabs(double(y[i]) - y_ref[i]) <= 8 * kU * std::fabs(y_ref[i]) + 1e-36);
      INFO(name << " n=" << n);
      CHECK(bad == 0);
    };
    cpu::silu_mul(gate.data(), up.data(), y.data(), n);
    check("dispatch");
    if (have_avx2()) {
      cpu::avx2::silu_mul(gate.data(), up.data(), y.data(), n);
      check("avx2");
    }
    y = gate;  // out may alias gate
    cpu::silu_mul(y.data(), up.data(), y.data(), n);
    check("in place");
  }
}

// linear_w8a8 (dispatching, scalar and AVX2 paths) against the plain reference
// ref::linear_w8a8, across shapes that hit the GEMV (m == 1), the GEMM edges (m % 3, n % 4,
// k % 8 and k % 16 tails) and the threaded paths, both scale granularities, with and without bias.
//
// Tolerance: every product qa * qw of two E4M3 values is exact in FP32, so the paths differ only
// in the order of the FP32 sum. Each order's error is at most (k - 1) u S, S = sum_k |qa qw|,
// u = 2^-24, so |acc - acc_ref| <= 2 k u S; the epilogue acc * (s_a s_w) + b rounds twice more:
//   |y - y_ref| <= (2 k u S + 4 u |acc|) |s_a s_w| + 4 u |b| + 1e-37.
// A wrong pairing or a dropped tail element is off by about S / k, far above this.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "fp8_test_support.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/w8a8.h"

using namespace octet;

namespace {

constexpr double kU = 0x1p-24;

std::vector<float> random_scales(std::mt19937& rng, int64_t count) {
  std::uniform_real_distribution<float> d(-12.0f, -2.0f);
  std::vector<float> s(static_cast<size_t>(count));
  for (auto& v : s) v = std::exp2(d(rng));
  return s;
}

using LinearFn = void (*)(const uint8_t*, const float*, ScaleGranularity, const Fp8WeightView&,
                          const float*, float*, int64_t);

struct Case {
  int64_t m, n, k;
};

void check_against_reference(LinearFn fn, const char* path, const Case& c, ScaleGranularity wg,
                             ScaleGranularity ag, bool with_bias, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto qa = octet_test::random_finite_e4m3(rng, c.m * c.k);
  const auto qw = octet_test::random_finite_e4m3(rng, c.n * c.k);
  const auto sa = random_scales(rng, ag == ScaleGranularity::PerRow ? c.m : 1);
  const auto sw = random_scales(rng, wg == ScaleGranularity::PerRow ? c.n : 1);
  std::vector<float> bias(static_cast<size_t>(c.n));
  std::uniform_real_distribution<float> db(-2.0f, 2.0f);
  for (auto& b : bias) b = db(rng);
  const float* b = with_bias ? bias.data() : nullptr;

  const Fp8WeightView w{qw.data(), sw.data(), wg, c.n, c.k};
  std::vector<float> y(static_cast<size_t>(c.m * c.n), -1.0f), y_ref(y.size(), -2.0f);
  ref::linear_w8a8(qa.data(), sa.data(), ag, w, b, y_ref.data(), c.m);
  fn(qa.data(), sa.data(), ag, w, b, y.data(), c.m);

  int64_t bad = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double sum_abs = 0.0, acc = 0.0;
      for (int64_t t = 0; t < c.k; ++t) {
        const double p = static_cast<double>(fp8_e4m3_to_float(qa[i * c.k + t])) *
                         fp8_e4m3_to_float(qw[j * c.k + t]);
        sum_abs += std::fabs(p);
        acc += p;
      }
      const double s = static_cast<double>(sa[ag == ScaleGranularity::PerRow ? i : 0]) *
                       sw[wg == ScaleGranularity::PerRow ? j : 0];
      const double bj = with_bias ? std::fabs(bias[j]) : 0.0;
      const double tol = (2.0 * c.k * kU * sum_abs + 4.0 * kU * std::fabs(acc)) * s +
                         4.0 * kU * bj + 1e-37;
      const double err = std::fabs(static_cast<double>(y[i * c.n + j]) - y_ref[i * c.n + j]);
      if (!(err <= tol)) {
        if (bad < 5) {
          UNSCOPED_INFO(path << " m=" << c.m << " n=" << c.n << " k=" << c.k << " y[" << i << ","
                             << j << "]=" << y[i * c.n + j] << " ref=" << y_ref[i * c.n + j]
                             << " tol=" << tol);
        }
        ++bad;
      }
    }
  }
  CHECK(bad == 0);
}

const Case kCases[] = {
    {1, 5, 13},    {1, 576, 576}, {1, 192, 1536}, {1, 37, 64},   {1, 1536, 576},
    {2, 5, 13},    {2, 192, 64},  {2, 576, 576},  {7, 37, 13},   {7, 192, 1536},
    {64, 576, 576}, {64, 13, 64}, {130, 192, 576}, {130, 5, 13}, {130, 37, 1536},
};

}  // namespace

TEST_CASE("linear_w8a8 paths agree with the reference up to FP32 summation order", "[w8a8]") {
  struct Path {
    LinearFn fn;
    const char* name;
  };
  std::vector<Path> paths{{&linear_w8a8, "dispatch"}, {&linear_w8a8_scalar, "scalar"}};
  if (fp8_avx2_available()) {
    paths.push_back({&linear_w8a8_avx2, "avx2"});
  } else {
    WARN("AVX2+FMA+F16C not available on this CPU: the AVX2 path is not tested here");
  }
  uint32_t seed = 1;
  for (const auto& path : paths) {
    for (const auto& c : kCases) {
      for (auto wg : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor}) {
        const auto ag = (seed % 2) ? ScaleGranularity::PerRow : ScaleGranularity::PerTensor;
        const bool with_bias = (seed % 3) != 0;
        check_against_reference(path.fn, path.name, c, wg, ag, with_bias, seed++);
      }
    }
  }
}

TEST_CASE("linear_w8a8 handles empty shapes and exact small sums", "[w8a8]") {
  // 2 x 3 codes of exactly representable values: 1.0 = 0x38, 2.0 = 0x40, -0.5 = 0xB0, 0 = 0x00.
  const std::vector<uint8_t> qa{0x38, 0x40, 0xB0, 0x40, 0x00, 0x38};  // [1, 2, -0.5], [2, 0, 1]
  const std::vector<uint8_t> qw{0x40, 0x38, 0x38, 0xB0, 0xB0, 0x40};  // [2, 1, 1], [-0.5, -0.5, 2]
  const std::vector<float> sa{2.0f, 0.5f}, sw{0.25f, 4.0f}, bias{1.0f, -1.0f};
  const Fp8WeightView w{qw.data(), sw.data(), ScaleGranularity::PerRow, 2, 3};
  for (LinearFn fn : {&linear_w8a8, &linear_w8a8_scalar, &ref::linear_w8a8}) {
    std::vector<float> y(4);
    fn(qa.data(), sa.data(), ScaleGranularity::PerRow, w, bias.data(), y.data(), 2);
    // row 0: dots 2+2-0.5 = 3.5, -0.5-1-1 = -2.5; row 1: 4+0+1 = 5, -1+0+2 = 1
    CHECK(y == std::vector<float>{3.5f * 0.5f + 1, -2.5f * 8 - 1, 5 * 0.125f + 1, 1 * 2.0f - 1});
    // m == 1 takes the GEMV path
    std::vector<float> y1(2);
    fn(qa.data(), sa.data(), ScaleGranularity::PerTensor, w, nullptr, y1.data(), 1);
    CHECK(y1 == std::vector<float>{3.5f * 0.5f, -2.5f * 8});
    fn(qa.data(), sa.data(), ScaleGranularity::PerRow, w, nullptr, y1.data(), 0);  // no-op
  }
  if (fp8_avx2_available()) {
    std::vector<float> y(4);
    linear_w8a8_avx2(qa.data(), sa.data(), ScaleGranularity::PerRow, w, bias.data(), y.data(), 2);
    CHECK(y == std::vector<float>{3.5f * 0.5f + 1, -2.5f * 8 - 1, 5 * 0.125f + 1, 1 * 2.0f - 1});
  }
}

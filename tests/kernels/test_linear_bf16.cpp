// linear_bf16 (each path: scalar, AVX2, AVX-512) against the plain reference and against exact
// small sums.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/cpu/linear_bf16.h"

using namespace octet;

TEST_CASE("linear_bf16: exact on small integers", "[linear_bf16]") {
  // W = [[1, 2, 3], [-1, 0.5, 0]] in bf16 (all exact), x = [[1, 1, 1], [2, 0, -4]]
  const std::vector<float> wf{1, 2, 3, -1, 0.5f, 0};
  std::vector<uint16_t> w;
  for (float v : wf) w.push_back(float_to_bf16(v));
  const std::vector<float> x{1, 1, 1, 2, 0, -4};
  std::vector<float> y(4);
  linear_bf16(x.data(), w.data(), y.data(), 2, 2, 3);
  CHECK(y == std::vector<float>{6, -0.5f, -10, -2});
}

// Catch2 v2 has no SKIP: exit 77, which CTest reports as skipped (SKIP_RETURN_CODE).
[[noreturn]] void skip(const char* why) {
  std::printf("SKIPPED: %s\n", why);
  std::fflush(stdout);
  std::exit(77);
}

using Bf16Path = void (*)(const float*, const uint16_t*, float*, int64_t, int64_t, int64_t);

void check_against_reference(Bf16Path path) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (int64_t m : {1, 3, 4, 5, 9})
    for (int64_t k : {7, 8, 16, 33, 64, 577}) {
      const int64_t n = 67;
      std::vector<float> x(m * k), y(m * n), yr(m * n), absdot(m * n, 0.0f);
      std::vector<uint16_t> w(n * k);
      for (auto& v : x) v = nd(rng);
      for (auto& v : w) v = float_to_bf16(nd(rng));
      path(x.data(), w.data(), y.data(), m, n, k);
      ref::linear_bf16(x.data(), w.data(), yr.data(), m, n, k);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float s = 0;
          for (int64_t t = 0; t < k; ++t) s += std::fabs(x[i * k + t] * bf16_to_float(w[j * k + t]));
          // Only the summation order differs: |error| <= k * 2^-24 * sum|terms| (x2 margin).
          const float tol = 2.0f * static_cast<float>(k) * 5.96e-8f * s + 1e-30f;
          INFO("m=" << m << " k=" << k << " i=" << i << " j=" << j);
          REQUIRE(std::fabs(y[i * n + j] - yr[i * n + j]) <= tol);
        }
    }
}

TEST_CASE("linear_bf16 matches the reference across shapes", "[linear_bf16]") {
  SECTION("dispatch") { check_against_reference(&linear_bf16); }
  SECTION("scalar") { check_against_reference(&linear_bf16_scalar); }
}

TEST_CASE("linear_bf16 avx2 path matches the reference", "[linear_bf16]") {
  if (!linear_bf16_avx2_available()) skip("this CPU lacks AVX2+FMA");
  check_against_reference(&linear_bf16_avx2);
}

TEST_CASE("linear_bf16 avx512 path matches the reference", "[linear_bf16]") {
  if (!linear_bf16_avx512_available()) skip("this CPU lacks AVX-512F");
  check_against_reference(&linear_bf16_avx512);
}

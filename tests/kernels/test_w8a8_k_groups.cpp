// linear_w8a8 with the k-sum in parts (Fp8WeightView::k_groups; tensor-parallel row-parallel
// layers, models/tensor_parallel.h), on every path this CPU has:
//  - fused linear_w8a8 agrees with the double-precision sum (the bound of test_w8a8_linear.cpp:
//    products are exact, any FP32 summation order of k terms is within (k - 1) u S);
//  - partials + combine equal the fused result bit for bit (one addition order);
//  - the parts of a column shard (what a TP rank holds: k / N columns, G / N parts) equal the
//    whole weight's parts [r G / N, (r + 1) G / N) bit for bit, so gathered parts combined equal
//    TP 1's output: the tensor-parallel invariance at the kernel level;
//  - a row's bits do not depend on m (batch invariance with parts);
//  - ref::linear_w8a8 with parts adds them in the scalar path's order.
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

struct Path {
  W8A8Path path;
  const char* name;
  void (*fused)(const uint8_t*, const float*, ScaleGranularity, const Fp8WeightView&,
                const float*, float*, int64_t);
};

std::vector<Path> available_paths() {
  std::vector<Path> p{{W8A8Path::Scalar, "scalar", &linear_w8a8_scalar},
                      {W8A8Path::Auto, "dispatch", &linear_w8a8}};
  if (fp8_avx2_available()) p.push_back({W8A8Path::Avx2, "avx2", &linear_w8a8_avx2});
  if (w8a8_avx512_available()) p.push_back({W8A8Path::Avx512, "avx512", &linear_w8a8_avx512});
  return p;
}

struct Case {
  int64_t m, n, k, groups;
};
// m: 1 (GEMV), 5 (small GEMM), 9 (AVX-512 pre-decoded weights); k / groups with 64-, 16- and
// 8-code tails (14, 56, 192, 512, 43).
const Case kCases[] = {{1, 37, 168, 12}, {5, 20, 168, 3},  {9, 33, 576, 3},
                       {1, 40, 1536, 3}, {9, 17, 172, 4},  {3, 64, 168, 1}};

}  // namespace

TEST_CASE("w8a8 k parts: fused, partials + combine and TP shards agree bit for bit", "[w8a8]") {
  std::mt19937 rng(42);
  for (const Path& path : available_paths()) {
    for (const Case& c : kCases) {
      CAPTURE(path.name, c.m, c.n, c.k, c.groups);
      const auto qa = octet_test::random_finite_e4m3(rng, c.m * c.k);
      const auto qw = octet_test::random_finite_e4m3(rng, c.n * c.k);
      std::vector<float> sa(c.m), sw(c.n), bias(c.n);
      std::uniform_real_distribution<float> ds(1e-3f, 1e-2f), db(-2, 2);
      for (float& v : sa) v = ds(rng);
      for (float& v : sw) v = ds(rng);
      for (float& v : bias) v = db(rng);
      const Fp8WeightView w{qw.data(), sw.data(), ScaleGranularity::PerRow, c.n, c.k, c.groups};

      std::vector<float> y(c.m * c.n);
      path.fused(qa.data(), sa.data(), ScaleGranularity::PerRow, w, bias.data(), y.data(), c.m);
      // Against the exact sum.
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double acc = 0, mag = 0;
          for (int64_t t = 0; t < c.k; ++t) {
            const double p = double(fp8_e4m3_to_float(qa[i * c.k + t])) *
                             fp8_e4m3_to_float(qw[j * c.k + t]);
            acc += p;
            mag += std::fabs(p);
          }
          const double s = double(sa[i]) * sw[j];
          const double want = acc * s + bias[j];
          const double tol = (double(c.k) + 4) * 0x1p-24 * (mag * s + std::fabs(bias[j])) + 1e-30;
          REQUIRE(std::fabs(y[i * c.n + j] - want) <= tol);
        }

      // Partials + combine == fused.
      std::vector<float> parts(c.groups * c.m * c.n, -1.0f), y2(c.m * c.n);
      linear_w8a8_partials(qa.data(), w, parts.data(), c.m, path.path);
      linear_w8a8_combine(parts.data(), c.groups, sa.data(), ScaleGranularity::PerRow, w,
                          bias.data(), y2.data(), c.m);
      CHECK(y2 == y);

      // Column shards: world N | groups.
      for (int64_t world = 2; world <= c.groups; ++world) {
        if (c.groups % world != 0) continue;
        CAPTURE(world);
        const int64_t kr = c.k / world, gr = c.groups / world;
        std::vector<float> gathered;
        for (int64_t r = 0; r < world; ++r) {
          std::vector<uint8_t> qa_r(c.m * kr), qw_r(c.n * kr);
          for (int64_t i = 0; i < c.m; ++i)
            for (int64_t t = 0; t < kr; ++t) qa_r[i * kr + t] = qa[i * c.k + r * kr + t];
          for (int64_t j = 0; j < c.n; ++j)
            for (int64_t t = 0; t < kr; ++t) qw_r[j * kr + t] = qw[j * c.k + r * kr + t];
          const Fp8WeightView w_r{qw_r.data(), sw.data(), ScaleGranularity::PerRow, c.n, kr, gr};
          std::vector<float> p_r(gr * c.m * c.n);
          linear_w8a8_partials(qa_r.data(), w_r, p_r.data(), c.m, path.path);
          gathered.insert(gathered.end(), p_r.begin(), p_r.end());
        }
        CHECK(gathered == parts);
      }

      // Batch invariance: each row alone equals its row in the batch.
      for (int64_t i = 0; i < c.m; ++i) {
        std::vector<float> y1(c.n);
        path.fused(qa.data() + i * c.k, sa.data() + i, ScaleGranularity::PerRow, w, bias.data(),
                   y1.data(), 1);
        CHECK(std::equal(y1.begin(), y1.end(), y.begin() + i * c.n));
      }
    }
  }
}

TEST_CASE("w8a8 k parts: the reference adds each part from zero, then the parts in order",
          "[w8a8]") {
  // The scalar path sums in the reference's order (each part in index order, then the parts in
  // order), so the two agree bit for bit; and the parts change the bits against one part
  // somewhere (the order matters, so the equality above is not vacuous).
  std::mt19937 rng(7);
  const int64_t m = 3, n = 5, k = 96, groups = 3;
  const auto qa = octet_test::random_finite_e4m3(rng, m * k);
  const auto qw = octet_test::random_finite_e4m3(rng, n * k);
  std::vector<float> sa(m, 0.01f), sw(n, 0.02f);
  const Fp8WeightView w{qw.data(), sw.data(), ScaleGranularity::PerRow, n, k, groups};
  std::vector<float> y_ref(m * n), y_scalar(m * n);
  ref::linear_w8a8(qa.data(), sa.data(), ScaleGranularity::PerRow, w, nullptr, y_ref.data(), m);
  linear_w8a8_scalar(qa.data(), sa.data(), ScaleGranularity::PerRow, w, nullptr,
                     y_scalar.data(), m);
  CHECK(y_ref == y_scalar);
  // And the scalar path with parts differs from it without parts somewhere (order matters).
  const Fp8WeightView w1{qw.data(), sw.data(), ScaleGranularity::PerRow, n, k, 1};
  std::vector<float> y_one(m * n);
  ref::linear_w8a8(qa.data(), sa.data(), ScaleGranularity::PerRow, w1, nullptr, y_one.data(), m);
  CHECK(y_one != y_ref);
}

// Row-parallel linears (models/linear.h linear_forward_row_parallel) on the CPU rank group:
// the FP8 dynamic input of each rank's column block is quantized with the whole row's scale
// (row_amax -> all_reduce_max -> quantize_fp8_dynamic(amax)), so every code and scale equals the
// unsharded one bit for bit, and the all-reduced output equals TP 1's up to the order of the
// k-sum. Shapes with tails (k = 172 = 4 * 43, 2 * 86).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/common/fp8.h"
#include "kernels/rank_group.h"
#include "models/linear.h"
#include "models/tensor_parallel.h"

namespace octet {
namespace {

std::vector<float> random_vec(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("tp linear: row-parallel FP8 codes and scales equal the unsharded ones", "[tp]") {
  const int64_t m = 5, k = 168, n = 24;
  std::vector<float> x = random_vec(m * k, 1, 1.0f);
  x[3 * k + 166] = 9.0f;  // row 3's max sits in the last rank's block only
  HostLinearWeight hw;
  hw.name = "down_proj";
  hw.out_features = n;
  hw.in_features = k;
  hw.w_f32 = random_vec(n * k, 2, 0.05f);
  hw.bias = random_vec(n, 3, 0.1f);
  quantize_linear_fp8(hw, ScaleGranularity::PerRow);

  // TP 1: the whole row.
  std::unique_ptr<Backend> be1 = make_backend("cpu");
  std::vector<uint8_t> q1(m * k);
  std::vector<float> s1(m), y1(m * n);
  {
    const LinearWeight w = upload_linear(*be1, hw);
    Buffer bx = be1->allocate(m * k * 4), bq = be1->allocate(m * k), bs = be1->allocate(m * 4),
           by = be1->allocate(m * n * 4);
    be1->upload(bx, 0, x.data(), m * k * 4);
    linear_forward(*be1, w, bx.as<float>(), m, by.as<float>(), bq.as<uint8_t>(), bs.as<float>());
    be1->download(bq, 0, q1.data(), m * k);
    be1->download(bs, 0, s1.data(), m * 4);
    be1->download(by, 0, y1.data(), m * n * 4);
  }
  for (int world : {2, 3, 4}) {
    INFO("world " << world);
    const int64_t kr = k / world;
    std::vector<uint8_t> q(m * k);
    std::vector<std::vector<float>> s(world, std::vector<float>(m)), y(world);
    auto group = make_rank_group("cpu", world);
    group->run([&](int r, Communicator& comm) {
      std::unique_ptr<Backend> be = make_backend("cpu");
      HostLinearView<uint8_t> v{hw.w_fp8.data(), n, k, hw.w_scale.data(), n, hw.bias.data()};
      const HostLinearShard<uint8_t> sh = shard_row_parallel(v, r * kr, (r + 1) * kr, r == 0);
      HostLinearWeight w = hw;
      w.w_fp8 = sh.weight;
      w.in_features = kr;
      w.w_scale = sh.scale;
      w.bias = sh.bias;
      const LinearWeight lw = upload_linear(*be, w);
      Buffer bx = be->allocate(m * kr * 4), bq = be->allocate(m * kr), bs = be->allocate(m * 4),
             ba = be->allocate(m * 4), by = be->allocate(m * n * 4);
      std::vector<float> xr(m * kr);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < kr; ++j) xr[i * kr + j] = x[i * k + r * kr + j];
      be->upload(bx, 0, xr.data(), m * kr * 4);
      linear_forward_row_parallel(*be, comm, lw, bx.as<float>(), m, by.as<float>(),
                                  bq.as<uint8_t>(), bs.as<float>(), ba.as<float>());
      std::vector<uint8_t> qr(m * kr);
      be->download(bq, 0, qr.data(), m * kr);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < kr; ++j) q[i * k + r * kr + j] = qr[i * kr + j];
      be->download(bs, 0, s[r].data(), m * 4);
      y[r].resize(m * n);
      be->download(by, 0, y[r].data(), m * n * 4);
    });
    CHECK(q == q1);  // every code
    for (int r = 0; r < world; ++r) {
      CHECK(s[r] == s1);     // every scale, bit for bit
      CHECK(y[r] == y[0]);   // the all-reduce gives every rank the same bits
    }
    // Only the k-sum's order differs (the products are exact: E4M3 x E4M3 fits FP32). Any
    // order of a k-term FP32 sum is within k * eps * sum_k |term| of the exact sum, so two
    // orders differ by at most 2 * k * eps * sum |term| (scaled by s_a * s_w), plus the
    // rounding of the scaling and the bias add (2 eps |y|).
    const float eps = 1.1920929e-7f;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t o = 0; o < n; ++o) {
        double abs_sum = 0;
        for (int64_t j = 0; j < k; ++j)
          abs_sum += std::abs(static_cast<double>(fp8_e4m3_to_float(q1[i * k + j])) *
                              fp8_e4m3_to_float(hw.w_fp8[o * k + j]));
        const double bound = 2.0 * k * eps * abs_sum * s1[i] * hw.w_scale[o] +
                             4.0 * eps * std::abs(y1[i * n + o]);
        CHECK(std::abs(y[0][i * n + o] - y1[i * n + o]) <= bound);
      }
  }
}

}  // namespace octet

// cpu::attention against ref::attention (plain FP32) across shapes and GQA groupings.
// Tolerance: both compute softmax in FP32 with std::exp; only summation orders differ
// (dot products and the weighted sum), so |diff| <= ~(head_dim + num_ctx) * 2^-24 * scale of
// the values; we allow 1e-5 relative to max|v| plus 1e-6.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops_ref.h"

using namespace octet;

TEST_CASE("cpu::attention matches ref::attention", "[attention]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int64_t hd : {8, 13, 64, 128})
    for (auto [nh, nkv] : {std::pair<int64_t, int64_t>{8, 4}, {9, 3}, {4, 4}, {32, 8}})
      for (int64_t ctx : {1, 2, 17, 300, 1100}) {
        std::vector<float> q(nh * hd), k(ctx * nkv * hd), v(ctx * nkv * hd), o(nh * hd),
            r(nh * hd);
        for (auto& x : q) x = nd(rng);
        for (auto& x : k) x = nd(rng);
        float vmax = 0;
        for (auto& x : v) vmax = std::max(vmax, std::fabs(x = nd(rng)));
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        cpu::attention(q.data(), k.data(), v.data(), o.data(), nh, nkv, hd, ctx, scale);
        ref::attention(q.data(), k.data(), v.data(), r.data(), nh, nkv, hd, ctx, scale);
        for (size_t i = 0; i < o.size(); ++i) {
          INFO("hd=" << hd << " nh=" << nh << " nkv=" << nkv << " ctx=" << ctx << " i=" << i);
          REQUIRE(std::fabs(o[i] - r[i]) <= 1e-5f * vmax + 1e-6f);
        }
      }
}

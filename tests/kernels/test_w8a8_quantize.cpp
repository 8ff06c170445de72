// E4M3 quantization of weights and activations against computations written out in the test
// from the rules quoted in kernels/cpu/w8a8.h (compressed-tensors for weights, vLLM for
// activations). The element conversion fp8_e4m3_from_float is itself checked against
// cuda_fp8.h in test_fp8_oracle.cpp, so it serves here as the independent rounding step.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/w8a8.h"

using namespace octet;

namespace {

std::vector<float> random_rows(std::mt19937& rng, int64_t m, int64_t k) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-8.0f, 8.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) {
    const float row_scale = std::exp2(mag(rng));  // rows of very different magnitudes
    for (int64_t t = 0; t < k; ++t) x[i * k + t] = d(rng) * row_scale;
  }
  return x;
}

// vLLM dynamic_per_token_scaled_fp8_quant: s = fmaxf(amax / 448, 1 / (448 * 512)), q = x / s.
float expected_token_scale(const float* x, int64_t k) {
  float amax = 0.0f;
  for (int64_t t = 0; t < k; ++t)
    if (std::fabs(x[t]) > amax) amax = std::fabs(x[t]);  // NaN compares false: ignored
  const float s = amax / 448.0f;
  const float floor = 1.0f / (448.0f * 512.0f);
  return s > floor ? s : floor;
}

using PerTokenFn = void (*)(const float*, int64_t, int64_t, uint8_t*, float*);

std::vector<std::pair<PerTokenFn, const char*>> per_token_paths() {
  std::vector<std::pair<PerTokenFn, const char*>> paths{
      {&quantize_per_token_e4m3, "dispatch"}, {&quantize_per_token_e4m3_scalar, "scalar"}};
  if (fp8_avx2_available()) paths.push_back({&quantize_per_token_e4m3_avx2, "avx2"});
  return paths;
}

}  // namespace

TEST_CASE("per-token quantization follows vLLM's dynamic per-token rule", "[w8a8]") {
  std::mt19937 rng(7);
  for (const auto& [fn, name] : per_token_paths()) {
    for (int64_t m : {1, 3, 130}) {
      for (int64_t k : {1, 13, 64, 576, 1536}) {
        const auto x = random_rows(rng, m, k);
        std::vector<uint8_t> q(x.size());
        std::vector<float> s(static_cast<size_t>(m));
        fn(x.data(), m, k, q.data(), s.data());
        int64_t bad = 0;
        for (int64_t i = 0; i < m; ++i) {
          const float es = expected_token_scale(x.data() + i * k, k);
          if (s[i] != es) ++bad;
          for (int64_t t = 0; t < k; ++t)
            if (q[i * k + t] != fp8_e4m3_from_float(x[i * k + t] / es)) ++bad;
        }
        INFO(name << " m=" << m << " k=" << k);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("per-token quantization edge cases", "[w8a8]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t k = 19;  // vector body + tail
  for (const auto& [fn, name] : per_token_paths()) {
    INFO(name);
    std::vector<float> x(4 * k, 0.0f);
    // row 0: all zero (and one -0) -> the minimum scale, codes 0 / 0x80
    x[3] = -0.0f;
    // row 1: amax 448 * 3 -> scale 3; the amax element maps to 448 (0x7E), -amax to 0xFE
    for (int64_t t = 0; t < k; ++t) x[k + t] = static_cast<float>(t) - 9.0f;
    x[k + 17] = 1344.0f;
    x[k + 2] = -1344.0f;
    // row 2: a NaN is ignored by the amax and stays NaN (0x7F); the other values quantize
    for (int64_t t = 0; t < k; ++t) x[2 * k + t] = 0.5f * static_cast<float>(t);
    x[2 * k + 4] = nan;
    // row 3: +inf -> scale inf; finite values -> +-0, inf / inf = NaN -> 0x7F
    x[3 * k + 1] = inf;
    x[3 * k + 5] = -2.0f;
    std::vector<uint8_t> q(x.size());
    std::vector<float> s(4);
    fn(x.data(), 4, k, q.data(), s.data());

    CHECK(s[0] == 1.0f / (448.0f * 512.0f));
    for (int64_t t = 0; t < k; ++t) CHECK(q[t] == (t == 3 ? 0x80 : 0x00));
    CHECK(s[1] == 3.0f);
    CHECK(q[k + 17] == 0x7E);
    CHECK(q[k + 2] == 0xFE);
    CHECK(q[k + 12] == fp8_e4m3_from_float(1.0f));  // 3 / 3
    CHECK(s[2] == 9.0f / 448.0f);                   // amax 9 (t = 18), NaN ignored
    CHECK(q[2 * k + 4] == 0x7F);
    CHECK(q[2 * k + 18] == 0x7E);
    CHECK(q[2 * k + 3] == fp8_e4m3_from_float(1.5f / (9.0f / 448.0f)));
    CHECK(std::isinf(s[3]));
    CHECK(q[3 * k + 1] == 0x7F);
    CHECK(q[3 * k + 5] == 0x80);
    CHECK(q[3 * k + 0] == 0x00);
  }
}

TEST_CASE("static per-tensor quantization multiplies by the FP32 reciprocal (vLLM)", "[w8a8]") {
  std::mt19937 rng(11);
  for (int64_t m : {1, 5, 40}) {
    for (int64_t k : {13, 576, 1536}) {
      const auto x = random_rows(rng, m, k);
      for (float scale : {0.01f, 0.3f, 3.0f / 7.0f, 17.0f}) {
        std::vector<uint8_t> q(x.size());
        quantize_static_e4m3(x.data(), m, k, scale, q.data());
        const float inv = 1.0f / scale;
        int64_t bad = 0;
        for (size_t i = 0; i < x.size(); ++i)
          if (q[i] != fp8_e4m3_from_float(x[i] * inv)) ++bad;  // saturates beyond 448 * scale
        INFO("m=" << m << " k=" << k << " scale=" << scale);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("weight quantization follows compressed-tensors (FP32 weights)", "[w8a8]") {
  std::mt19937 rng(3);
  for (int64_t n : {1, 7, 192}) {
    for (int64_t k : {13, 576}) {
      auto w = random_rows(rng, n, k);
      if (n > 1) {
        for (int64_t t = 0; t < k; ++t) w[k + t] = 0.0f;  // all-zero row
      }
      for (auto g : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor}) {
        std::vector<uint8_t> q(w.size());
        std::vector<float> s(g == ScaleGranularity::PerRow ? n : 1);
        quantize_weight_e4m3(w.data(), n, k, g, q.data(), s.data());
        // amax with 0 included, s = amax / 448, an exact 0 -> 2^-23, q = fp8(w / s + 0)
        auto amax_of = [&](int64_t r0, int64_t r1) {
          float a = 0.0f;
          for (int64_t i = r0 * k; i < r1 * k; ++i) a = std::max(a, std::fabs(w[i]));
          return a;
        };
        int64_t bad = 0;
        for (int64_t r = 0; r < n; ++r) {
          const float amax = g == ScaleGranularity::PerRow ? amax_of(r, r + 1) : amax_of(0, n);
          float es = amax / 448.0f;
          if (es == 0.0f) es = 0x1p-23f;
          if (s[g == ScaleGranularity::PerRow ? r : 0] != es) ++bad;
          for (int64_t t = 0; t < k; ++t)
            if (q[r * k + t] != fp8_e4m3_from_float(w[r * k + t] / es + 0.0f)) ++bad;
        }
        INFO("n=" << n << " k=" << k << " per_row=" << (g == ScaleGranularity::PerRow));
        CHECK(bad == 0);
        // Round trip: each dequantized weight within half an E4M3 step (2^-4 relative) of w,
        // or within the subnormal step 2^-10 * s.
        for (int64_t r = 0; r < n; ++r) {
          const float sr = s[g == ScaleGranularity::PerRow ? r : 0];
          for (int64_t t = 0; t < k; ++t) {
            const float x = w[r * k + t], xh = fp8_e4m3_to_float(q[r * k + t]) * sr;
            REQUIRE(std::fabs(xh - x) <= std::max(std::fabs(x) * 0x1p-4f, 0x1p-10f * sr) * 1.0001f);
          }
        }
      }
    }
  }
}

TEST_CASE("weight quantization: zero rows, NaN rows, 16-bit arithmetic", "[w8a8]") {
  // All-zero tensor: scale = eps of the dtype, all codes 0.
  std::vector<float> z(6, 0.0f);
  std::vector<uint8_t> q(6, 0xAA);
  float s = -1.0f;
  quantize_weight_e4m3(z.data(), 2, 3, ScaleGranularity::PerTensor, q.data(), &s);
  CHECK(s == 0x1p-23f);
  CHECK(q == std::vector<uint8_t>(6, 0));
  // -0 and negatives that round to -0 in the division come out as +0 (code 0x00): the zero
  // point compressed-tensors adds; values that round to -0 only in the FP8 cast keep 0x80.
  std::vector<float> neg{-0.0f, -1e-45f, -448.0f, -0x1p-14f};
  std::vector<float> sn(1);
  quantize_weight_e4m3(neg.data(), 1, 4, ScaleGranularity::PerRow, q.data(), sn.data());
  CHECK(sn[0] == 1.0f);
  CHECK(q[0] == 0x00);
  CHECK(q[1] == 0x80);  // -1e-45 / 1 is a nonzero FP32, rounded to -0 by the cast
  CHECK(q[2] == 0xFE);
  CHECK(q[3] == 0x80);
  quantize_weight_e4m3_as(z.data(), 2, 3, ScaleGranularity::PerTensor, DType::BF16,
                          q.data(), &s);
  CHECK(s == 0x1p-7f);
  quantize_weight_e4m3_as(z.data(), 2, 3, ScaleGranularity::PerTensor, DType::F16,
                          q.data(), &s);
  CHECK(s == 0x1p-10f);
  // A NaN poisons its row's scale (torch.amax propagates NaN) and only that row.
  std::vector<float> w{1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f, 448.0f, -224.0f, 1.0f};
  std::vector<float> sr(2);
  quantize_weight_e4m3(w.data(), 2, 3, ScaleGranularity::PerRow, q.data(), sr.data());
  CHECK(std::isnan(sr[0]));
  CHECK(q[0] == 0x7F);
  CHECK(q[1] == 0x7F);
  CHECK(sr[1] == 1.0f);
  CHECK(q[3] == 0x7E);
  CHECK(q[4] == fp8_e4m3_from_float(-224.0f));
}

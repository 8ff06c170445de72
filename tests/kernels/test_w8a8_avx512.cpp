// The AVX-512 VBMI+BF16 W8A8 GEMV against the plain reference. Skipped (exit 77, reported as
// skipped) on CPUs without those extensions.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <random>
#include <vector>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/w8a8.h"

using namespace octet;

TEST_CASE("w8a8 avx512 gemv matches the reference", "[w8a8][avx512]") {
  if (!w8a8_avx512_available()) {
    std::cout << "SKIPPED: this CPU lacks AVX-512 VBMI/BF16\n";
    std::exit(77);
  }
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> code(0, 255);
  for (int64_t k : {1, 13, 63, 64, 65, 576, 1536})
    for (int64_t n : {1, 3, 4, 17, 192})
      for (auto g : {ScaleGranularity::PerRow, ScaleGranularity::PerTensor}) {
        std::vector<uint8_t> qa(k), qw(n * k);
        auto finite = [&] {
          for (;;) {  // every code but NaN (0x7F / 0xFF), subnormals and both zeros included
            const int c = code(rng);
            if ((c & 0x7F) != 0x7F) return static_cast<uint8_t>(c);
          }
        };
        for (auto& c : qa) c = finite();
        for (auto& c : qw) c = finite();
        std::vector<float> sw(g == ScaleGranularity::PerRow ? n : 1), bias(n);
        for (auto& s : sw) s = 0.01f + 0.001f * static_cast<float>(code(rng));
        for (auto& b : bias) b = 0.1f * static_cast<float>(code(rng) - 128);
        const Fp8WeightView w{qw.data(), sw.data(), g, n, k};
        const float sa = 0.37f;
        std::vector<float> y(n), yr(n);
        linear_w8a8_avx512(qa.data(), &sa, ScaleGranularity::PerTensor, w, bias.data(), y.data(),
                           1);
        ref::linear_w8a8(qa.data(), &sa, ScaleGranularity::PerTensor, w, bias.data(), yr.data(),
                         1);
        for (int64_t j = 0; j < n; ++j) {
          double terms = 0.0;
          for (int64_t t = 0; t < k; ++t)
            terms += std::fabs(double(fp8_e4m3_to_float(qa[t])) * fp8_e4m3_to_float(qw[j * k + t]));
          const double s = sa * sw[g == ScaleGranularity::PerRow ? j : 0];
          // Exact products; only the FP32 summation order differs: <= 2 k u sum|terms|.
          const double tol = (2.0 * k * 5.96e-8 * terms + 1e-30) * s + 4 * 5.96e-8 * std::fabs(yr[j]);
          INFO("k=" << k << " n=" << n << " j=" << j);
          REQUIRE(std::fabs(double(y[j]) - yr[j]) <= tol);
        }
      }
}

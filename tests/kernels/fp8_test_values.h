// The fp32 inputs the FP8 tests run through every encoder: ~13 million bit patterns aimed at the
// places where conversions go wrong. Deterministic (std::mt19937 raw output, fixed seed), and
// built from the reference tables (minifloat_reference.h), never from the code under test.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "minifloat_reference.h"

namespace octet_test {

namespace fp8_values_detail {

inline void push_both_signs(std::vector<uint32_t>& out, uint32_t bits) {
  out.push_back(bits & 0x7FFFFFFFu);
  out.push_back(bits | 0x80000000u);
}

// Every fp32 within +-radius ulps of v (v >= 0), both signs; stays within [0, inf].
inline void push_around(std::vector<uint32_t>& out, double v, int radius) {
  const int64_t center = std::bit_cast<uint32_t>(static_cast<float>(v));
  for (int64_t b = center - radius; b <= center + radius; ++b) {
    if (b >= 0 && b <= 0x7F800000) push_both_signs(out, static_cast<uint32_t>(b));
  }
}

// Every fp32 in [lo, hi] (0 <= lo <= hi), both signs.
inline void push_range(std::vector<uint32_t>& out, float lo, float hi) {
  for (uint32_t b = std::bit_cast<uint32_t>(lo); b <= std::bit_cast<uint32_t>(hi); ++b) {
    push_both_signs(out, b);
  }
}

}  // namespace fp8_values_detail

/// fp32 bit patterns, ~13M:
///  - each E4M3/E5M2 value, each midpoint between neighbouring values (the ties), and the
///    saturation midpoints max + ulp/2 (464, 61440), each +-64 ulps, both signs;
///  - every fp32 in [440, 470] and in [57000, 62000] (the top codes and saturation), both signs;
///  - fp32 subnormals (every 37th, plus the edges), zeros, infinities, NaNs of both signs with
///    quiet, signalling and random payloads;
///  - 3M log-uniform values with |x| in [2^-20, 2^17) and random sign;
///  - 5M uniformly random bit patterns.
inline const std::vector<uint32_t>& fp8_stress_bits() {
  using namespace fp8_values_detail;
  static const std::vector<uint32_t> values = [] {
    std::vector<uint32_t> out;
    out.reserve(14'000'000);
    for (const MiniFloat& f : {kE4M3, kE5M2}) {
      const std::vector<double>& table = magnitude_table(f);
      for (size_t c = 0; c < table.size(); ++c) {
        push_around(out, table[c], 64);
        if (c + 1 < table.size()) push_around(out, (table[c] + table[c + 1]) / 2, 64);
      }
      const double ulp_at_max = table.back() - table[table.size() - 2];
      push_around(out, table.back() + ulp_at_max / 2, 64);  // 464 / 61440
      push_around(out, table.back() + ulp_at_max, 64);      // 512 / 65536
    }
    push_range(out, 440.0f, 470.0f);
    push_range(out, 57000.0f, 62000.0f);
    for (uint32_t b = 0; b <= 0x007FFFFFu; b += 37) push_both_signs(out, b);
    for (uint32_t b : {0x00000001u, 0x007FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u,
                       0x7FBFFFFFu, 0x7FC00000u, 0x7FC00001u, 0x7FFFFFFFu}) {
      push_both_signs(out, b);
    }
    std::mt19937 rng(20240229u);
    for (int i = 0; i < 1000; ++i) push_both_signs(out, 0x7F800001u + rng() % 0x7FFFFFu);  // NaNs
    for (int i = 0; i < 3'000'000; ++i) {
      const uint32_t exponent = 127u - 20u + rng() % 37u;  // 2^-20 .. 2^16 binades
      out.push_back((rng() & 0x80000000u) | (exponent << 23) | (rng() & 0x7FFFFFu));
    }
    for (int i = 0; i < 5'000'000; ++i) out.push_back(static_cast<uint32_t>(rng()));
    return out;
  }();
  return values;
}

/// The same values as floats (a bit-cast copy).
inline const std::vector<float>& fp8_stress_floats() {
  static const std::vector<float> floats = [] {
    std::vector<float> out;
    out.reserve(fp8_stress_bits().size());
    for (uint32_t b : fp8_stress_bits()) out.push_back(std::bit_cast<float>(b));
    return out;
  }();
  return floats;
}

}  // namespace octet_test

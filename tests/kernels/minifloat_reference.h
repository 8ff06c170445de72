// Independent reference for small binary float formats (fp8 E4M3/E5M2, fp16, bf16), written
// from the format definitions alone and sharing no code with kernels/cpu: every finite value
// comes from std::ldexp, and rounding is a search for the nearest value in that table. Slow and
// obvious on purpose; the tests hold the fast code to it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

namespace octet_test {

/// A sign-exponent-mantissa format. ieee_specials: the all-ones exponent holds inf (mantissa 0)
/// and NaN (fp16, bf16, E5M2). Otherwise (E4M3 "fn") only the all-ones pattern is NaN and there
/// is no inf.
struct MiniFloat {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool ieee_specials;

  uint32_t sign_bit() const { return 1u << (exponent_bits + mantissa_bits); }
  uint32_t all_ones_exponent() const { return (1u << exponent_bits) - 1u; }
  /// Largest finite magnitude code: below the inf code, or below the all-ones NaN code.
  uint32_t max_code() const {
    return ieee_specials ? (all_ones_exponent() << mantissa_bits) - 1u : sign_bit() - 2u;
  }
  bool is_nan(uint32_t code) const {
    const uint32_t magnitude = code & (sign_bit() - 1u);
    return ieee_specials ? magnitude > (all_ones_exponent() << mantissa_bits)
                         : magnitude == sign_bit() - 1u;
  }
  bool is_inf(uint32_t code) const {
    return ieee_specials && (code & (sign_bit() - 1u)) == (all_ones_exponent() << mantissa_bits);
  }
};

inline constexpr MiniFloat kE4M3{4, 3, 7, false};
inline constexpr MiniFloat kE5M2{5, 2, 15, true};
inline constexpr MiniFloat kFp16{5, 10, 15, true};
inline constexpr MiniFloat kBf16{8, 7, 127, true};

/// Exact value of a finite, non-negative magnitude code: (m / 2^M) * 2^(1-bias) when the
/// exponent field e is 0 (subnormal), else (1 + m / 2^M) * 2^(e-bias).
inline double finite_magnitude_value(const MiniFloat& f, uint32_t magnitude_code) {
  const uint32_t e = magnitude_code >> f.mantissa_bits;
  const uint32_t m = magnitude_code & ((1u << f.mantissa_bits) - 1u);
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - f.bias - f.mantissa_bits);
  return std::ldexp(static_cast<double>((1u << f.mantissa_bits) + m),
                    static_cast<int>(e) - f.bias - f.mantissa_bits);
}

/// Value of any code: NaN codes give a NaN, inf codes +-inf, the sign bit negates (-0 too).
inline double code_value(const MiniFloat& f, uint32_t code) {
  if (f.is_nan(code)) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = f.is_inf(code) ? std::numeric_limits<double>::infinity()
                                          : finite_magnitude_value(f, code & (f.sign_bit() - 1u));
  return (code & f.sign_bit()) ? -magnitude : magnitude;
}

/// What happens to |x| beyond the largest finite value.
enum class Overflow {
  kSaturate,    // -> +-max (CUDA __NV_SATFINITE; inf too)
  kToInfinity,  // IEEE: round as if the next binade existed; reaching it gives +-inf
};

/// Finite magnitudes of f in code order (codes 0..max_code, increasing values).
inline const std::vector<double>& magnitude_table(const MiniFloat& f) {
  static std::map<std::tuple<int, int, int, bool>, std::vector<double>> tables;
  auto& table = tables[{f.exponent_bits, f.mantissa_bits, f.bias, f.ieee_specials}];
  if (table.empty()) {
    for (uint32_t c = 0; c <= f.max_code(); ++c) table.push_back(finite_magnitude_value(f, c));
  }
  return table;
}

/// Rounds x to the nearest code of f, ties to the even code; the sign of x (and of -0) is kept.
/// NaN -> nan_code. Exact: every compared quantity (2|x|, lo + hi) is exact in double for the
/// formats above and any x that is an fp32 or fp16/bf16 value.
inline uint32_t round_to_code(const MiniFloat& f, double x, Overflow overflow, uint32_t nan_code) {
  if (std::isnan(x)) return nan_code;
  const uint32_t sign = std::signbit(x) ? f.sign_bit() : 0u;
  const double a = std::fabs(x);
  const std::vector<double>& values = magnitude_table(f);
  const uint32_t max_code = f.max_code();
  if (a >= values.back()) {
    if (overflow == Overflow::kSaturate) return sign | max_code;
    // IEEE: the value after max is 2^(emax+1), the start of the (missing) next binade, with the
    // inf code max_code + 1 (even, so the tie between max and it goes to inf).
    const int max_exponent = static_cast<int>(f.all_ones_exponent()) - 1 - f.bias;
    const double next = std::ldexp(1.0, max_exponent + 1);
    return sign | (2.0 * a < values.back() + next ? max_code : max_code + 1u);
  }
  const auto above = std::upper_bound(values.begin(), values.end(), a);
  // values[lo] <= a < values[lo + 1]
  const uint32_t lo = static_cast<uint32_t>(above - values.begin()) - 1u;
  const double twice = 2.0 * a;
  const double sum = values[lo] + values[lo + 1];
  uint32_t code;
  if (twice < sum) {
    code = lo;
  } else if (twice > sum) {
    code = lo + 1;
  } else {
    code = (lo % 2 == 0) ? lo : lo + 1;
  }
  return sign | code;
}

/// fp8 reference encode, saturating (__NV_SATFINITE), NaN -> 0x7F.
inline uint8_t reference_fp8(const MiniFloat& f, double x) {
  return static_cast<uint8_t>(round_to_code(f, x, Overflow::kSaturate, 0x7F));
}

}  // namespace octet_test

#pragma once
// The host references and comparisons shared by the Backend op tests (test_backend_ops.cpp,
// test_backend_attention.cpp): random data, the independent FP8/BF16/FP16 encoders of
// minifloat_reference.h, and one-assertion-per-array comparisons.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/minifloat_reference.h"
#include "kernels/mismatch_log.h"

namespace octet_test {

using namespace octet;


constexpr float kEps = std::numeric_limits<float>::epsilon();  // 2^-23
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- Host helpers -----------------------------------------------------------------------------

inline std::vector<float> uniform(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }

// Reference encoders (independent of kernels/cpu: nearest-value search over the format's table).
inline uint8_t ref_fp8(DType d, float x) {
  return octet_test::reference_fp8(d == DType::FP8_E4M3 ? octet_test::kE4M3 : octet_test::kE5M2,
                                   static_cast<double>(x));
}
inline float ref_fp8_value(DType d, uint8_t code) {
  return static_cast<float>(
      octet_test::code_value(d == DType::FP8_E4M3 ? octet_test::kE4M3 : octet_test::kE5M2, code));
}
inline uint16_t ref_bf16(float x) {
  return static_cast<uint16_t>(octet_test::round_to_code(
      octet_test::kBf16, x, octet_test::Overflow::kToInfinity, 0x7FFF));
}
inline uint16_t ref_fp16(float x) {
  return static_cast<uint16_t>(octet_test::round_to_code(
      octet_test::kFp16, x, octet_test::Overflow::kToInfinity, 0x7FFF));
}

// Midpoints between consecutive normal codes of an FP8 format. x = s * mid is exact in FP32 for
// s = 61 * 2^e, and x / s == mid is a tie (RNE: to the even code), while x * (1 / s) with the
// FP32 reciprocal lands off the tie for about half of them (59 of 118 for E4M3): they tell the
// contract's two quantization rules (true division, reciprocal multiply) apart, and RNE from
// rounding half up or truncation. Random inputs almost never do (a 1-ulp difference changes a
// code with probability ~2^-20).
inline std::vector<float> fp8_midpoints(DType d) {
  const octet_test::MiniFloat& f = d == DType::FP8_E4M3 ? octet_test::kE4M3 : octet_test::kE5M2;
  std::vector<float> mids;
  for (uint32_t c = 1u << f.mantissa_bits; c < f.max_code(); ++c)
    mids.push_back(static_cast<float>(
        (octet_test::code_value(f, c) + octet_test::code_value(f, c + 1)) / 2));
  return mids;
}
constexpr float kTieScale = 61 * 0x1p-6f;  // 0.953125, see fp8_midpoints

// Random finite E4M3 codes (every code but the NaNs 0x7F / 0xFF), all binades.
inline std::vector<uint8_t> random_e4m3_codes(std::mt19937& rng, size_t n) {
  std::uniform_int_distribution<int> d(0, 253);
  std::vector<uint8_t> v(n);
  for (uint8_t& c : v) {
    const int r = d(rng);
    c = static_cast<uint8_t>(r < 127 ? r : r + 1);  // skip 0x7F; 253 + 1 = 0xFE
  }
  return v;
}

// ---- FP8 tensor-core sums -----------------------------------------------------------------------

// The extra error of an FP8 E4M3 x E4M3 sum on tensor cores (cuBLASLt on sm_89+, the cuda
// backend's linear_w8a8 on cuBLASLt-eligible shapes), relative to the sum of |products|. The
// products are exact (4-bit significands), but Hopper's FP8 MMA adds them in a fixed-point
// accumulator that keeps about 14 bits (DeepSeek-V3 technical report, arXiv:2412.19437, 3.3.2:
// "limited to retaining around 14 bits"), and cuBLASLt with FAST_ACCUM off promotes that sum to
// FP32 at least every 128 products (CUTLASS's FP8 promotion interval: 4 MMAs of k = 32). Each
// addend of a promotion group (its products, plus one per MMA) then loses at most 2^-13 of the
// group's largest partial magnitude, itself at most the group's sum of |products|:
// |err| <= (min(k, 128) + 8) 2^-13 sum |qa qw| on top of the FP32 bound. 0 where FP8 GEMMs never
// run on tensor cores (the CPU). A layout or scale bug moves an output by about
// sum |qa qw| / sqrt(k) or more, outside this bound for the tests' k <= 1024.
inline double fp8_tensor_core_rel(const Backend& be, int64_t k) {
  if (be.name().rfind("cuda", 0) != 0) return 0.0;
  return static_cast<double>(std::min<int64_t>(k, 128) + 8) * 0x1p-13;
}

// The value of every E4M3 code (reference_fp8's table), for float64 references of big GEMMs.
inline const std::vector<double>& e4m3_values() {
  static const std::vector<double> values = [] {
    std::vector<double> v(256);
    for (int c = 0; c < 256; ++c) v[c] = ref_fp8_value(DType::FP8_E4M3, static_cast<uint8_t>(c));
    return v;
  }();
  return values;
}

// ---- Comparisons: one assertion per array, the first mismatches printed -------------------------

template <typename T>
void check_identical(const std::vector<T>& got, const std::vector<T>& expect,
                     const std::string& what) {
  MismatchLog log;
  if (got.size() != expect.size()) log.add("size %zu, expected %zu", got.size(), expect.size());
  for (size_t i = 0; i < std::min(got.size(), expect.size()); ++i) {
    if (std::memcmp(&got[i], &expect[i], sizeof(T)) == 0) continue;
    if constexpr (std::is_same_v<T, float>)
      log.add("[%zu]: expected %a (0x%08X), got %a (0x%08X)", i, expect[i], bits_of(expect[i]),
              got[i], bits_of(got[i]));
    else
      log.add("[%zu]: expected 0x%llX, got 0x%llX", i,
              static_cast<unsigned long long>(expect[i]),
              static_cast<unsigned long long>(got[i]));
  }
  INFO(what << ": " << log.summary());
  CHECK(log.count() == 0);
}

// |got[i] - ref[i]| <= tol[i] for every i (a NaN fails).
inline void check_close(const std::vector<float>& got, const std::vector<double>& ref,
                 const std::vector<double>& tol, const std::string& what) {
  MismatchLog log;
  double worst = 0;  // largest error / tolerance seen
  if (got.size() != ref.size()) log.add("size %zu, expected %zu", got.size(), ref.size());
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (tol[i] > 0) worst = std::max(worst, err / tol[i]);
    if (!(err <= tol[i]))
      log.add("[%zu]: ref %.9g, got %.9g, |err| %.3g > tol %.3g", i, ref[i],
              static_cast<double>(got[i]), err, tol[i]);
  }
  INFO(what << ": " << log.summary() << " (worst error / tolerance " << worst << ")");
  CHECK(log.count() == 0);
}

}  // namespace octet_test

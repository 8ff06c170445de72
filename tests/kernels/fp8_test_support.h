// Shared pieces of the FP8 tests: the two formats with their reference specs, and expected
// results computed by the independent reference (never by kernels/cpu).
#pragma once

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "fp8_test_values.h"
#include "kernels/cpu/fp8.h"
#include "minifloat_reference.h"
#include "mismatch_log.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
#define OCTET_TEST_HAVE_MXCSR 1
#endif

namespace octet_test {

/// count random E4M3 codes, every code but NaN (0x7F / 0xFF) alike: zeros, subnormals and
/// +-448 included (the W8A8 kernels do not accept NaN codes).
inline std::vector<uint8_t> random_finite_e4m3(std::mt19937& rng, int64_t count) {
  std::vector<uint8_t> codes(static_cast<size_t>(count));
  for (auto& c : codes) {
    do {
      c = static_cast<uint8_t>(rng() & 0xFF);
    } while ((c & 0x7F) == 0x7F);
  }
  return codes;
}

struct Fp8FormatCase {
  octet::DType format;
  MiniFloat spec;
  const char* name;
};
inline constexpr Fp8FormatCase kFp8Formats[] = {{octet::DType::FP8_E4M3, kE4M3, "E4M3"},
                                                {octet::DType::FP8_E5M2, kE5M2, "E5M2"}};

/// fp32 bits a decoder must return for `code`: the exact value, or 0x7FFFFFFF for NaN codes
/// (what cuda_fp8.h's fp8 -> half -> float gives).
inline uint32_t expected_fp8_decode_bits(const MiniFloat& f, uint8_t code) {
  if (f.is_nan(code)) return 0x7FFFFFFFu;
  return std::bit_cast<uint32_t>(static_cast<float>(code_value(f, code)));
}

/// Reference codes of fp8_stress_floats(), per format, computed once per process.
inline const std::vector<uint8_t>& reference_stress_codes(const Fp8FormatCase& fc) {
  static std::vector<uint8_t> cache[2];
  std::vector<uint8_t>& codes = cache[fc.format == octet::DType::FP8_E4M3 ? 0 : 1];
  if (codes.empty()) {
    const std::vector<float>& floats = fp8_stress_floats();
    codes.reserve(floats.size());
    for (float x : floats) codes.push_back(reference_fp8(fc.spec, static_cast<double>(x)));
  }
  return codes;
}

/// Logs every i where actual[i] != expected[i] (inputs[i] printed as the input bits).
template <typename Input>
void compare_fp8_codes(const std::vector<Input>& inputs, const std::vector<uint8_t>& expected,
                       const std::vector<uint8_t>& actual, MismatchLog& log) {
  if (actual.size() != expected.size() || inputs.size() != expected.size()) {
    log.add("size mismatch: %zu inputs, %zu expected, %zu actual", inputs.size(), expected.size(),
            actual.size());
    return;
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (actual[i] != expected[i]) {
      log.add("input 0x%08X: expected 0x%02X, got 0x%02X", static_cast<unsigned>(inputs[i]),
              expected[i], actual[i]);
    }
  }
}

#if OCTET_TEST_HAVE_MXCSR
/// Sets FTZ and DAZ (as -ffast-math's startup code does) for its lifetime, then restores MXCSR.
class FlushDenormalsScope {
 public:
  FlushDenormalsScope() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }  // FTZ | DAZ
  ~FlushDenormalsScope() { _mm_setcsr(saved_); }
  FlushDenormalsScope(const FlushDenormalsScope&) = delete;
  FlushDenormalsScope& operator=(const FlushDenormalsScope&) = delete;

 private:
  unsigned saved_;
};
#endif

}  // namespace octet_test

// FP8 E4M3/E5M2 conversions (kernels/cpu/fp8.h): scalar functions, scalar array loops and the
// dispatching array functions, held bit for bit (no tolerance) to
//   - values worked out by hand from the OCP FP8 definitions, and
//   - the independent reference in minifloat_reference.h (ldexp value tables + nearest search).
// The AVX2 path is tested in test_fp8_avx2.cpp; cuda_fp8.h is the oracle in test_fp8_oracle.cpp.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/fp8.h"
#include "kernels/fp8_test_support.h"

using octet::DType;
using octet_test::MiniFloat;
using octet_test::MismatchLog;
using FormatCase = octet_test::Fp8FormatCase;

namespace {

constexpr auto& kFormats = octet_test::kFp8Formats;
uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
float float_of(uint32_t bits) { return std::bit_cast<float>(bits); }

}  // namespace

TEST_CASE("fp8 decode: all 256 codes give the exact value of the format definition", "[fp8]") {
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    std::vector<uint8_t> codes(256);
    for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
    std::vector<float> scalar_array(256), dispatched(256);
    octet::fp8_decode_scalar(fc.format, codes.data(), scalar_array.data(), 256);
    octet::fp8_decode(fc.format, codes.data(), dispatched.data(), 256);
    MismatchLog log;
    for (int c = 0; c < 256; ++c) {
      const uint32_t expected =
          octet_test::expected_fp8_decode_bits(fc.spec, static_cast<uint8_t>(c));
      const uint32_t by_name =
          bits_of(fc.format == DType::FP8_E4M3 ? octet::fp8_e4m3_to_float(static_cast<uint8_t>(c))
                                               : octet::fp8_e5m2_to_float(static_cast<uint8_t>(c)));
      const uint32_t got[] = {by_name, bits_of(octet::fp8_to_float(fc.format, codes[c])),
                              bits_of(scalar_array[c]), bits_of(dispatched[c])};
      for (uint32_t g : got) {
        if (g != expected) log.add("code 0x%02X: expected 0x%08X, got 0x%08X", c, expected, g);
      }
    }
    INFO(log.summary());
    CHECK(log.count() == 0);
  }
}

TEST_CASE("fp8 decode: hand-checked codes", "[fp8]") {
  using octet::fp8_e4m3_to_float;
  using octet::fp8_e5m2_to_float;
  CHECK(fp8_e4m3_to_float(0x00) == 0.0f);
  CHECK(std::signbit(fp8_e4m3_to_float(0x80)));
  CHECK(fp8_e4m3_to_float(0x01) == std::ldexp(1.0f, -9));  // min subnormal
  CHECK(fp8_e4m3_to_float(0x07) == 7 * std::ldexp(1.0f, -9));
  CHECK(fp8_e4m3_to_float(0x08) == std::ldexp(1.0f, -6));  // min normal
  CHECK(fp8_e4m3_to_float(0x38) == 1.0f);
  CHECK(fp8_e4m3_to_float(0x7E) == 448.0f);
  CHECK(fp8_e4m3_to_float(0xFE) == -448.0f);
  CHECK(bits_of(fp8_e4m3_to_float(0x7F)) == 0x7FFFFFFFu);
  CHECK(bits_of(fp8_e4m3_to_float(0xFF)) == 0x7FFFFFFFu);
  CHECK(fp8_e5m2_to_float(0x01) == std::ldexp(1.0f, -16));
  CHECK(fp8_e5m2_to_float(0x04) == std::ldexp(1.0f, -14));
  CHECK(fp8_e5m2_to_float(0x3C) == 1.0f);
  CHECK(fp8_e5m2_to_float(0x7B) == 57344.0f);
  CHECK(fp8_e5m2_to_float(0x7C) == std::numeric_limits<float>::infinity());
  CHECK(fp8_e5m2_to_float(0xFC) == -std::numeric_limits<float>::infinity());
  CHECK(bits_of(fp8_e5m2_to_float(0x7D)) == 0x7FFFFFFFu);
  CHECK(bits_of(fp8_e5m2_to_float(0xFE)) == 0x7FFFFFFFu);
  CHECK(octet::fp8_max_value(DType::FP8_E4M3) == fp8_e4m3_to_float(0x7E));
  CHECK(octet::fp8_max_value(DType::FP8_E5M2) == fp8_e5m2_to_float(0x7B));
}

TEST_CASE("fp8 encode: hand-checked values", "[fp8]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float p = std::ldexp(1.0f, -10);  // 2^-10: half the E4M3 min subnormal
  const float q = std::ldexp(1.0f, -17);  // 2^-17: half the E5M2 min subnormal
  struct Row {
    float x;
    uint8_t e4m3;
    uint8_t e5m2;
    const char* why;
  };
  const Row rows[] = {
      {0.0f, 0x00, 0x00, "zero"},
      {-0.0f, 0x80, 0x80, "negative zero keeps its sign"},
      {1.0f, 0x38, 0x3C, "one"},
      {-2.0f, 0xC0, 0xC0, "minus two"},
      {0.1f, 0x1D, 0x2E, "0.1 = 1.6 * 2^-4"},
      {3.14159f, 0x45, 0x42, "pi"},
      {1.125f, 0x39, 0x3C, "E5M2 tie 1.0|1.25 -> even 1.0"},
      {1.375f, 0x3B, 0x3E, "E5M2 tie 1.25|1.5 -> even 1.5"},
      {248.0f, 0x78, 0x5C, "E4M3 tie 240|256 -> even 256"},
      {448.0f, 0x7E, 0x5F, "E4M3 max"},
      {464.0f, 0x7E, 0x5F, "E4M3 tie 448|(512) -> 448"},
      {480.0f, 0x7E, 0x60, "E4M3 saturates; E5M2 tie 448|512 -> even 512"},
      {57344.0f, 0x7E, 0x7B, "E5M2 max"},
      {61439.0f, 0x7E, 0x7B, "just below the E5M2 rounding midpoint"},
      {61440.0f, 0x7E, 0x7B, "E5M2 midpoint max|2^16 saturates (not inf)"},
      {65536.0f, 0x7E, 0x7B, "saturate"},
      {1e9f, 0x7E, 0x7B, "saturate"},
      {-1e9f, 0xFE, 0xFB, "saturate, negative"},
      {std::numeric_limits<float>::max(), 0x7E, 0x7B, "fp32 max saturates"},
      {inf, 0x7E, 0x7B, "inf saturates under SATFINITE"},
      {-inf, 0xFE, 0xFB, "-inf saturates under SATFINITE"},
      {float_of(0x7FC00000u), 0x7F, 0x7F, "quiet NaN"},
      {float_of(0xFFC00000u), 0x7F, 0x7F, "negative NaN loses its sign"},
      {float_of(0x7F800001u), 0x7F, 0x7F, "signalling NaN"},
      {float_of(0xFFFFFFFFu), 0x7F, 0x7F, "NaN, all ones"},
      {std::ldexp(1.0f, -6), 0x08, 0x24, "E4M3 min normal"},
      {15 * p, 0x08, 0x24, "E4M3 tie 7|8 units -> even 8; E5M2 tie -> even"},
      {std::ldexp(1.0f, -9), 0x01, 0x18, "E4M3 min subnormal"},
      {3 * p, 0x02, 0x1A, "E4M3 tie 1|2 units -> even 2"},
      {p, 0x00, 0x14, "E4M3 tie 0|min subnormal -> 0"},
      {-p, 0x80, 0x94, "E4M3 rounds to negative zero"},
      {float_of(0x3A800001u), 0x01, 0x14, "1 ulp above the E4M3 tie rounds up"},
      {std::ldexp(1.0f, -16), 0x00, 0x01, "E5M2 min subnormal"},
      {q, 0x00, 0x00, "E5M2 tie 0|min subnormal -> 0"},
      {3 * q, 0x00, 0x02, "E5M2 tie 1|2 units -> even 2"},
      {-3 * q, 0x80, 0x82, "negative"},
      {float_of(0x00000001u), 0x00, 0x00, "fp32 min subnormal"},
      {float_of(0x80000001u), 0x80, 0x80, "negative fp32 subnormal -> -0"},
  };
  for (const Row& row : rows) {
    INFO(row.why << ", x bits 0x" << std::hex << bits_of(row.x));
    CHECK(int{octet::fp8_e4m3_from_float(row.x)} == int{row.e4m3});
    CHECK(int{octet::fp8_e5m2_from_float(row.x)} == int{row.e5m2});
    CHECK(int{octet::fp8_from_float(DType::FP8_E4M3, row.x)} == int{row.e4m3});
    CHECK(int{octet::fp8_from_float(DType::FP8_E5M2, row.x)} == int{row.e5m2});
    // The reference must agree with the hand values too, or the bulk tests prove nothing.
    CHECK(int{octet_test::reference_fp8(octet_test::kE4M3, row.x)} == int{row.e4m3});
    CHECK(int{octet_test::reference_fp8(octet_test::kE5M2, row.x)} == int{row.e5m2});
  }
}

TEST_CASE("fp8 encode: 13M stress fp32 values match the reference (scalar paths)", "[fp8]") {
  const std::vector<uint32_t>& inputs = octet_test::fp8_stress_bits();
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  REQUIRE(inputs.size() >= 10'000'000);
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    const std::vector<uint8_t>& expected = octet_test::reference_stress_codes(fc);
    std::vector<uint8_t> by_function(floats.size()), by_array(floats.size());
    for (size_t i = 0; i < floats.size(); ++i) {
      by_function[i] = fc.format == DType::FP8_E4M3 ? octet::fp8_e4m3_from_float(floats[i])
                                                    : octet::fp8_e5m2_from_float(floats[i]);
    }
    octet::fp8_encode_scalar(fc.format, floats.data(), by_array.data(), floats.size());
    MismatchLog function_log, array_log;
    octet_test::compare_fp8_codes(inputs, expected, by_function, function_log);
    octet_test::compare_fp8_codes(inputs, expected, by_array, array_log);
    INFO("scalar function: " << function_log.summary());
    INFO("scalar array: " << array_log.summary());
    CHECK(function_log.count() == 0);
    CHECK(array_log.count() == 0);
  }
}

TEST_CASE("fp8 encode: 13M stress fp32 values match the reference (dispatched)", "[fp8]") {
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name << (octet::fp8_avx2_available() ? " (AVX2 chosen)" : " (scalar chosen)"));
    std::vector<uint8_t> got(floats.size());
    octet::fp8_encode(fc.format, floats.data(), got.data(), floats.size());
    MismatchLog log;
    octet_test::compare_fp8_codes(octet_test::fp8_stress_bits(),
                                  octet_test::reference_stress_codes(fc), got, log);
    INFO(log.summary());
    CHECK(log.count() == 0);
  }
}

namespace {

// All 65536 16-bit patterns of `half_spec` (bf16 or fp16) through every non-AVX2 path.
void check_all_16bit_patterns(const MiniFloat& half_spec, bool is_bf16) {
  std::vector<uint16_t> patterns(65536);
  for (uint32_t h = 0; h < 65536; ++h) patterns[h] = static_cast<uint16_t>(h);
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name << (is_bf16 ? " from bf16" : " from fp16"));
    std::vector<uint8_t> scalar_array(65536), dispatched(65536);
    if (is_bf16) {
      octet::fp8_encode_bf16_scalar(fc.format, patterns.data(), scalar_array.data(), 65536);
      octet::fp8_encode_bf16(fc.format, patterns.data(), dispatched.data(), 65536);
    } else {
      octet::fp8_encode_fp16_scalar(fc.format, patterns.data(), scalar_array.data(), 65536);
      octet::fp8_encode_fp16(fc.format, patterns.data(), dispatched.data(), 65536);
    }
    MismatchLog log;
    for (uint32_t h = 0; h < 65536; ++h) {
      const uint8_t expected =
          octet_test::reference_fp8(fc.spec, octet_test::code_value(half_spec, h));
      const uint16_t bits = static_cast<uint16_t>(h);
      uint8_t by_function;
      if (is_bf16) {
        by_function = fc.format == DType::FP8_E4M3 ? octet::fp8_e4m3_from_bf16(bits)
                                                   : octet::fp8_e5m2_from_bf16(bits);
      } else {
        by_function = fc.format == DType::FP8_E4M3 ? octet::fp8_e4m3_from_fp16(bits)
                                                   : octet::fp8_e5m2_from_fp16(bits);
      }
      for (uint8_t got : {by_function, scalar_array[h], dispatched[h]}) {
        if (got != expected) log.add("0x%04X: expected 0x%02X, got 0x%02X", h, expected, got);
      }
    }
    INFO(log.summary());
    CHECK(log.count() == 0);
  }
}

}  // namespace

TEST_CASE("fp8 encode: all 65536 bf16 patterns match the reference", "[fp8]") {
  check_all_16bit_patterns(octet_test::kBf16, /*is_bf16=*/true);
}

TEST_CASE("fp8 encode: all 65536 fp16 patterns match the reference", "[fp8]") {
  check_all_16bit_patterns(octet_test::kFp16, /*is_bf16=*/false);
}

TEST_CASE("fp8 round trip: encode of decode gives back every non-NaN code", "[fp8]") {
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      if (fc.spec.is_nan(code)) continue;
      INFO("code 0x" << std::hex << c);
      // E5M2 inf decodes to inf, which SATFINITE encodes as max with its sign.
      const uint8_t expected =
          fc.spec.is_inf(code) ? static_cast<uint8_t>((c & 0x80) | 0x7B) : code;
      CHECK(int{octet::fp8_from_float(fc.format, octet::fp8_to_float(fc.format, code))} ==
            int{expected});
    }
  }
}

TEST_CASE("fp8 arrays: every length 0..100 at odd offsets writes exactly n elements", "[fp8]") {
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  const size_t pool = floats.size();
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    for (size_t n = 0; n <= 100; ++n) {
      for (size_t offset = 0; offset < 4; ++offset) {
        INFO("n " << n << " offset " << offset);
        // Inputs taken from different parts of the pool so that every lane sees varied values.
        const float* src = floats.data() + (n * 7919 + offset * 104729) % (pool - 200);
        std::vector<uint8_t> encoded(n + 2 * 8 + offset, 0xAB);
        uint8_t* dst = encoded.data() + 8 + offset;
        octet::fp8_encode(fc.format, src, dst, n);
        std::vector<float> decoded(n + 2 * 8 + offset, -1.25f);
        float* out = decoded.data() + 8 + offset;
        octet::fp8_decode(fc.format, dst, out, n);
        for (size_t i = 0; i < 8 + offset; ++i) REQUIRE(encoded[i] == 0xAB);
        for (size_t i = 0; i < 8; ++i) REQUIRE(dst[n + i] == 0xAB);
        for (size_t i = 0; i < 8 + offset; ++i) REQUIRE(decoded[i] == -1.25f);
        for (size_t i = 0; i < 8; ++i) REQUIRE(out[n + i] == -1.25f);
        for (size_t i = 0; i < n; ++i) {
          REQUIRE(int{dst[i]} == int{octet_test::reference_fp8(fc.spec, src[i])});
          REQUIRE(bits_of(out[i]) == octet_test::expected_fp8_decode_bits(fc.spec, dst[i]));
        }
      }
    }
  }
}

#if OCTET_TEST_HAVE_MXCSR
TEST_CASE("fp8 scalar: FTZ and DAZ change no result", "[fp8]") {
  // Subnormal fp32 inputs, fp16 subnormals and fp8 subnormal codes are where flushing would bite.
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  std::vector<uint16_t> halves(65536);
  for (uint32_t h = 0; h < 65536; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    std::vector<uint8_t> encoded(floats.size()), from_bf16(65536), from_fp16(65536);
    std::vector<float> decoded(256);
    {
      octet_test::FlushDenormalsScope flush;
      octet::fp8_encode_scalar(fc.format, floats.data(), encoded.data(), floats.size());
      octet::fp8_encode_bf16_scalar(fc.format, halves.data(), from_bf16.data(), 65536);
      octet::fp8_encode_fp16_scalar(fc.format, halves.data(), from_fp16.data(), 65536);
      octet::fp8_decode_scalar(fc.format, codes.data(), decoded.data(), 256);
    }
    MismatchLog log;
    octet_test::compare_fp8_codes(octet_test::fp8_stress_bits(),
                                  octet_test::reference_stress_codes(fc), encoded, log);
    for (uint32_t h = 0; h < 65536; ++h) {
      if (from_bf16[h] !=
              octet_test::reference_fp8(fc.spec, octet_test::code_value(octet_test::kBf16, h)) ||
          from_fp16[h] !=
              octet_test::reference_fp8(fc.spec, octet_test::code_value(octet_test::kFp16, h))) {
        log.add("16-bit pattern 0x%04X", h);
      }
    }
    for (int c = 0; c < 256; ++c) {
      if (bits_of(decoded[c]) != octet_test::expected_fp8_decode_bits(fc.spec, codes[c])) {
        log.add("decode 0x%02X", c);
      }
    }
    INFO(log.summary());
    CHECK(log.count() == 0);
  }
}
#endif  // OCTET_TEST_HAVE_MXCSR

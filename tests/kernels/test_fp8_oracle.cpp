// cuda_fp8.h's host conversions as the bit-exact oracle of the CPU FP8 code (DESIGN.md:
// "CPU conversion must equal cuda_fp8.h's host conversion bit for bit"). Compiled by the host
// compiler (no nvcc, no GPU): the header's host branch is plain C++.
// The test cases exist only where the CUDA toolkit headers were found (OCTET_HAVE_CUDA_FP8_H);
// elsewhere this binary holds no tests and the always-built test_fp8.cpp checks against the
// independent reference instead. The oracle also checks that reference, so the two agree.
#if OCTET_HAVE_CUDA_FP8_H

#include <cuda_fp8.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/fp8.h"
#include "kernels/fp8_test_support.h"

using octet::DType;
using octet_test::MismatchLog;
using FormatCase = octet_test::Fp8FormatCase;

namespace {

constexpr auto& kFormats = octet_test::kFp8Formats;

__nv_fp8_interpretation_t cuda_format(DType format) {
  return format == DType::FP8_E4M3 ? __NV_E4M3 : __NV_E5M2;
}

uint8_t oracle_from_float(DType format, float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, cuda_format(format));
}

uint8_t oracle_from_bf16(DType format, uint16_t bits) {
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return __nv_cvt_bfloat16raw_to_fp8(raw, __NV_SATFINITE, cuda_format(format));
}

uint8_t oracle_from_fp16(DType format, uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return __nv_cvt_halfraw_to_fp8(raw, __NV_SATFINITE, cuda_format(format));
}

// The fp8 types' own float conversion (fp8 -> half -> float, host path).
uint32_t oracle_decode_bits(DType format, uint8_t code) {
  float value;
  if (format == DType::FP8_E4M3) {
    __nv_fp8_e4m3 v;
    v.__x = code;
    value = static_cast<float>(v);
  } else {
    __nv_fp8_e5m2 v;
    v.__x = code;
    value = static_cast<float>(v);
  }
  return std::bit_cast<uint32_t>(value);
}

}  // namespace

TEST_CASE("fp8 oracle: cuda_fp8.h agrees with the test reference on the stress values",
          "[fp8][cuda_fp8_h]") {
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    std::vector<uint8_t> oracle(floats.size());
    for (size_t i = 0; i < floats.size(); ++i) oracle[i] = oracle_from_float(fc.format, floats[i]);
    MismatchLog log;
    octet_test::compare_fp8_codes(octet_test::fp8_stress_bits(), oracle,
                                  octet_test::reference_stress_codes(fc), log);
    INFO("reference vs oracle: " << log.summary());
    CHECK(log.count() == 0);
  }
}

TEST_CASE("fp8 oracle: encode of 13M stress fp32 values equals __nv_cvt_float_to_fp8",
          "[fp8][cuda_fp8_h]") {
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  REQUIRE(floats.size() >= 10'000'000);
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    std::vector<uint8_t> oracle(floats.size()), by_function(floats.size());
    std::vector<uint8_t> scalar_array(floats.size()), dispatched(floats.size());
    for (size_t i = 0; i < floats.size(); ++i) {
      oracle[i] = oracle_from_float(fc.format, floats[i]);
      by_function[i] = octet::fp8_from_float(fc.format, floats[i]);
    }
    octet::fp8_encode_scalar(fc.format, floats.data(), scalar_array.data(), floats.size());
    octet::fp8_encode(fc.format, floats.data(), dispatched.data(), floats.size());
    const std::vector<uint32_t>& inputs = octet_test::fp8_stress_bits();
    MismatchLog function_log, scalar_log, dispatched_log, avx2_log;
    octet_test::compare_fp8_codes(inputs, oracle, by_function, function_log);
    octet_test::compare_fp8_codes(inputs, oracle, scalar_array, scalar_log);
    octet_test::compare_fp8_codes(inputs, oracle, dispatched, dispatched_log);
    if (octet::fp8_avx2_available()) {
      std::vector<uint8_t> avx2(floats.size());
      octet::fp8_encode_avx2(fc.format, floats.data(), avx2.data(), floats.size());
      octet_test::compare_fp8_codes(inputs, oracle, avx2, avx2_log);
    } else {
      WARN("no AVX2 on this CPU: the AVX2 path was not compared with the oracle");
    }
    INFO("scalar function: " << function_log.summary());
    INFO("scalar array: " << scalar_log.summary());
    INFO("dispatched array: " << dispatched_log.summary());
    INFO("avx2 array: " << avx2_log.summary());
    CHECK(function_log.count() == 0);
    CHECK(scalar_log.count() == 0);
    CHECK(dispatched_log.count() == 0);
    CHECK(avx2_log.count() == 0);
  }
}

TEST_CASE("fp8 oracle: all bf16 and fp16 patterns equal the cuda_fp8.h conversions",
          "[fp8][cuda_fp8_h]") {
  std::vector<uint16_t> patterns(65536);
  for (uint32_t h = 0; h < 65536; ++h) patterns[h] = static_cast<uint16_t>(h);
  const bool avx2 = octet::fp8_avx2_available();
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    std::vector<uint8_t> arrays[4];  // bf16 scalar, fp16 scalar, bf16 avx2, fp16 avx2
    for (auto& a : arrays) a.assign(65536, 0);
    octet::fp8_encode_bf16_scalar(fc.format, patterns.data(), arrays[0].data(), 65536);
    octet::fp8_encode_fp16_scalar(fc.format, patterns.data(), arrays[1].data(), 65536);
    if (avx2) {
      octet::fp8_encode_bf16_avx2(fc.format, patterns.data(), arrays[2].data(), 65536);
      octet::fp8_encode_fp16_avx2(fc.format, patterns.data(), arrays[3].data(), 65536);
    }
    MismatchLog log;
    for (uint32_t h = 0; h < 65536; ++h) {
      const uint16_t bits = static_cast<uint16_t>(h);
      const uint8_t bf16_oracle = oracle_from_bf16(fc.format, bits);
      const uint8_t fp16_oracle = oracle_from_fp16(fc.format, bits);
      const uint8_t bf16_function = fc.format == DType::FP8_E4M3 ? octet::fp8_e4m3_from_bf16(bits)
                                                                 : octet::fp8_e5m2_from_bf16(bits);
      const uint8_t fp16_function = fc.format == DType::FP8_E4M3 ? octet::fp8_e4m3_from_fp16(bits)
                                                                 : octet::fp8_e5m2_from_fp16(bits);
      const uint8_t bf16_reference =
          octet_test::reference_fp8(fc.spec, octet_test::code_value(octet_test::kBf16, h));
      const uint8_t fp16_reference =
          octet_test::reference_fp8(fc.spec, octet_test::code_value(octet_test::kFp16, h));
      for (uint8_t got : {bf16_function, arrays[0][h], bf16_reference}) {
        if (got != bf16_oracle)
          log.add("bf16 0x%04X: oracle 0x%02X, got 0x%02X", h, bf16_oracle, got);
      }
      for (uint8_t got : {fp16_function, arrays[1][h], fp16_reference}) {
        if (got != fp16_oracle)
          log.add("fp16 0x%04X: oracle 0x%02X, got 0x%02X", h, fp16_oracle, got);
      }
      if (avx2 && arrays[2][h] != bf16_oracle) log.add("avx2 bf16 0x%04X", h);
      if (avx2 && arrays[3][h] != fp16_oracle) log.add("avx2 fp16 0x%04X", h);
    }
    if (!avx2) WARN("no AVX2 on this CPU: the AVX2 bf16/fp16 paths were not compared");
    INFO(log.summary());
    CHECK(log.count() == 0);
  }
}

TEST_CASE("fp8 oracle: decode of all 256 codes equals the cuda_fp8.h float conversion",
          "[fp8][cuda_fp8_h]") {
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    std::vector<uint8_t> codes(256);
    for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
    std::vector<float> dispatched(256);
    octet::fp8_decode(fc.format, codes.data(), dispatched.data(), 256);
    MismatchLog log;
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      const uint32_t oracle = oracle_decode_bits(fc.format, code);
      const uint32_t got[] = {std::bit_cast<uint32_t>(octet::fp8_to_float(fc.format, code)),
                              std::bit_cast<uint32_t>(dispatched[c]),
                              octet_test::expected_fp8_decode_bits(fc.spec, code)};
      for (uint32_t g : got) {
        if (g != oracle) log.add("code 0x%02X: oracle 0x%08X, got 0x%08X", c, oracle, g);
      }
    }
    INFO(log.summary());
    CHECK(log.count() == 0);
  }
}

// Every fp32 bit pattern, both formats, scalar and (where present) AVX2 against the oracle.
// About a minute per run on one core, so hidden from the default run and from CTest; run it by
// hand after touching the encoder:  build/test_fp8_oracle "[.exhaustive]"
TEST_CASE("fp8 oracle: every fp32 bit pattern", "[.exhaustive][fp8][cuda_fp8_h]") {
  const bool avx2 = octet::fp8_avx2_available();
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<float> floats(kChunk);
  std::vector<uint8_t> simd(kChunk);
  MismatchLog log;
  for (uint64_t base = 0; base < (uint64_t{1} << 32); base += kChunk) {
    for (size_t i = 0; i < kChunk; ++i) floats[i] = std::bit_cast<float>(uint32_t(base + i));
    for (const FormatCase& fc : kFormats) {
      if (avx2) octet::fp8_encode_avx2(fc.format, floats.data(), simd.data(), kChunk);
      for (size_t i = 0; i < kChunk; ++i) {
        const float x = floats[i];
        const uint8_t oracle = oracle_from_float(fc.format, x);
        const uint8_t scalar = octet::fp8_from_float(fc.format, x);
        if (scalar != oracle || (avx2 && simd[i] != oracle)) {
          log.add("%s 0x%08X: oracle 0x%02X, scalar 0x%02X, avx2 0x%02X", fc.name,
                  std::bit_cast<uint32_t>(x), oracle, scalar, simd[i]);
        }
      }
    }
  }
  if (!avx2) WARN("no AVX2 on this CPU: only the scalar path was compared");
  INFO(log.summary());
  CHECK(log.count() == 0);
}

#endif  // OCTET_HAVE_CUDA_FP8_H

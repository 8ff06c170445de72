// bf16/fp16 <-> fp32 helpers (kernels/cpu/half.h), bit for bit against hand-checked values, the
// independent reference (minifloat_reference.h: IEEE round to nearest even, overflow to inf)
// and, where the CUDA headers exist, __float2bfloat16_rn / __float2half_rn on the host.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#if OCTET_HAVE_CUDA_FP8_H
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "kernels/common/half.h"
#include "kernels/fp8_test_values.h"
#include "kernels/minifloat_reference.h"
#include "kernels/mismatch_log.h"

using octet_test::MismatchLog;

namespace {

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }

// Reference fp32 -> 16-bit code: RNE, IEEE overflow to inf, NaN -> 0x7FFF.
uint16_t reference_16(const octet_test::MiniFloat& f, float x) {
  return static_cast<uint16_t>(octet_test::round_to_code(
      f, static_cast<double>(x), octet_test::Overflow::kToInfinity, 0x7FFF));
}

}  // namespace

TEST_CASE("half: all 65536 bf16 and fp16 patterns widen to fp32 exactly", "[half]") {
  MismatchLog log;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const struct {
      const char* name;
      double expected;
      float got;
    } cases[] = {
        {"bf16", octet_test::code_value(octet_test::kBf16, h), octet::bf16_to_float(bits)},
        {"fp16", octet_test::code_value(octet_test::kFp16, h), octet::fp16_to_float(bits)}};
    for (const auto& c : cases) {
      const bool sign = (h & 0x8000u) != 0;
      if (std::isnan(c.expected)) {
        // NaN stays NaN and keeps its sign.
        if (!std::isnan(c.got) || std::signbit(c.got) != sign) log.add("%s 0x%04X: NaN", c.name, h);
      } else if (bits_of(c.got) != bits_of(static_cast<float>(c.expected))) {
        log.add("%s 0x%04X: expected %a, got %a", c.name, h, c.expected,
                static_cast<double>(c.got));
      }
    }
  }
  INFO(log.summary());
  CHECK(log.count() == 0);
}

TEST_CASE("half: fp32 to bf16 and fp16 hand-checked values", "[half]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(octet::float_to_bf16(1.0f) == 0x3F80);
  CHECK(octet::float_to_bf16(-2.0f) == 0xC000);
  CHECK(octet::float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);        // tie -> even
  CHECK(octet::float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);    // tie -> even
  CHECK(octet::float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds to inf
  CHECK(octet::float_to_bf16(-inf) == 0xFF80);
  CHECK(octet::float_to_bf16(std::bit_cast<float>(0xFFC00001u)) == 0x7FFF);  // NaN canonical
  CHECK(octet::float_to_bf16(std::bit_cast<float>(0x00000001u)) == 0x0000);  // fp32 subnormal
  CHECK(octet::float_to_bf16(std::bit_cast<float>(0x00008000u)) == 0x0000);  // tie -> even 0
  CHECK(octet::float_to_bf16(std::bit_cast<float>(0x00018000u)) == 0x0002);  // tie -> even 2
  CHECK(octet::float_to_fp16(1.0f) == 0x3C00);
  CHECK(octet::float_to_fp16(-0.0f) == 0x8000);
  CHECK(octet::float_to_fp16(65504.0f) == 0x7BFF);  // fp16 max
  CHECK(octet::float_to_fp16(65519.0f) == 0x7BFF);  // below the midpoint to 2^16
  CHECK(octet::float_to_fp16(65520.0f) == 0x7C00);  // midpoint: ties to even = inf
  CHECK(octet::float_to_fp16(inf) == 0x7C00);
  CHECK(octet::float_to_fp16(-1e30f) == 0xFC00);
  CHECK(octet::float_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);  // min normal
  CHECK(octet::float_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);  // min subnormal
  CHECK(octet::float_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie -> even 0
  CHECK(octet::float_to_fp16(-std::ldexp(1.0f, -25)) == 0x8000);
  CHECK(octet::float_to_fp16(3 * std::ldexp(1.0f, -25)) == 0x0002);        // tie 1|2 -> even 2
  CHECK(octet::float_to_fp16(1023.5f * std::ldexp(1.0f, -24)) == 0x0400);  // tie -> min normal
  CHECK(octet::float_to_fp16(std::bit_cast<float>(0x7F800001u)) == 0x7FFF);
}

TEST_CASE("half: fp32 to bf16 and fp16 match the reference on 13M stress values", "[half]") {
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  MismatchLog log;
  for (float x : floats) {
    const uint16_t bf16_expected = reference_16(octet_test::kBf16, x);
    const uint16_t fp16_expected = reference_16(octet_test::kFp16, x);
    const uint16_t bf16 = octet::float_to_bf16(x);
    const uint16_t fp16 = octet::float_to_fp16(x);
    if (bf16 != bf16_expected)
      log.add("bf16 0x%08X: expected 0x%04X, got 0x%04X", bits_of(x), bf16_expected, bf16);
    if (fp16 != fp16_expected)
      log.add("fp16 0x%08X: expected 0x%04X, got 0x%04X", bits_of(x), fp16_expected, fp16);
  }
  INFO(log.summary());
  CHECK(log.count() == 0);
}

TEST_CASE("half: narrowing the widened value gives back every non-NaN pattern", "[half]") {
  MismatchLog log;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    if (!octet_test::kBf16.is_nan(h) && octet::float_to_bf16(octet::bf16_to_float(bits)) != bits) {
      log.add("bf16 0x%04X", h);
    }
    if (!octet_test::kFp16.is_nan(h) && octet::float_to_fp16(octet::fp16_to_float(bits)) != bits) {
      log.add("fp16 0x%04X", h);
    }
  }
  INFO(log.summary());
  CHECK(log.count() == 0);
}

#if OCTET_HAVE_CUDA_FP8_H
TEST_CASE("half: fp32 to bf16 and fp16 equal cuda_bf16.h and cuda_fp16.h on the host",
          "[half][cuda_fp8_h]") {
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  MismatchLog log;
  for (float x : floats) {
    const __nv_bfloat16_raw bf16_oracle = __float2bfloat16_rn(x);
    const __half_raw fp16_oracle = __float2half_rn(x);
    if (octet::float_to_bf16(x) != bf16_oracle.x) log.add("bf16 0x%08X", bits_of(x));
    if (octet::float_to_fp16(x) != fp16_oracle.x) log.add("fp16 0x%08X", bits_of(x));
    // The reference must agree with the oracle as well.
    if (reference_16(octet_test::kBf16, x) != bf16_oracle.x) log.add("ref bf16 0x%08X", bits_of(x));
    if (reference_16(octet_test::kFp16, x) != fp16_oracle.x) log.add("ref fp16 0x%08X", bits_of(x));
  }
  INFO(log.summary());
  CHECK(log.count() == 0);
}
#endif  // OCTET_HAVE_CUDA_FP8_H

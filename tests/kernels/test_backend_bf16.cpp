// Backend::f32_to_bf16 and bf16_to_f32 (kernels/backend.h; a row-parallel output's way through
// the BF16 all-reduce) on every backend (backend_test_support.h: "cpu", and "cuda", reported
// skipped where unavailable). Bit-exact: the contract fixes every result. f32_to_bf16 against
// hand-worked values (ties to even both ways, a value past the tie, negatives, the overflow to
// inf at max + ulp/2, subnormals, inf, NaN payloads), then ties, their neighbours and random bit
// patterns against the minifloat reference (minifloat_reference.h, written from the format's
// definition) and, where the CUDA headers are present, cuda_bf16.h's host __float2bfloat16_rn.
// bf16_to_f32 over all 65536 codes: the code's bits as the FP32's top half (a NaN keeps its
// payload), and the reference's value for every non-NaN code.
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#if OCTET_HAVE_CUDA_FP8_H
#include <cuda_bf16.h>
#endif

#include "kernels/backend.h"
#include "kernels/backend_op_reference.h"
#include "kernels/backend_test_support.h"
#include "kernels/minifloat_reference.h"

using namespace octet;
using namespace octet_test;

namespace {

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// {fp32 bits, BF16 bits}, worked out by hand. Near 1 BF16's spacing is 2^-7 (0x3F80 = 1,
// 0x3F81 = 1 + 2^-7); its largest finite value is 0x7F7F = (2 - 2^-7) 2^127.
struct HandValue {
  uint32_t f32;
  uint16_t bf16;
};
const HandValue kHand[] = {
    {0x3F800000, 0x3F80},  // 1
    {0x3F808000, 0x3F80},  // 1 + 2^-8: a tie, to the even 1
    {0x3F818000, 0x3F82},  // 1 + 3 2^-8: a tie, up to the even 1 + 2^-6
    {0x3F808001, 0x3F81},  // 1 + 2^-8 + 2^-23: past the tie, up (truncation gives 0x3F80)
    {0x3F807FFF, 0x3F80},  // just below the tie: down
    {0x3F80FFFF, 0x3F81},  // 1 + 2^-7 - 2^-23: nearest is 1 + 2^-7
    {0xC0200000, 0xC020},  // -2.5
    {0xBF808000, 0xBF80},  // -(1 + 2^-8): a tie, to the even -1
    {0xBF818000, 0xBF82},  // -(1 + 3 2^-8): a tie, to the even -(1 + 2^-6)
    {0x00000000, 0x0000},  // +0
    {0x80000000, 0x8000},  // -0
    {0x00000001, 0x0000},  // 2^-149, the least FP32 subnormal: below half a BF16 subnormal ulp
    {0x00008000, 0x0000},  // 2^-134 = half of 2^-133 (BF16's least subnormal): a tie, to 0
    {0x00018000, 0x0002},  // 1.5 2^-133: a tie, up to the even 2 2^-133
    {0x007FFFFF, 0x0080},  // the largest FP32 subnormal rounds up to 2^-126, the least normal
    {0x7F7F7FFF, 0x7F7F},  // just below max + ulp/2: max
    {0x7F7F8000, 0x7F80},  // max + ulp/2: a tie, to the even code past max, inf (IEEE)
    {0x7F7FFFFF, 0x7F80},  // FLT_MAX: inf
    {0xFF7F8000, 0xFF80},  // -(max + ulp/2): -inf
    {0x7F800000, 0x7F80},  // inf
    {0xFF800000, 0xFF80},  // -inf
    {0x7FC00000, 0x7FFF},  // NaN -> 0x7FFF
    {0x7FC00001, 0x7FFF},  // NaN whose payload truncation would keep in the low half only
    {0x7F800001, 0x7FFF},  // signalling NaN (truncation would give inf, 0x7F80)
    {0xFFC00000, 0x7FFF},  // negative NaN -> 0x7FFF
};

// The inputs checked against the reference: every tie between neighbouring BF16 values of a
// few binades and the FP32s next to it, then random bit patterns (all exponents, NaNs too).
std::vector<uint32_t> stress_bits() {
  std::vector<uint32_t> out;
  for (uint32_t code : {0x0000u, 0x0001u, 0x007Fu, 0x0080u, 0x3B80u, 0x3F80u, 0x3FFFu, 0x4380u,
                        0x7F00u, 0x7F7Eu, 0x7F7Fu})
    for (uint32_t c = code; c < code + 128 && c <= 0x7F7F; ++c) {
      const uint32_t tie = (c << 16) | 0x8000u;  // halfway between c and c + 1
      for (uint32_t d : {0u, 1u, 2u})
        for (uint32_t b : {tie - d, tie + d}) out.insert(out.end(), {b, b | 0x80000000u});
    }
  std::mt19937 rng(20260717u);
  for (int i = 0; i < 200000; ++i) out.push_back(static_cast<uint32_t>(rng()));
  return out;
}

void f32_to_bf16_case(Backend& be) {
  std::vector<float> x;
  std::vector<uint16_t> want;
  for (const HandValue& h : kHand) {
    x.push_back(from_bits(h.f32));
    want.push_back(h.bf16);
  }
  const size_t hand = x.size();
  for (uint32_t b : stress_bits()) {
    x.push_back(from_bits(b));
    want.push_back(static_cast<uint16_t>(
        round_to_code(kBf16, from_bits(b), Overflow::kToInfinity, 0x7FFF)));
  }
  // The reference agrees with the hand values (a guard on both).
  for (size_t i = 0; i < hand; ++i) {
    INFO("hand value " << i);
    CHECK(round_to_code(kBf16, x[i], Overflow::kToInfinity, 0x7FFF) == want[i]);
  }
#if OCTET_HAVE_CUDA_FP8_H
  {
    std::vector<uint16_t> oracle(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const __nv_bfloat16_raw raw = __float2bfloat16_rn(x[i]);
      oracle[i] = raw.x;
    }
    check_identical(oracle, want, "cuda_bf16.h __float2bfloat16_rn against the reference");
  }
#endif
  // Counts with tails; the hand values first in each.
  for (const int64_t count : {int64_t{1}, static_cast<int64_t>(hand), int64_t{1003},
                              static_cast<int64_t>(x.size())}) {
    CAPTURE(count);
    const std::vector<float> in(x.begin(), x.begin() + count);
    const auto d_x = to_device(be, in);
    auto d_out = device_zeros<uint16_t>(be, count + 1);  // one guard element past the end
    be.upload(d_out.buffer, count * 2, "\xAB\xCD", 2);
    be.f32_to_bf16(d_x.data(), count, d_out.data());
    std::vector<uint16_t> expect(want.begin(), want.begin() + count);
    expect.push_back(0xCDAB);
    check_identical(to_host(be, d_out), expect, "f32_to_bf16");
  }
  be.f32_to_bf16(nullptr, 0, nullptr);  // nothing to do
  be.synchronize();
}
BACKEND_TEST_CASE("f32_to_bf16 rounds to nearest even, NaN to 0x7FFF", f32_to_bf16_case)

void bf16_to_f32_case(Backend& be) {
  std::vector<uint16_t> codes(65536);
  for (uint32_t c = 0; c < 65536; ++c) codes[c] = static_cast<uint16_t>(c);
  std::vector<float> want(codes.size());
  int64_t nans = 0;
  for (uint32_t c = 0; c < 65536; ++c) {
    want[c] = from_bits(c << 16);
    if (kBf16.is_nan(c)) {
      ++nans;
    } else {  // the same value as the reference's decoding
      INFO("code 0x" << std::hex << c);
      REQUIRE(static_cast<double>(want[c]) == code_value(kBf16, c));
    }
  }
  REQUIRE(nans == 2 * 127);
  CHECK(want[0x3F80] == 1.0f);
  CHECK(want[0xC020] == -2.5f);
  CHECK(want[0x4070] == 3.75f);
  CHECK(std::bit_cast<uint32_t>(want[0x7FC1]) == 0x7FC10000u);  // a NaN's payload kept
  for (const int64_t count : {int64_t{1}, int64_t{1003}, int64_t{65536}}) {
    CAPTURE(count);
    const std::vector<uint16_t> in(codes.begin(), codes.begin() + count);
    const auto d_x = to_device(be, in);
    auto d_out = device_zeros<float>(be, count);
    be.bf16_to_f32(d_x.data(), count, d_out.data());
    check_identical(to_host(be, d_out), std::vector<float>(want.begin(), want.begin() + count),
                    "bf16_to_f32");
  }
  // The round trip through f32_to_bf16 gives back every non-NaN code.
  const auto d_codes = to_device(be, codes);
  auto d_f32 = device_zeros<float>(be, 65536);
  auto d_back = device_zeros<uint16_t>(be, 65536);
  be.bf16_to_f32(d_codes.data(), 65536, d_f32.data());
  be.f32_to_bf16(d_f32.data(), 65536, d_back.data());
  const std::vector<uint16_t> back = to_host(be, d_back);
  int64_t bad = 0;
  for (uint32_t c = 0; c < 65536; ++c)
    bad += back[c] != (kBf16.is_nan(c) ? 0x7FFF : c);
  CHECK(bad == 0);
}
BACKEND_TEST_CASE("bf16_to_f32 widens every code exactly", bf16_to_f32_case)

}  // namespace

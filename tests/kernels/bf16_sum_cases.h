// The BF16 all-reduce of the CPU communicators (kernels/communicator.h all_reduce_sum_bf16:
// widen each rank's BF16 to FP32, add in rank order, round the FP32 sum once to nearest even)
// as hand-worked cases and an independent reference, for test_thread_communicator.cpp and
// test_socket_communicator.cpp. BF16 bits: sign, 8 exponent bits (bias 127), 7 mantissa bits;
// near 1 the spacing is 2^-7, so 1 + 2^-8 is a tie.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/minifloat_reference.h"

namespace octet_test {

/// One element: rank r's input ranks[r] (world = ranks.size()) and the sum every rank gets.
struct Bf16SumCase {
  const char* what;
  std::vector<uint16_t> ranks;
  uint16_t want;
};

inline const std::vector<Bf16SumCase>& bf16_sum_cases() {
  static const std::vector<Bf16SumCase> cases = {
      // world 2
      {"exact: 1.5 + 2.25 = 3.75", {0x3FC0, 0x4010}, 0x4070},
      {"tie to even, down: 1 + 2^-8", {0x3F80, 0x3B80}, 0x3F80},
      {"tie to even, up: (1 + 2^-7) + 2^-8", {0x3F81, 0x3B80}, 0x3F82},
      {"past the tie rounds up (truncation would not): 1 + (2^-8 + 2^-15)", {0x3F80, 0x3B81},
       0x3F81},
      {"negative: -2.5 + 0.75 = -1.75", {0xC020, 0x3F40}, 0xBFE0},
      {"negative tie to even: -1 + -2^-8", {0xBF80, 0xBB80}, 0xBF80},
      {"cancellation to +0: 1 + -1", {0x3F80, 0xBF80}, 0x0000},
      {"-0 + -0 = -0", {0x8000, 0x8000}, 0x8000},
      {"subnormals: 2^-133 + 2^-133 = 2^-132", {0x0001, 0x0001}, 0x0002},
      {"below the halfway point past max stays max: max + 2^118", {0x7F7F, 0x7A80}, 0x7F7F},
      {"a finite FP32 sum at the halfway point past max rounds to +inf: max + 2^119",
       {0x7F7F, 0x7B00}, 0x7F80},
      {"likewise to -inf: -max + -2^119", {0xFF7F, 0xFB00}, 0xFF80},
      {"inf + -100 = inf", {0x7F80, 0xC2C8}, 0x7F80},
      {"-inf + 1 = -inf", {0xFF80, 0x3F80}, 0xFF80},
      {"inf + -inf = NaN (0x7FFF)", {0x7F80, 0xFF80}, 0x7FFF},
      {"NaN with a payload stays NaN (0x7FFF): NaN + 1", {0x7FC1, 0x3F80}, 0x7FFF},
      {"a negative NaN stays NaN (0x7FFF): 1 + -NaN", {0x3F80, 0xFFC0}, 0x7FFF},
      // world 3: the FP32 sum is rounded once, not after each addition (NCCL's way would give
      // 256 + 1 -> 256 (a tie, to even), then 0; and 1 + 2^-7 + 2^-9 -> 1 + 2^-7, twice).
      {"one rounding: (256 + 1) + -256 = 1", {0x4380, 0x3F80, 0xC380}, 0x3F80},
      {"one rounding: ((1 + 2^-7) + 2^-9) + 2^-9 is the tie 1 + 3 2^-8, up to even",
       {0x3F81, 0x3B00, 0x3B00}, 0x3F82},
      {"three ranks, negative: -1 + -2 + 0.5 = -2.5", {0xBF80, 0xC000, 0x3F00}, 0xC020},
  };
  return cases;
}

/// The cases of one world size laid out as buffers: per_rank[r][e] = case e's rank-r input,
/// want[e] its sum, what[e] its description.
struct Bf16CaseBuffers {
  std::vector<std::vector<uint16_t>> per_rank;
  std::vector<uint16_t> want;
  std::vector<std::string> what;
};

inline Bf16CaseBuffers bf16_case_buffers(int world) {
  Bf16CaseBuffers b;
  b.per_rank.resize(static_cast<size_t>(world));
  for (const Bf16SumCase& c : bf16_sum_cases()) {
    if (static_cast<int>(c.ranks.size()) != world) continue;
    for (int r = 0; r < world; ++r) b.per_rank[r].push_back(c.ranks[r]);
    b.want.push_back(c.want);
    b.what.push_back(c.what);
  }
  return b;
}

/// The contract's sum written independently of octet's conversions: widen by shifting the bits
/// into an FP32's top half, add in rank order in FP32, round with the minifloat reference
/// (IEEE overflow to inf, NaN -> 0x7FFF).
inline uint16_t reference_bf16_sum(const std::vector<uint16_t>& ranks) {
  float acc = std::bit_cast<float>(static_cast<uint32_t>(ranks[0]) << 16);
  for (size_t r = 1; r < ranks.size(); ++r)
    acc += std::bit_cast<float>(static_cast<uint32_t>(ranks[r]) << 16);
  return static_cast<uint16_t>(round_to_code(kBf16, acc, Overflow::kToInfinity, 0x7FFF));
}

/// Rank r's element i of the bulk tests: BF16 of mixed magnitudes (1e3 on even ranks, 1e-2 on
/// odd ones) and signs, so that sums round and their order matters.
inline uint16_t bf16_bulk_value(int rank, int64_t i) {
  const double mag = rank % 2 == 0 ? 1e3 : 1e-2;
  const double x = mag * std::sin(0.37 * static_cast<double>(i + 1) + 1.3 * rank) + 0.1 * rank;
  return static_cast<uint16_t>(round_to_code(kBf16, static_cast<float>(x), Overflow::kToInfinity,
                                             0x7FFF));
}

}  // namespace octet_test

// FP8 weight layouts (fp8_layout.h): sizes and packing from row-major.
#include "kernels/cpu/fp8_layout.h"

#include <algorithm>
#include <cstring>

#include "kernels/common/check.h"

namespace octet {

namespace {

constexpr int64_t kRows = 8, kChunk = 32;

int64_t chunks_per_part(int64_t k, int64_t k_groups) {
  return (k / k_groups + kChunk - 1) / kChunk;
}

}  // namespace

int64_t fp8_rows8x32_bytes(int64_t n, int64_t k, int64_t k_groups) {
  OCTET_CHECK(n >= 0 && k >= 0 && k_groups >= 1 && k % k_groups == 0,
              "fp8_rows8x32_bytes: shape ", n, " x ", k, " in ", k_groups, " parts");
  return (n + kRows - 1) / kRows * k_groups * chunks_per_part(k, k_groups) * kRows * kChunk;
}

void pack_fp8_rows8x32(const uint8_t* w, int64_t n, int64_t k, int64_t k_groups, uint8_t* dst) {
  const int64_t bytes = fp8_rows8x32_bytes(n, k, k_groups);
  if (bytes == 0) return;
  std::memset(dst, 0, static_cast<size_t>(bytes));
  const int64_t kg = k / k_groups, chunks = chunks_per_part(k, k_groups);
  static constexpr int kQuarter[4] = {0, 2, 1, 3};  // byte offset of element l's quarter l / 8
  for (int64_t j = 0; j < n; ++j) {
    const int64_t b = j / kRows, r = j % kRows;
    for (int64_t g = 0; g < k_groups; ++g)
      for (int64_t c = 0; c < chunks; ++c) {
        uint8_t* out = dst + ((b * k_groups + g) * chunks + c) * kRows * kChunk + r * kChunk;
        const int64_t t0 = g * kg + c * kChunk, count = std::min(kChunk, (g + 1) * kg - t0);
        for (int64_t l = 0; l < count; ++l) out[4 * (l % 8) + kQuarter[l / 8]] = w[j * k + t0 + l];
      }
  }
}

int64_t fp8_weight_bytes(Fp8Layout layout, int64_t n, int64_t k, int64_t k_groups) {
  return layout == Fp8Layout::Rows8x32 ? fp8_rows8x32_bytes(n, k, k_groups) : n * k;
}

void pack_fp8_weight(Fp8Layout layout, const uint8_t* w, int64_t n, int64_t k, int64_t k_groups,
                     uint8_t* dst) {
  if (layout == Fp8Layout::Rows8x32) return pack_fp8_rows8x32(w, n, k, k_groups, dst);
  if (n * k > 0) std::memcpy(dst, w, static_cast<size_t>(n * k));
}

}  // namespace octet

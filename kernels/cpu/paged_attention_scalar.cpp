// Portable scalar kernel of paged attention (contract in paged_attention_kernel.h): each cached
// row is decoded to FP32 (FP8 through a 256-entry table of exact values), then plain loops.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/paged_attention_kernel.h"

namespace octet::paged_detail {

namespace {

struct Fp8Tables {
  std::array<float, 256> e4m3, e5m2;
  Fp8Tables() {
    for (int c = 0; c < 256; ++c) {
      e4m3[c] = fp8_e4m3_to_float(static_cast<uint8_t>(c));
      e5m2[c] = fp8_e5m2_to_float(static_cast<uint8_t>(c));
    }
  }
};
const Fp8Tables& fp8_tables() {
  static const Fp8Tables t;
  return t;
}

// Cached values of one row, exact: FP8 codes without their scale.
void decode_row(DType dtype, const uint8_t* p, int64_t n, float* out) {
  uint16_t h;
  switch (dtype) {
    case DType::F32: std::memcpy(out, p, 4 * n); break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = (std::memcpy(&h, p + 2 * i, 2), bf16_to_float(h));
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = (std::memcpy(&h, p + 2 * i, 2), fp16_to_float(h));
      break;
    case DType::FP8_E4M3:
      for (int64_t i = 0; i < n; ++i) out[i] = fp8_tables().e4m3[p[i]];
      break;
    case DType::FP8_E5M2:
      for (int64_t i = 0; i < n; ++i) out[i] = fp8_tables().e5m2[p[i]];
      break;
  }
}

void partial_scalar(const PartialArgs& a, float* scratch, float* m, float* l, float* acc) {
  const int64_t hd = a.head_dim, hdp = padded_head_dim(hd), G = a.num_q_heads;
  const int64_t n = a.end - a.begin;
  float* scores = scratch;  // [G, kPartitionTokens]
  float* row = scratch + G * (kPartitionTokens + 256);
  auto slot_offset = [&](int64_t pos) {
    return (a.block_table[pos / a.block_size] * a.block_size + pos % a.block_size) *
           a.slot_stride;
  };
  for (int64_t t = 0; t < n; ++t) {
    decode_row(a.dtype, a.k + slot_offset(a.begin + t), hd, row);
    for (int64_t g = 0; g < G; ++g) {
      const float* qg = a.q + g * hdp;
      float s = 0.0f;
      for (int64_t d = 0; d < hd; ++d) s += qg[d] * row[d];
      scores[g * kPartitionTokens + t] = s;
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    float* sg = scores + g * kPartitionTokens;
    const float mx = *std::max_element(sg, sg + n);
    float sum = 0.0f;
    for (int64_t t = 0; t < n; ++t) sum += (sg[t] = std::exp(sg[t] - mx));
    m[g] = mx;
    l[g] = sum;
  }
  std::fill(acc, acc + G * hdp, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    decode_row(a.dtype, a.v + slot_offset(a.begin + t), hd, row);
    for (int64_t g = 0; g < G; ++g) {
      const float p = scores[g * kPartitionTokens + t];
      float* ag = acc + g * hdp;
      for (int64_t d = 0; d < hd; ++d) ag[d] += p * row[d];
    }
  }
}

}  // namespace

const uint8_t* natural_lane_order(DType) {
  static const std::array<uint8_t, kGroupLanes> order = [] {
    std::array<uint8_t, kGroupLanes> o{};
    for (int j = 0; j < kGroupLanes; ++j) o[j] = static_cast<uint8_t>(j);
    return o;
  }();
  return order.data();
}

Kernel scalar_kernel() { return {partial_scalar, natural_lane_order, INT64_MAX, "scalar"}; }

}  // namespace octet::paged_detail

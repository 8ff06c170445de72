// Sampling one token from a row of logits on the backend (Backend::sample_rows): the math of
// engine/sampler.h's step 4 for a row with no logits processors, no logprobs and no grammar,
// written once as __host__ __device__ scalar code so the CPU reference
// (kernels/cpu/sample_rows.h)
// and the CUDA kernel (kernels/cuda/sampling.cu) compute the same bits as the host sampler:
//   w_i = exp((l_i - max) * inv_temperature) for tokens with l_i >= the top_k-th largest logit
//         and w_i >= min_p, else 0 (exp_nonpositive: FP32, no FMA, engine/sampler.cpp's
//         polynomial);
//   top_p < 1: the nucleus (engine/sampler.cpp keep_nucleus): per binary exponent of w an
//         FP64 mass (exact, so its order is free), the bucket where the mass from the top
//         crosses top_p * total, walked in (w descending, id ascending) order in FP64;
//   the draw: inverse CDF at u * total over blocks of kSampleBlock tokens in id order, each
//         block's FP32 sum taken in kSampleLanes interleaved lanes and the blocks added in FP64.
// Plain C++ with no CUDA include: under nvcc OCTET_HD is __host__ __device__.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/common/rounded_math.h"


namespace octet {

/// What Backend::sample_rows does with one row. 40 bytes, the same on host and device.
struct SampleRowParams {
  enum Mode : int32_t {
    kSkip = 0,    // not sampled here: id -3 (the host samples the row from its logits)
    kGreedy = 1,  // the first index of the row's largest value
    kSample = 2,  // a draw from the filtered distribution
  };
  double u = 0.0;                // uniform in [0, 1) (sampler.h uniform_from), kSample only
  float inv_temperature = 1.0f;  // 1.0f / temperature, divided in FP32 by the host
  float min_p = 0.0f;            // 0: off
  float top_p = 1.0f;            // 1: off
  int32_t top_k = 0;             // 0 or >= the row's width: off
  int32_t mode = kSkip;
  int32_t edit_begin = 0;        // the row's logits processing: edits [begin, begin + count)
  int32_t edit_count = 0;
};
static_assert(sizeof(SampleRowParams) == 40, "SampleRowParams is uploaded as is");

/// The logits processing of one token of a row (engine/sampler.h steps 2-3: logit_bias,
/// min_tokens, repetition, frequency and presence penalties), applied by apply_edit() before the
/// row is sampled. Each token of a row has at most one edit. 32 bytes.
struct LogitEdit {
  enum Flags : uint32_t { kBias = 1, kMask = 2, kRepeat = 4, kCount = 8 };
  int32_t token = 0;
  uint32_t flags = 0;
  float bias = 0.0f;        // kBias: added
  float repetition = 1.0f;  // kRepeat: l > 0 ? l / r : l * r
  float frequency = 0.0f;   // kCount: frequency_penalty * count (FP32), subtracted
  float presence = 0.0f;    // kCount: then presence_penalty, subtracted
  float raw = 0.0f;         // the device's scratch: the logit before the edit
  int32_t pad = 0;
};
static_assert(sizeof(LogitEdit) == 32, "LogitEdit is uploaded as is");

/// The most LogitEdits one step uploads (the buffer each activations set holds: 4 MiB); rows
/// past it are sampled on the host.
inline constexpr int64_t kMaxSampleEdits = 131072;

/// ids[r] values besides a token: a non-finite value in the row, a skipped row.
inline constexpr int32_t kSampleNonFinite = -1;
inline constexpr int32_t kSampleSkipped = -3;

/// Tokens per block of the draw's sums, and the FP32 lanes inside a block.
inline constexpr int64_t kSampleBlock = 256;
inline constexpr int kSampleLanes = 8;

namespace sampling_math {

using namespace rounded;  // each FP32 operation rounded once, float bit casts

// Cody-Waite ln 2 split and Cephes' expf polynomial (engine/sampler.cpp's vector exp uses these).
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = 2.12194440e-4f;  // ln 2 = kLn2Hi - kLn2Lo
inline constexpr float kExpP0 = 1.9875691500e-4f;
inline constexpr float kExpP1 = 1.3981999507e-3f;
inline constexpr float kExpP2 = 8.3334519073e-3f;
inline constexpr float kExpP3 = 4.1665795894e-2f;
inline constexpr float kExpP4 = 1.6666665459e-1f;
inline constexpr float kExpP5 = 5.0000001201e-1f;

/// exp(x) for x <= 0 or -inf, FP32, each operation rounded once: x = n ln2 + r, the
/// polynomial in r, times 2^n. 0 below -87 and for -inf. Bit for bit engine/sampler.cpp's
/// exp_nonpositive (test_device_sampling checks it over a sweep of inputs).
OCTET_HD inline float exp_nonpositive(float x) {
  if (!(x >= -87.0f)) return 0.0f;
  const int32_t ni = static_cast<int32_t>(sub_rn(mul_rn(x, kLog2e), 0.5f));  // truncation: ceil
  const float n = static_cast<float>(ni);
  const float r = add_rn(sub_rn(x, mul_rn(n, kLn2Hi)), mul_rn(n, kLn2Lo));
  float p = add_rn(mul_rn(r, kExpP0), kExpP1);
  p = add_rn(mul_rn(p, r), kExpP2);
  p = add_rn(mul_rn(p, r), kExpP3);
  p = add_rn(mul_rn(p, r), kExpP4);
  p = add_rn(mul_rn(p, r), kExpP5);
  p = add_rn(add_rn(mul_rn(mul_rn(p, r), r), r), 1.0f);
  return mul_rn(p, bits_float(static_cast<uint32_t>(ni + 127) << 23));
}

/// Logit l after edit e, in engine/sampler.cpp apply_processors' order: bias, mask,
/// repetition, frequency, presence, each rounded once.
OCTET_HD inline float apply_edit(float l, const LogitEdit& e) {
  if (e.flags & LogitEdit::kBias) l = add_rn(l, e.bias);
  if (e.flags & LogitEdit::kMask) l = bits_float(0xFF800000u);  // -inf
  if (e.flags & LogitEdit::kRepeat)
    l = l > 0.0f ? div_rn(l, e.repetition) : mul_rn(l, e.repetition);
  if (e.flags & LogitEdit::kCount) l = sub_rn(sub_rn(l, e.frequency), e.presence);
  return l;
}

/// The weight of logit x in a row with largest value mx: 0 when x is below the top_k threshold
/// or its weight below min_p.
OCTET_HD inline float survivor_weight(float x, float mx, float inv_temperature,
                                               float threshold, float min_p) {
  const float e = exp_nonpositive(mul_rn(sub_rn(x, mx), inv_temperature));
  return x >= threshold && e >= min_p ? e : 0.0f;
}

/// A float's bits as an unsigned key that orders like the value (-0 just below +0).
OCTET_HD inline uint32_t order_key(float x) {
  const uint32_t u = float_bits(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
OCTET_HD inline float from_order_key(uint32_t k) {
  return bits_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

/// The top_p walk's order as one ascending key: weight w (>= 0) descending, then id ascending.
OCTET_HD inline uint64_t nucleus_key(float w, int64_t id) {
  return (static_cast<uint64_t>(~float_bits(w)) << 32) | static_cast<uint32_t>(id);
}

/// Where the top_p walk starts, from mass[256]: the FP64 sums of the weights by binary exponent
/// (bits >> 23; exact, so in any order). target = top_p * total; crossing: the exponent
/// where the mass from the top first reaches target (0 when none does); before: the mass above
/// it.
struct NucleusCrossing {
  double before;
  double target;
  int crossing;
};
OCTET_HD inline NucleusCrossing nucleus_crossing(const double* mass, float top_p) {
  double total = 0.0;
  for (int e = 255; e >= 0; --e) total += mass[e];
  NucleusCrossing c{0.0, static_cast<double>(top_p) * total, 0};
  for (int e = 255; e > 0; --e) {
    if (c.before + mass[e] >= c.target) {
      c.crossing = e;
      break;
    }
    c.before += mass[e];
  }
  return c;
}

/// FP32 sum of one draw block w: [n] (n <= kSampleBlock): kSampleLanes interleaved lanes over
/// the whole groups, the tail, then the lanes in order.
OCTET_HD inline float block_sum(const float* w, int64_t n) {
  float lane[kSampleLanes] = {};
  int64_t i = 0;
  for (; i + kSampleLanes <= n; i += kSampleLanes)
    for (int j = 0; j < kSampleLanes; ++j) lane[j] = add_rn(lane[j], w[i + j]);
  float s = 0.0f;
  for (; i < n; ++i) s = add_rn(s, w[i]);
  for (int j = 0; j < kSampleLanes; ++j) s = add_rn(s, lane[j]);
  return s;
}

/// Whether token i with weight w stays in the nucleus that ends at (last_w, last_id).
OCTET_HD inline bool in_nucleus(float w, int64_t i, float last_w, int64_t last_id) {
  return w > last_w || (w == last_w && i <= last_id);
}

/// The draw on the host: the first token of w: [n] (weights >= 0) whose cumulative weight
/// exceeds u * total, blocks of kSampleBlock summed by block_sum and added in FP64; if rounding
/// leaves the walk short, the last token with weight > 0; -1 when every weight is 0.
inline int32_t inverse_cdf(const float* w, int64_t n, double u) {
  thread_local std::vector<double> blocks;
  blocks.clear();
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kSampleBlock) {
    blocks.push_back(block_sum(w + b, std::min(kSampleBlock, n - b)));
    total += blocks.back();
  }
  const double target = u * total;
  double acc = 0.0;
  int32_t last = -1;
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const int64_t b = static_cast<int64_t>(bi) * kSampleBlock;
    const int64_t end = std::min(n, b + kSampleBlock);
    if (acc + blocks[bi] <= target) {
      acc += blocks[bi];
      if (blocks[bi] > 0.0)
        for (int64_t i = end - 1; i >= b; --i)
          if (w[i] > 0.0f) {
            last = static_cast<int32_t>(i);
            break;
          }
      continue;
    }
    for (int64_t i = b; i < end; ++i) {
      if (w[i] <= 0.0f) continue;
      acc += w[i];
      last = static_cast<int32_t>(i);
      if (target < acc) return last;
    }
  }
  return last;
}

}  // namespace sampling_math

}  // namespace octet

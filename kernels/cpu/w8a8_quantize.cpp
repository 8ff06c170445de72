// E4M3 quantization of weights (compressed-tensors' rule) and activations (vLLM's dynamic
// per-token and static per-tensor rules). The rules and their sources are in w8a8.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "kernels/common/check.h"
#include "kernels/cpu/fp8.h"
#include "kernels/common/half.h"
#include "kernels/cpu/w8a8.h"
#include "kernels/cpu/thread_team.h"

namespace octet {

namespace {

[[noreturn]] void fail(const char* what) {
  ::octet::detail::check_failed(__FILE__, __LINE__, "w8a8",
                                ::octet::detail::check_message("octet: w8a8: ", what));
}

// Rounds an FP32 value to the arithmetic dtype (RNE) and widens it back, as torch stores the
// result of every 16-bit op.
inline float round_to(DType arithmetic, float x) {
  switch (arithmetic) {
    case DType::BF16: return bf16_to_float(float_to_bf16(x));
    case DType::F16: return fp16_to_float(float_to_fp16(x));
    default: break;  // F32 (the FP8 dtypes are no weight arithmetic)
  }
  return x;
}

// max(|min(x, 0)|, max(x, 0)) over x[0, n), NaN propagating (torch.amin/amax do).
float absmax_nan_propagating(const float* x, int64_t n) {
  float amax = 0.0f;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    nan |= std::isnan(a);
    amax = a > amax ? a : amax;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : amax;
}

// compressed-tensors: s = amax / 448 in the weight's dtype, an exact 0 replaced by the dtype's
// eps. NaN stays NaN.
float weight_scale_from_amax(float amax, DType arithmetic) {
  const float s = round_to(arithmetic, amax / 448.0f);
  return s == 0.0f ? zero_weight_scale(arithmetic) : s;
}

// q[0, k) = fp8(clamp(round_to(w / s) + 0)). The saturating encoder equals clamp-then-cast (values in
// (448, 464) round to 448 either way) and keeps NaN as NaN, as torch.clamp does.
void quantize_row(const float* w, int64_t k, float s, DType arithmetic, uint8_t* q,
                  std::vector<float>& tmp) {
  tmp.resize(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) tmp[i] = w[i] / s;
  if (arithmetic != DType::F32) {
    for (int64_t i = 0; i < k; ++i) tmp[i] = round_to(arithmetic, tmp[i]);
  }
  // + zero_point (0): -0 becomes +0 (code 0x00), as in compressed-tensors' _quantize.
  for (int64_t i = 0; i < k; ++i) tmp[i] = tmp[i] + 0.0f;
  fp8_encode(DType::FP8_E4M3, tmp.data(), q, static_cast<size_t>(k));
}

}  // namespace

void quantize_weight_e4m3_as(const float* w, int64_t n, int64_t k, ScaleGranularity granularity,
                             DType arithmetic, uint8_t* q, float* scale) {
  if (n < 0 || k < 0) fail("quantize_weight_e4m3: negative shape");
  if (granularity == ScaleGranularity::PerTensor) {
    // Whole-tensor amax: per-row partial maxima, NaN propagating, then one scale.
    std::vector<float> row_amax(static_cast<size_t>(n));
    cpu::parallel_for_each(0, n, [&](int64_t r) {
      row_amax[r] = absmax_nan_propagating(w + r * k, k);
    }, n * k > 65536);
    scale[0] = weight_scale_from_amax(absmax_nan_propagating(row_amax.data(), n), arithmetic);
  }
  cpu::parallel_for(0, n, [&](int64_t r_lo, int64_t r_hi) {
    std::vector<float> tmp;
    for (int64_t r = r_lo; r < r_hi; ++r) {
      float s;
      if (granularity == ScaleGranularity::PerRow) {
        s = weight_scale_from_amax(absmax_nan_propagating(w + r * k, k), arithmetic);
        scale[r] = s;
      } else {
        s = scale[0];
      }
      quantize_row(w + r * k, k, s, arithmetic, q + r * k, tmp);
    }
  }, n * k > 65536);
}

void quantize_weight_e4m3(const float* w, int64_t n, int64_t k, ScaleGranularity granularity,
                          uint8_t* q, float* scale) {
  quantize_weight_e4m3_as(w, n, k, granularity, DType::F32, q, scale);
}

void quantize_per_token_e4m3_scalar(const float* x, int64_t m, int64_t k,
                                    const float* given_amax, uint8_t* q, float* scale) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    float amax = 0.0f;  // fmaxf: a NaN element is ignored
    if (given_amax) {
      amax = given_amax[r];
    } else {
      for (int64_t i = 0; i < k; ++i) amax = std::fmax(amax, std::fabs(xr[i]));
    }
    const float s = std::fmax(amax / 448.0f, kActivationScaleMin);
    scale[r] = s;
    for (int64_t i = 0; i < k; ++i) q[r * k + i] = fp8_e4m3_from_float(xr[i] / s);
  }
}

void quantize_per_token_e4m3(const float* x, int64_t m, int64_t k, const float* amax,
                             uint8_t* q, float* scale) {
  if (m < 0 || k < 0) fail("quantize_per_token_e4m3: negative shape");
  const bool avx2 = fp8_avx2_available();
  // Rows are independent; split them across threads when there is enough work.
  const int64_t rows_per_chunk = std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1));
  const int64_t chunks = (m + rows_per_chunk - 1) / rows_per_chunk;
  cpu::parallel_for_each(0, chunks, [&](int64_t c) {
    const int64_t r0 = c * rows_per_chunk, rows = std::min(rows_per_chunk, m - r0);
    if (avx2) {
      quantize_per_token_e4m3_avx2(x + r0 * k, rows, k, amax ? amax + r0 : nullptr, q + r0 * k,
                                   scale + r0);
    } else {
      quantize_per_token_e4m3_scalar(x + r0 * k, rows, k, amax ? amax + r0 : nullptr,
                                     q + r0 * k, scale + r0);
    }
  }, chunks > 1);
}

void quantize_static_e4m3(const float* x, int64_t m, int64_t k, float scale, uint8_t* q) {
  if (!(scale > 0.0f) || !std::isfinite(scale)) fail("quantize_static_e4m3: scale must be > 0, finite");
  const float inv = 1.0f / scale;  // vLLM static_scaled_fp8_quant multiplies by 1/s
  const int64_t total = m * k;
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (total + kChunk - 1) / kChunk;
  cpu::parallel_for_each(0, chunks, [&](int64_t c) {
    float tmp[kChunk];
    const int64_t i0 = c * kChunk, len = std::min(kChunk, total - i0);
    for (int64_t i = 0; i < len; ++i) tmp[i] = x[i0 + i] * inv;
    fp8_encode(DType::FP8_E4M3, tmp, q + i0, static_cast<size_t>(len));
  }, chunks > 4);
}

}  // namespace octet

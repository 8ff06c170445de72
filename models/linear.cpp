#include "models/linear.h"

#include <stdexcept>

#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/ops.h"

namespace octet {

int64_t LinearWeight::weight_bytes() const {
  switch (format) {
    case DType::F32: return static_cast<int64_t>(w_f32.size() * 4);
    case DType::BF16: return static_cast<int64_t>(w_bf16.size() * 2);
    case DType::FP8_E4M3: return static_cast<int64_t>(w_fp8.size() + w_scale.size() * 4);
    default: break;
  }
  return 0;
}

void linear_forward(const LinearWeight& w, const float* x, int64_t m, float* y,
                    LinearScratch& scratch) {
  const int64_t n = w.out_features, k = w.in_features;
  const float* bias = w.bias.empty() ? nullptr : w.bias.data();
  switch (w.format) {
    case DType::F32:
      cpu::linear(x, w.w_f32.data(), bias, y, m, n, k);
      return;
    case DType::BF16:
      linear_bf16(x, w.w_bf16.data(), y, m, n, k);
      if (bias)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) y[i * n + j] += bias[j];
      return;
    case DType::FP8_E4M3: {
      if (static_cast<int64_t>(scratch.qa.size()) < m * k) scratch.qa.resize(m * k);
      if (static_cast<int64_t>(scratch.a_scale.size()) < m) scratch.a_scale.resize(m);
      ScaleGranularity a_gran = ScaleGranularity::PerRow;
      if (w.static_input) {
        quantize_static_e4m3(x, m, k, w.input_scale, scratch.qa.data());
        scratch.a_scale[0] = w.input_scale;
        a_gran = ScaleGranularity::PerTensor;
      } else {
        quantize_per_token_e4m3(x, m, k, scratch.qa.data(), scratch.a_scale.data());
      }
      const Fp8WeightView view{w.w_fp8.data(), w.w_scale.data(), w.w_granularity, n, k};
      linear_w8a8(scratch.qa.data(), scratch.a_scale.data(), a_gran, view, bias, y, m);
      return;
    }    default: break;
  }
}

void quantize_linear_fp8(LinearWeight& w, ScaleGranularity granularity,
                         DType arithmetic) {
  if (w.format == DType::FP8_E4M3) return;
  if (w.format != DType::F32)
    throw std::logic_error("quantize_linear_fp8: " + w.name + " is not an FP32 weight");
  const int64_t n = w.out_features, k = w.in_features;
  w.w_fp8.resize(n * k);
  w.w_scale.resize(granularity == ScaleGranularity::PerRow ? n : 1);
  quantize_weight_e4m3_as(w.w_f32.data(), n, k, granularity, arithmetic, w.w_fp8.data(),
                         w.w_scale.data());
  w.w_granularity = granularity;
  w.format = DType::FP8_E4M3;
  w.static_input = false;
  w.w_f32.clear();
  w.w_f32.shrink_to_fit();
}

}  // namespace octet

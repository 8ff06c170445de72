#include "models/linear.h"

#include <stdexcept>

#include "kernels/common/check.h"
#include "kernels/common/weight_quant.h"

namespace octet {

namespace {

template <class T>
Buffer upload_vector(Backend& backend, const std::vector<T>& v) {
  const int64_t bytes = static_cast<int64_t>(v.size() * sizeof(T));
  Buffer b = backend.allocate(bytes);
  backend.upload(b, 0, v.data(), bytes);
  return b;
}

// A LinearWeight with h's description and no buffers yet.
LinearWeight linear_header(const HostLinearWeight& h) {
  LinearWeight w;
  w.name = h.name;
  w.format = h.format;
  w.out_features = h.out_features;
  w.in_features = h.in_features;
  w.w_granularity = h.w_granularity;
  w.static_input = h.static_input;
  w.input_scale = h.input_scale;
  w.k_groups = h.k_groups;
  return w;
}

}  // namespace

WeightRef LinearWeight::ref() const {
  WeightRef r;
  r.data = weight.data();
  r.dtype = format;
  r.n = out_features;
  r.k = in_features;
  r.scale = scale.as<const float>();
  r.granularity = w_granularity;
  r.bias = bias.as<const float>();
  r.k_groups = k_groups;
  r.layout = layout;
  r.bf16_layout = bf16_layout;
  return r;
}

std::vector<LinearWeight> upload_linears_merged(Backend& backend,
                                                const std::vector<HostLinearWeight>& ws) {
  bool merge = backend.merges_projections() && ws.size() >= 2 &&
               backend.fp8_weight_layout() == Fp8Layout::RowMajor;
  for (const HostLinearWeight& h : ws)
    merge = merge && h.format == DType::FP8_E4M3 && !h.static_input && h.k_groups == 1 &&
            h.w_granularity == ScaleGranularity::PerRow && h.out_features > 0 &&
            h.in_features == ws[0].in_features && h.bias.empty() == ws[0].bias.empty() &&
            static_cast<int64_t>(h.w_fp8.size()) == h.out_features * h.in_features &&
            static_cast<int64_t>(h.w_scale.size()) == h.out_features &&
            (h.bias.empty() || static_cast<int64_t>(h.bias.size()) == h.out_features);
  std::vector<LinearWeight> out;
  if (!merge) {
    for (const HostLinearWeight& h : ws) out.push_back(upload_linear(backend, h));
    return out;
  }
  std::vector<uint8_t> codes;
  std::vector<float> scales, biases;
  for (const HostLinearWeight& h : ws) {
    codes.insert(codes.end(), h.w_fp8.begin(), h.w_fp8.end());
    scales.insert(scales.end(), h.w_scale.begin(), h.w_scale.end());
    biases.insert(biases.end(), h.bias.begin(), h.bias.end());
  }
  const int64_t k = ws[0].in_features, n_all = static_cast<int64_t>(scales.size());
  Fp8Layout layout = Fp8Layout::RowMajor;
  const Buffer weight = backend.upload_fp8_weight(codes.data(), n_all, k, 1, &layout);
  OCTET_CHECK(layout == Fp8Layout::RowMajor, "upload_linears_merged: layout changed");
  const Buffer scale = upload_vector(backend, scales), bias = upload_vector(backend, biases);
  int64_t row = 0;
  for (const HostLinearWeight& h : ws) {
    LinearWeight w = linear_header(h);
    w.layout = layout;
    w.weight = weight.slice(row * k, h.out_features * k);
    w.scale = scale.slice(row * 4, h.out_features * 4);
    if (!h.bias.empty()) w.bias = bias.slice(row * 4, h.out_features * 4);
    row += h.out_features;
    out.push_back(std::move(w));
  }
  return out;
}

Buffer upload_f32(Backend& backend, const std::vector<float>& v) {
  return upload_vector(backend, v);
}

LinearWeight upload_linear(Backend& backend, const HostLinearWeight& h) {
  LinearWeight w = linear_header(h);
  w.bias = upload_vector(backend, h.bias);
  switch (h.format) {
    case DType::F32: w.weight = upload_vector(backend, h.w_f32); break;
    case DType::BF16:
      OCTET_CHECK(static_cast<int64_t>(h.w_bf16.size()) == h.out_features * h.in_features,
                  h.name, ": ", h.w_bf16.size(), " BF16 values for ", h.out_features, " x ",
                  h.in_features);
      w.weight = backend.upload_bf16_weight(h.w_bf16.data(), h.out_features, h.in_features,
                                            &w.bf16_layout);
      break;
    case DType::FP8_E4M3:
      OCTET_CHECK(static_cast<int64_t>(h.w_fp8.size()) == h.out_features * h.in_features,
                  h.name, ": ", h.w_fp8.size(), " FP8 codes for ", h.out_features, " x ",
                  h.in_features);
      w.weight = backend.upload_fp8_weight(h.w_fp8.data(), h.out_features, h.in_features,
                                           h.k_groups, &w.layout);
      w.scale = upload_vector(backend, h.w_scale);
      if (h.static_input)
        w.input_scale_buffer = upload_vector(backend, std::vector<float>{h.input_scale});
      break;
    default: OCTET_CHECK(false, h.name, ": weight format ", dtype_name(h.format));
  }
  return w;
}

bool fp8_dynamic_inputs(std::initializer_list<const LinearWeight*> ws) {
  for (const LinearWeight* w : ws)
    if (w->format != DType::FP8_E4M3 || w->static_input ||
        w->in_features != (*ws.begin())->in_features)
      return false;
  return ws.size() > 0;
}

void linear_forward(Backend& backend, const LinearWeight& w, const float* x, int64_t m,
                    float* y, uint8_t* qa, float* a_scale, bool x_quantized) {
  OCTET_CHECK(!x_quantized || fp8_dynamic_inputs({&w}), w.name,
              ": x_quantized for a weight without dynamic FP8 inputs");
  if (w.format != DType::FP8_E4M3) {
    backend.linear(x, m, w.ref(), y);
    return;
  }
  const int64_t k = w.in_features;
  if (w.static_input) {
    backend.quantize_fp8_static(x, m, k, w.input_scale, qa);
    backend.linear_w8a8(qa, w.input_scale_buffer.as<const float>(), ScaleGranularity::PerTensor,
                        m, w.ref(), y);
  } else {
    if (!x_quantized) backend.quantize_fp8_dynamic(x, m, k, nullptr, qa, a_scale);
    backend.linear_w8a8(qa, a_scale, ScaleGranularity::PerRow, m, w.ref(), y);
  }
}

void linear_forward_add_norm(Backend& backend, const LinearWeight& w, const float* x, int64_t m,
                             float* y, uint8_t* qa, float* a_scale, bool x_quantized,
                             float* residual, const float* norm_weight, float* out, float eps,
                             bool quantize_out) {
  OCTET_CHECK(w.format == DType::FP8_E4M3, w.name, ": linear_forward_add_norm needs FP8");
  OCTET_CHECK(!x_quantized || fp8_dynamic_inputs({&w}), w.name,
              ": x_quantized for a weight without dynamic FP8 inputs");
  const float* scale = a_scale;
  ScaleGranularity granularity = ScaleGranularity::PerRow;
  if (w.static_input) {
    backend.quantize_fp8_static(x, m, w.in_features, w.input_scale, qa);
    scale = w.input_scale_buffer.as<const float>();
    granularity = ScaleGranularity::PerTensor;
  } else if (!x_quantized) {
    backend.quantize_fp8_dynamic(x, m, w.in_features, nullptr, qa, a_scale);
  }
  backend.linear_w8a8_add_rms_norm(qa, scale, granularity, m, w.ref(), y, residual, norm_weight,
                                   out, eps, quantize_out ? qa : nullptr,
                                   quantize_out ? a_scale : nullptr);
}

void linear_forward_multi(Backend& backend, const LinearWeight* const* ws, int count,
                          const float* x, int64_t m, float* const* ys, uint8_t* qa,
                          float* a_scale, bool x_quantized) {
  bool one_call = count > 1;
  for (int i = 0; i < count && one_call; ++i)
    one_call = fp8_dynamic_inputs({ws[i], ws[0]});
  if (!one_call) {
    for (int i = 0; i < count; ++i)
      linear_forward(backend, *ws[i], x, m, ys[i], qa, a_scale, x_quantized);
    return;
  }
  if (!x_quantized) backend.quantize_fp8_dynamic(x, m, ws[0]->in_features, nullptr, qa, a_scale);
  std::vector<WeightRef> refs;
  for (int i = 0; i < count; ++i) refs.push_back(ws[i]->ref());
  backend.linear_w8a8_multi(qa, a_scale, ScaleGranularity::PerRow, m, refs.data(), ys, count);
}

namespace {

// y: [count] FP32, this rank's partial outputs -> the sum over ranks in BF16 (vLLM's all-reduce
// on GPUs: half FP32's bytes), widened back to FP32. bf16: [count] scratch.
void all_reduce_bf16(Backend& backend, Communicator& comm, float* y, int64_t count,
                     uint16_t* bf16) {
  OCTET_CHECK(bf16 != nullptr || count == 0, "row-parallel BF16 all-reduce without scratch");
  backend.f32_to_bf16(y, count, bf16);
  comm.all_reduce_sum_bf16(bf16, count);
  backend.bf16_to_f32(bf16, count, y);
}

}  // namespace

void linear_forward_row_parallel(Backend& backend, Communicator& comm, const LinearWeight& w,
                                 const float* x, int64_t m, float* y, uint8_t* qa,
                                 float* a_scale, const RowParallelScratch& scratch,
                                 bool x_quantized) {
  if (comm.world_size() == 1) {
    linear_forward(backend, w, x, m, y, qa, a_scale, x_quantized);
    return;
  }
  OCTET_CHECK(!x_quantized || (!backend.exact_k_parts() && fp8_dynamic_inputs({&w})), w.name,
              ": x_quantized where the row's scale spans the ranks");
  if (w.format != DType::FP8_E4M3) {
    linear_forward(backend, w, x, m, y, qa, a_scale);
    if (backend.exact_k_parts()) {
      comm.all_reduce_sum(y, m * w.out_features);
    } else {
      all_reduce_bf16(backend, comm, y, m * w.out_features, scratch.bf16);
    }
    return;
  }
  const int64_t k = w.in_features, n = w.out_features;
  if (!backend.exact_k_parts()) {
    // vLLM's row-parallel layer: this rank's input columns quantized alone (its own dynamic
    // per-token scale), one GEMM, the bias on rank 0 only, then the outputs summed in BF16.
    WeightRef r = w.ref();
    if (comm.rank() != 0) r.bias = nullptr;
    if (w.static_input) {
      backend.quantize_fp8_static(x, m, k, w.input_scale, qa);
      backend.linear_w8a8(qa, w.input_scale_buffer.as<const float>(),
                          ScaleGranularity::PerTensor, m, r, y);
    } else {
      if (!x_quantized) backend.quantize_fp8_dynamic(x, m, k, nullptr, qa, a_scale);
      backend.linear_w8a8(qa, a_scale, ScaleGranularity::PerRow, m, r, y);
    }
    all_reduce_bf16(backend, comm, y, m * n, scratch.bf16);
    return;
  }
  const float* scale = a_scale;
  ScaleGranularity granularity = ScaleGranularity::PerRow;
  if (w.static_input) {
    backend.quantize_fp8_static(x, m, k, w.input_scale, qa);
    scale = w.input_scale_buffer.as<const float>();
    granularity = ScaleGranularity::PerTensor;
  } else {
    backend.row_amax(x, m, k, scratch.amax);
    comm.all_reduce_max(scratch.amax, m);
    backend.quantize_fp8_dynamic(x, m, k, scratch.amax, qa, a_scale);
  }
  backend.linear_w8a8_partials(qa, m, w.ref(), scratch.partials);
  comm.all_gather(scratch.partials, w.k_groups * m * n, scratch.gathered);
  backend.linear_w8a8_combine(scratch.gathered, comm.world_size() * w.k_groups, scale,
                              granularity, m, w.ref(), y);
}

void quantize_linear_fp8(HostLinearWeight& w, ScaleGranularity granularity, DType arithmetic) {
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

// CudaBackend (cuda_backend_impl.h): the linears. FP8 ones run one cuBLASLt GEMM over all of k
// (merged q/k/v and gate/up as one GEMM) and a fused epilogue; BF16 weights (the lm_head) run
// cuBLASLt BF16; simt_gemm takes what cuBLASLt refuses (gemm.h). Also the GEMM scratch.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/check.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"

namespace octet {

void CudaBackend::linear(const float* x, int64_t m, const WeightRef& w, float* y) {
  OCTET_CHECK(w.dtype == DType::F32 || w.dtype == DType::BF16, "linear: weight dtype ",
              dtype_name(w.dtype), " (FP8 weights take linear_w8a8)");
  if (m == 0 || w.n == 0) return;
  if (w.dtype == DType::F32 && lt_->matmul(ck::GemmInput::F32, x, w.data, m, w.n, w.k, w.k, y)) {
    ck::add_bias(y, w.bias, m, w.n, stream_);
    return;
  }
  if (w.dtype == DType::BF16 && w.bf16_layout == Bf16Layout::RowMajor && lt_bf16(x, m, w, y))
    return;
  ck::SimtGemmArgs a;
  a.act = x;
  a.w = w.data;
  a.w_type = w.dtype == DType::F32 ? ck::GemmInput::F32 : ck::GemmInput::BF16;
  a.m = m;
  a.n = w.n;
  a.k = w.k;
  a.y = y;
  a.bias = w.bias;
  ck::simt_gemm(a, stream_);
}

void CudaBackend::linear_w8a8(const uint8_t* qa, const float* a_scale,
                              ScaleGranularity a_granularity, int64_t m, const WeightRef& w,
                              float* y) {
  check_w8a8(w, "linear_w8a8");
  OCTET_CHECK(a_scale != nullptr, "linear_w8a8: null activation scale");
  if (m == 0 || w.n == 0) return;
  WeightRef whole = w;
  whole.k_groups = 1;
  const bool per_row = a_granularity == ScaleGranularity::PerRow;
  const bool w_per_row = w.granularity == ScaleGranularity::PerRow;
  const int64_t rows = chunk_rows(m, whole, "linear_w8a8");
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t mc = std::min(rows, m - r0);
    const uint8_t* qa_c = qa + r0 * w.k;
    const float* scale_c = per_row ? a_scale + r0 : a_scale;
    float* y_c = y + r0 * w.n;
    if (lt_parts(qa_c, mc, whole, y_c, mc * w.n)) {
      ck::w8a8_scale(y_c, scale_c, per_row, w.scale, w_per_row, w.bias, mc, w.n, stream_);
      continue;
    }
    ck::SimtGemmArgs a = simt_w8a8(qa_c, mc, whole, y_c);
    a.out_kind = ck::SimtOut::W8A8;
    a.bias = w.bias;
    a.a_scale = scale_c;
    a.a_per_row = per_row;
    a.w_scale = w.scale;
    a.w_per_row = w_per_row;
    ck::simt_gemm(a, stream_);
  }
}

void CudaBackend::linear_w8a8_multi(const uint8_t* qa, const float* a_scale,
                                    ScaleGranularity a_granularity, int64_t m, const WeightRef* ws,
                                    float* const* ys, int count) {
  if (m == 0 || count > ck::SplitOutputs::kMax || !lt_->has_fp8() || !fp8_adjacent(ws, count)) {
    Backend::linear_w8a8_multi(qa, a_scale, a_granularity, m, ws, ys, count);
    return;
  }
  OCTET_CHECK(a_scale != nullptr, "linear_w8a8_multi: null activation scale");
  ck::SplitOutputs out;
  out.count = count;
  for (int i = 0; i < count; ++i) {
    check_w8a8(ws[i], "linear_w8a8_multi");
    out.begin[i + 1] = out.begin[i] + ws[i].n;
  }
  const int64_t n = out.begin[count], k = ws[0].k;
  const bool per_row = a_granularity == ScaleGranularity::PerRow;
  const int64_t rows = merged_chunk_rows(m, n);
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t mc = std::min(rows, m - r0);
    float* acc = scratch(static_cast<size_t>(cuda_merged_scratch_floats(mc, n)));
    if (!lt_->matmul(ck::GemmInput::E4M3, qa + r0 * k, ws[0].data, mc, n, k, k, acc)) {
      // cuBLASLt refuses the stacked shape (the same answer for every piece): one call each.
      OCTET_CHECK(r0 == 0, "cuBLASLt refused a merged piece after the first");
      Backend::linear_w8a8_multi(qa, a_scale, a_granularity, m, ws, ys, count);
      return;
    }
    ck::SplitOutputs piece = out;
    for (int i = 0; i < count; ++i) piece.y[i] = ys[i] + r0 * ws[i].n;
    ck::w8a8_scale_split(acc, mc, n, per_row ? a_scale + r0 : a_scale, per_row, ws[0].scale,
                         ws[0].bias, piece, stream_);
  }
}

void CudaBackend::linear_w8a8_add_rms_norm(const uint8_t* qa, const float* a_scale,
                                           ScaleGranularity a_granularity, int64_t m,
                                           const WeightRef& w, float* y, float* residual,
                                           const float* norm_weight, float* out, float eps,
                                           uint8_t* q, float* scale) {
  check_w8a8(w, "linear_w8a8_add_rms_norm");
  OCTET_CHECK(a_scale != nullptr, "linear_w8a8_add_rms_norm: null activation scale");
  if (m == 0 || w.n == 0) return;
  if (!lt_->has_fp8() || !lt_->matmul(ck::GemmInput::E4M3, qa, w.data, m, w.n, w.k, w.k, y)) {
    Backend::linear_w8a8_add_rms_norm(qa, a_scale, a_granularity, m, w, y, residual, norm_weight,
                                      out, eps, q, scale);
    return;
  }
  ck::w8a8_add_rms_norm(y, a_scale, a_granularity == ScaleGranularity::PerRow, w.scale,
                        w.granularity == ScaleGranularity::PerRow, w.bias, residual, norm_weight,
                        out, m, w.n, eps, q, scale, stream_);
}

void CudaBackend::linear_w8a8_silu_quant(const uint8_t* qa, const float* a_scale,
                                         ScaleGranularity a_granularity, int64_t m,
                                         const WeightRef& gate_w, const WeightRef& up_w,
                                         float* gate, float* up, uint8_t* q, float* scale) {
  const WeightRef ws[2] = {gate_w, up_w};
  const int64_t f = gate_w.n, k = gate_w.k;
  if (m == 0 || !lt_->has_fp8() || !fp8_adjacent(ws, 2) || up_w.n != f ||
      merged_chunk_rows(m, 2 * f) < m) {
    Backend::linear_w8a8_silu_quant(qa, a_scale, a_granularity, m, gate_w, up_w, gate, up, q,
                                    scale);
    return;
  }
  OCTET_CHECK(a_scale != nullptr && q != nullptr && scale != nullptr,
              "linear_w8a8_silu_quant: null scale or output codes");
  float* acc = scratch(static_cast<size_t>(cuda_merged_scratch_floats(m, 2 * f)));
  if (!lt_->matmul(ck::GemmInput::E4M3, qa, gate_w.data, m, 2 * f, k, k, acc)) {
    Backend::linear_w8a8_silu_quant(qa, a_scale, a_granularity, m, gate_w, up_w, gate, up, q,
                                    scale);
    return;
  }
  ck::w8a8_silu_quant(acc, m, f, a_scale, a_granularity == ScaleGranularity::PerRow, gate_w.scale,
                      gate_w.bias, gate, q, scale, stream_);
}

void CudaBackend::linear_w8a8_partials(const uint8_t* qa, int64_t m, const WeightRef& w,
                                       float* acc) {
  check_w8a8(w, "linear_w8a8_partials");
  if (m == 0 || w.n == 0) return;
  // The k parts of the contract (the engine's row-parallel layers do not use them on CUDA:
  // exact_k_parts() is false): one GEMM per part, each piece's rows straight into acc's
  // packed [k_groups, m, n] (group stride m * n, row stride n).
  const int64_t rows = chunk_rows(m, w, "linear_w8a8_partials");
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t mc = std::min(rows, m - r0);
    if (lt_parts(qa + r0 * w.k, mc, w, acc + r0 * w.n, m * w.n)) continue;
    // cuBLASLt refused (the answer is the same for every piece): the CUDA-core kernel writes
    // all of [k_groups, m, n].
    ck::SimtGemmArgs a = simt_w8a8(qa, m, w, acc);
    a.out_kind = ck::SimtOut::Partials;
    ck::simt_gemm(a, stream_);
    return;
  }
}

void CudaBackend::linear_w8a8_combine(const float* acc, int64_t groups, const float* a_scale,
                                      ScaleGranularity a_granularity, int64_t m, const WeightRef& w,
                                      float* y) {
  OCTET_CHECK(groups >= 1 && a_scale != nullptr && w.scale != nullptr,
              "linear_w8a8_combine: groups ", groups, ", scales must be given");
  if (m == 0 || w.n == 0) return;
  ck::w8a8_combine(acc, groups, m * w.n, a_scale, a_granularity == ScaleGranularity::PerRow,
                   w.scale, w.granularity == ScaleGranularity::PerRow, w.bias, m, w.n, y, stream_);
}

void CudaBackend::check_w8a8(const WeightRef& w, const char* op) {
  OCTET_CHECK(w.dtype == DType::FP8_E4M3, op, ": weight dtype ", dtype_name(w.dtype));
  OCTET_CHECK(w.scale != nullptr, op, ": null weight scale");
  OCTET_CHECK(w.k_groups >= 1 && w.k % w.k_groups == 0, op, ": k ", w.k, " not split in ",
              w.k_groups, " groups");
}

ck::SimtGemmArgs CudaBackend::simt_w8a8(const uint8_t* qa, int64_t m, const WeightRef& w,
                                        float* y) const {
  ck::SimtGemmArgs a;
  a.act = qa;
  a.act_e4m3 = true;
  a.w = w.data;
  a.w_type = ck::GemmInput::E4M3;
  a.m = m;
  a.n = w.n;
  a.k = w.k;
  a.k_groups = w.k_groups;
  a.y = y;
  return a;
}

size_t CudaBackend::gemm_scratch_floats(int64_t m, const WeightRef& w) const {
  return static_cast<size_t>(cuda_gemm_scratch_floats(m, w.n, w.k, w.k_groups, lt_->has_fp8()));
}

int64_t CudaBackend::chunk_rows(int64_t m, const WeightRef& w, const char* op) const {
  if (!scratch_reserved_) return m;
  const int64_t rows = cuda_gemm_chunk_rows(static_cast<int64_t>(scratch_floats_), m, w.n, w.k,
                                            w.k_groups, lt_->has_fp8());
  OCTET_CHECK(rows >= 1, op, ": one row of a ", w.n, " x ", w.k, " linear (", w.k_groups,
              " k parts) needs ", gemm_scratch_floats(1, w),
              " floats of GEMM scratch; "
              "reserve_workspace reserved ",
              scratch_floats_);
  return rows;
}

bool CudaBackend::lt_bf16(const float* x, int64_t m, const WeightRef& w, float* y) {
  ck::GemmCall call;  // the scratch holding the BF16 activations is 256-byte aligned
  call.type = ck::GemmInput::BF16;
  call.m = m;
  call.n = w.n;
  call.k = call.ld = w.k;
  call.w = reinterpret_cast<uintptr_t>(w.data);
  call.d = reinterpret_cast<uintptr_t>(y);
  if (ck::lt_refusal(call, lt_->has_fp8()) != ck::LtRefusal::None) return false;
  const int64_t row_floats = cuda_bf16_scratch_floats(1, w.k);
  const int64_t rows =
      !scratch_reserved_ ? m
                         : std::min<int64_t>(m, static_cast<int64_t>(scratch_floats_) / row_floats);
  OCTET_CHECK(rows >= 1, "linear: one row of a BF16 ", w.n, " x ", w.k, " linear needs ",
              row_floats, " floats of GEMM scratch; reserve_workspace reserved ", scratch_floats_);
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t mc = std::min(rows, m - r0);
    auto* xb = reinterpret_cast<uint16_t*>(
        scratch(static_cast<size_t>(cuda_bf16_scratch_floats(mc, w.k))));
    ck::f32_to_bf16(x + r0 * w.k, xb, mc * w.k, stream_);
    if (!lt_->matmul(ck::GemmInput::BF16, xb, w.data, mc, w.n, w.k, w.k, y + r0 * w.n)) {
      OCTET_CHECK(r0 == 0, "cuBLASLt refused a BF16 piece after the first");
      return false;
    }
    ck::add_bias(y + r0 * w.n, w.bias, mc, w.n, stream_);
  }
  return true;
}

int64_t CudaBackend::merged_chunk_rows(int64_t m, int64_t n) const {
  if (!scratch_reserved_) return m;
  const int64_t rows = std::min<int64_t>(m, static_cast<int64_t>(scratch_floats_) / n);
  OCTET_CHECK(rows >= 1, "linear_w8a8_multi: one row of ", n, " merged outputs needs ", n,
              " floats of GEMM scratch; reserve_workspace reserved ", scratch_floats_);
  return rows;
}

bool CudaBackend::lt_parts(const uint8_t* qa, int64_t m, const WeightRef& w, float* d,
                           int64_t stride) {
  const int64_t kg = w.k / w.k_groups;
  const auto* wq = static_cast<const uint8_t*>(w.data);
  if (lt_->has_fp8()) {
    for (int64_t g = 0; g < w.k_groups; ++g) {
      const bool ok = lt_->matmul(ck::GemmInput::E4M3, qa + g * kg, wq + g * kg, m, w.n, kg, w.k,
                                  d + g * stride);
      if (!ok) {
        OCTET_CHECK(g == 0, "cuBLASLt refused group ", g, " after group 0");
        return false;
      }
    }
    return true;
  }
  if (kg % 8 != 0 || w.n % 4 != 0) return false;
  const int64_t wb_elems = (w.n * kg + 7) / 8 * 8;
  auto* wb = reinterpret_cast<uint16_t*>(scratch(gemm_scratch_floats(m, w)));
  uint16_t* ab = wb + wb_elems;
  for (int64_t g = 0; g < w.k_groups; ++g) {
    ck::e4m3_to_bf16(wq + g * kg, w.k, wb, kg, w.n, kg, stream_);
    ck::e4m3_to_bf16(qa + g * kg, w.k, ab, kg, m, kg, stream_);
    if (!lt_->matmul(ck::GemmInput::BF16, ab, wb, m, w.n, kg, kg, d + g * stride)) {
      OCTET_CHECK(g == 0, "cuBLASLt refused group ", g, " after group 0");
      return false;
    }
  }
  return true;
}

float* CudaBackend::scratch(size_t floats) {
  if (floats > scratch_floats_) {
    OCTET_CHECK(!scratch_reserved_, "GEMM scratch: ", floats, " floats needed, ", scratch_floats_,
                " reserved by reserve_workspace");
    if (capture_key_ >= 0) {
      if (scratch_) capture_scratch_.push_back(scratch_);
      scratch_ = ck::device_buffer(device_, floats * sizeof(float));
      scratch_floats_ = floats;
    } else {
      const size_t want = std::max(floats, scratch_floats_ + scratch_floats_ / 2);
      OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
      scratch_.reset();  // freed unless a graph holds it
      scratch_floats_ = 0;
      scratch_ = ck::device_buffer(device_, want * sizeof(float));
      scratch_floats_ = want;
    }
  }
  if (capture_key_ >= 0 && (capture_scratch_.empty() || capture_scratch_.back() != scratch_))
    capture_scratch_.push_back(scratch_);
  return static_cast<float*>(scratch_.get());
}

}  // namespace octet

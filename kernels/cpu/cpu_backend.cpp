#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "kernels/common/check.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/common/half.h"
#include "kernels/cpu/huge_page_allocator.h"
#include "kernels/cpu/linear_bf16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/sample_rows.h"
#include "kernels/cpu/w8a8.h"
#include "kernels/cpu/thread_team.h"

namespace octet {

namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string describe() const override {
    return std::string("cpu, W8A8 kernel ") + w8a8_kernel_name();
  }

  Buffer allocate(int64_t bytes) override {
    OCTET_CHECK(bytes >= 0, "allocate: negative size ", bytes);
    if (bytes == 0) return {};
    // Zero-filled; a large buffer's pages are faulted in when first touched (see
    // huge_page_allocator.h: a KV cache costs the pages its sequences use).
    const size_t n = static_cast<size_t>(bytes);
    void* p = huge_page_alloc(n);
    return Buffer(std::shared_ptr<void>(p, [n](void* q) { huge_page_free(q, n); }), bytes);
  }

  void upload(const Buffer& dst, int64_t offset, const void* src, int64_t bytes) override {
    OCTET_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= dst.bytes(), "upload: ", bytes,
                " bytes at ", offset, " overflow a buffer of ", dst.bytes());
    if (bytes > 0) std::memcpy(static_cast<uint8_t*>(dst.data()) + offset, src, bytes);
  }

  Fp8Layout fp8_weight_layout() const override { return w8a8_preferred_layout(); }
  Bf16Layout bf16_weight_layout() const override { return linear_bf16_preferred_layout(); }

  void download(const Buffer& src, int64_t offset, void* dst, int64_t bytes) override {
    OCTET_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= src.bytes(), "download: ",
                bytes, " bytes at ", offset, " overflow a buffer of ", src.bytes());
    if (bytes > 0) std::memcpy(dst, static_cast<const uint8_t*>(src.data()) + offset, bytes);
  }

  void synchronize() override {}

  void embedding(const TensorRef& table, const int32_t* token_ids, int64_t n,
                 float* out) override {
    const int64_t h = table.cols;
    OCTET_CHECK(table.dtype == DType::F32 || table.dtype == DType::BF16,
                "embedding: table dtype ", dtype_name(table.dtype));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = token_ids[i];
      OCTET_CHECK(t >= 0 && t < table.rows, "embedding: token id ", t, " outside [0, ",
                  table.rows, ")");
      if (table.dtype == DType::F32) {
        std::copy_n(static_cast<const float*>(table.data) + t * h, h, out + i * h);
      } else {
        const uint16_t* row = static_cast<const uint16_t*>(table.data) + t * h;
        for (int64_t j = 0; j < h; ++j) out[i * h + j] = bf16_to_float(row[j]);
      }
    }
  }

  void rms_norm(float* residual, const float* delta, const float* weight, float* out, int64_t m,
                int64_t n, float eps) override {
    if (delta)
      for (int64_t j = 0; j < m * n; ++j) residual[j] += delta[j];
    cpu::rms_norm_rows(residual, weight, out, m, n, eps);
  }

  void rope(float* q, float* k, int64_t n, int64_t num_heads, int64_t num_kv_heads,
            int64_t head_dim, int64_t rot_dim, const int64_t* positions, const float* inv_freq,
            RopeLayout layout) override {
    cpu::rope_rows(q, n, num_heads * head_dim, num_heads, head_dim, rot_dim, positions, inv_freq,
                   layout);
    if (k)
      cpu::rope_rows(k, n, num_kv_heads * head_dim, num_kv_heads, head_dim, rot_dim, positions,
                     inv_freq, layout);
  }

  void hadamard_rotate(float* x, int64_t rows, int64_t head_dim) override {
    cpu::hadamard_rows(x, rows, head_dim);
  }

  void silu_mul(const float* gate, const float* up, float* out, int64_t m, int64_t n) override {
    cpu::parallel_for_each(0, m, [&](int64_t i) {
      // per row: the vector/tail split never depends on m
      cpu::silu_mul(gate + i * n, up + i * n, out + i * n, n);
    }, m * n >= 32768);
  }

  void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t m,
                     int64_t n) override {
    cpu::parallel_for_each(0, m, [&](int64_t i) {
      ref::gelu_tanh_mul(gate + i * n, up + i * n, out + i * n, n);
    }, m * n >= 32768);
  }

  void scale(float* x, int64_t count, float s) override {
    for (int64_t i = 0; i < count; ++i) x[i] *= s;
  }

  void row_amax(const float* x, int64_t m, int64_t k, float* amax) override {
    cpu::parallel_for_each(0, m, [&](int64_t i) {
      float a = 0.0f;  // fmaxf: a NaN element is ignored, as the per-token rule
      for (int64_t j = 0; j < k; ++j) a = std::fmax(a, std::fabs(x[i * k + j]));
      amax[i] = a;
    }, m * k >= 65536);
  }

  void f32_to_bf16(const float* x, int64_t count, uint16_t* out) override {
    for (int64_t i = 0; i < count; ++i) out[i] = float_to_bf16(x[i]);
  }

  void bf16_to_f32(const uint16_t* x, int64_t count, float* out) override {
    for (int64_t i = 0; i < count; ++i) out[i] = bf16_to_float(x[i]);
  }

  void quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const float* amax, uint8_t* q,
                            float* scale) override {
    quantize_per_token_e4m3(x, m, k, amax, q, scale);  // amax null: the rows' own
  }

  void quantize_fp8_static(const float* x, int64_t m, int64_t k, float scale,
                           uint8_t* q) override {
    quantize_static_e4m3(x, m, k, scale, q);
  }

  void linear(const float* x, int64_t m, const WeightRef& w, float* y) override {
    const int64_t n = w.n, k = w.k;
    switch (w.dtype) {
      case DType::F32:
        cpu::linear(x, static_cast<const float*>(w.data), w.bias, y, m, n, k);
        return;
      case DType::BF16:
        if (w.bf16_layout == Bf16Layout::Rows8x8)
          linear_bf16_rows8x8(x, static_cast<const uint16_t*>(w.data), y, m, n, k);
        else
          linear_bf16(x, static_cast<const uint16_t*>(w.data), y, m, n, k);
        if (w.bias)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) y[i * n + j] += w.bias[j];
        return;
      default:
        OCTET_CHECK(false, "linear: weight dtype ", dtype_name(w.dtype),
                    " (FP8 weights take linear_w8a8)");
    }
  }

  static Fp8WeightView fp8_view(const WeightRef& w, const char* op) {
    OCTET_CHECK(w.dtype == DType::FP8_E4M3, op, ": weight dtype ", dtype_name(w.dtype));
    return Fp8WeightView{static_cast<const uint8_t*>(w.data), w.scale, w.granularity, w.n, w.k,
                         w.k_groups, w.layout};
  }

  void linear_w8a8(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                   int64_t m, const WeightRef& w, float* y) override {
    octet::linear_w8a8(qa, a_scale, a_granularity, fp8_view(w, "linear_w8a8"), w.bias, y, m);
  }

  void linear_w8a8_multi(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                         int64_t m, const WeightRef* ws, float* const* ys, int count) override {
    std::vector<Fp8WeightView> views;
    std::vector<const float*> biases;
    for (int i = 0; i < count; ++i) {
      views.push_back(fp8_view(ws[i], "linear_w8a8_multi"));
      biases.push_back(ws[i].bias);
    }
    octet::linear_w8a8_multi(qa, a_scale, a_granularity, views.data(), biases.data(), ys, count,
                             m);
  }

  void linear_w8a8_partials(const uint8_t* qa, int64_t m, const WeightRef& w,
                            float* acc) override {
    octet::linear_w8a8_partials(qa, fp8_view(w, "linear_w8a8_partials"), acc, m);
  }

  void linear_w8a8_combine(const float* acc, int64_t groups, const float* a_scale,
                           ScaleGranularity a_granularity, int64_t m, const WeightRef& w,
                           float* y) override {
    octet::linear_w8a8_combine(acc, groups, a_scale, a_granularity,
                               fp8_view(w, "linear_w8a8_combine"), w.bias, y, m);
  }

  void write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                      const int64_t* slot_mapping, int64_t n) override {
    octet::write_kv_cache(cache, k, v, slot_mapping, n);
  }

  void paged_attention(const KVCacheView& cache, const float* q, const PagedAttentionBatch& batch,
                       int64_t num_heads, int64_t sliding_window, float softmax_scale,
                       float* out) override {
    octet::paged_attention(cache, q, batch, num_heads, sliding_window, softmax_scale, out);
  }

  void gather_rows(const float* x, int64_t width, const int64_t* rows, int64_t num_rows,
                   float* out) override {
    for (int64_t r = 0; r < num_rows; ++r)
      std::copy_n(x + rows[r] * width, width, out + r * width);
  }

  void sample_rows(float* x, int64_t rows, int64_t width, const SampleRowParams* params,
                   LogitEdit* edits, int32_t* ids) override {
    for (int64_t r = 0; r < rows; ++r)
      ids[r] = sample_row_reference(x + r * width, width, params[r], edits);
  }

  void argmax_rows(const float* x, int64_t rows, int64_t width, int32_t* ids) override {
    // The max and a non-finite flag in one vectorisable pass (v > mx ? v : mx is MAXPS), then
    // the first index holding it.
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x + r * width;
      float mx = -std::numeric_limits<float>::infinity();
      bool bad = width == 0;
      for (int64_t j = 0; j < width; ++j) {
        const float v = row[j];
        mx = v > mx ? v : mx;
        bad |= !(std::fabs(v) <= std::numeric_limits<float>::max());
      }
      int64_t best = 0;
      while (!bad && row[best] != mx) ++best;
      ids[r] = bad ? -1 : static_cast<int32_t>(best);
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace octet

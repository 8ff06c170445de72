#pragma once
// A Backend that hands every op to another one: the base of wrappers that observe or replace
// a few ops (kv-report's K/V hooks, calibrate's Q amax) and forward the rest unchanged. Graph
// capture is not forwarded (a wrapper records nothing: supports_graphs() is false), nor are the
// fused ops (rms_norm_quant_fp8, silu_mul_quant_fp8, linear_w8a8_add_rms_norm,
// linear_w8a8_silu_quant, rope_write_kv):
// they run as their parts through the wrapper (Backend's defaults), so an override of a part
// sees every call of it.
#include <memory>
#include <string>
#include <utility>

#include "kernels/backend.h"

namespace octet {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::shared_ptr<Backend> inner) : in_(std::move(inner)) {}

  std::string name() const override { return in_->name(); }
  std::string describe() const override { return in_->describe(); }
  int64_t memory_capacity_bytes() const override { return in_->memory_capacity_bytes(); }
  DeviceMemoryInfo memory_info() const override { return in_->memory_info(); }
  WorkspaceBytes workspace_bytes(const WorkspaceShape& s) const override {
    return in_->workspace_bytes(s);
  }
  WorkspaceBytes reserve_workspace(const WorkspaceShape& s) override {
    return in_->reserve_workspace(s);
  }
  Buffer allocate(int64_t b) override { return in_->allocate(b); }
  void upload(const Buffer& d, int64_t o, const void* s, int64_t b) override {
    in_->upload(d, o, s, b);
  }
  Fp8Layout fp8_weight_layout() const override { return in_->fp8_weight_layout(); }
  Bf16Layout bf16_weight_layout() const override { return in_->bf16_weight_layout(); }
  bool exact_k_parts() const override { return in_->exact_k_parts(); }
  bool merges_projections() const override { return in_->merges_projections(); }
  void download(const Buffer& s, int64_t o, void* d, int64_t b) override {
    in_->download(s, o, d, b);
  }
  void synchronize() override { in_->synchronize(); }
  void embedding(const TensorRef& t, const int32_t* ids, int64_t n, float* out) override {
    in_->embedding(t, ids, n, out);
  }
  void rms_norm(float* r, const float* d, const float* w, float* out, int64_t m, int64_t n,
                float eps) override {
    in_->rms_norm(r, d, w, out, m, n, eps);
  }
  void rope(float* q, float* k, int64_t n, int64_t nh, int64_t nkv, int64_t hd, int64_t rd,
            const int64_t* pos, const float* f, RopeLayout l) override {
    in_->rope(q, k, n, nh, nkv, hd, rd, pos, f, l);
  }
  void silu_mul(const float* g, const float* u, float* out, int64_t m, int64_t n) override {
    in_->silu_mul(g, u, out, m, n);
  }
  void gelu_tanh_mul(const float* g, const float* u, float* out, int64_t m, int64_t n) override {
    in_->gelu_tanh_mul(g, u, out, m, n);
  }
  void scale(float* x, int64_t count, float s) override { in_->scale(x, count, s); }
  void row_amax(const float* x, int64_t m, int64_t k, float* a) override {
    in_->row_amax(x, m, k, a);
  }
  void f32_to_bf16(const float* x, int64_t count, uint16_t* out) override {
    in_->f32_to_bf16(x, count, out);
  }
  void bf16_to_f32(const uint16_t* x, int64_t count, float* out) override {
    in_->bf16_to_f32(x, count, out);
  }
  void quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const float* a, uint8_t* q,
                            float* s) override {
    in_->quantize_fp8_dynamic(x, m, k, a, q, s);
  }
  void quantize_fp8_static(const float* x, int64_t m, int64_t k, float s, uint8_t* q) override {
    in_->quantize_fp8_static(x, m, k, s, q);
  }
  void linear(const float* x, int64_t m, const WeightRef& w, float* y) override {
    in_->linear(x, m, w, y);
  }
  void linear_w8a8(const uint8_t* qa, const float* as, ScaleGranularity g, int64_t m,
                   const WeightRef& w, float* y) override {
    in_->linear_w8a8(qa, as, g, m, w, y);
  }
  void linear_w8a8_multi(const uint8_t* qa, const float* as, ScaleGranularity g, int64_t m,
                         const WeightRef* ws, float* const* ys, int count) override {
    in_->linear_w8a8_multi(qa, as, g, m, ws, ys, count);
  }
  void linear_w8a8_partials(const uint8_t* qa, int64_t m, const WeightRef& w,
                            float* acc) override {
    in_->linear_w8a8_partials(qa, m, w, acc);
  }
  void linear_w8a8_combine(const float* acc, int64_t groups, const float* as, ScaleGranularity g,
                           int64_t m, const WeightRef& w, float* y) override {
    in_->linear_w8a8_combine(acc, groups, as, g, m, w, y);
  }
  void hadamard_rotate(float* x, int64_t rows, int64_t hd) override {
    in_->hadamard_rotate(x, rows, hd);
  }
  void write_kv_cache(const KVCacheView& c, const float* k, const float* v, const int64_t* slots,
                      int64_t n) override {
    in_->write_kv_cache(c, k, v, slots, n);
  }
  void paged_attention(const KVCacheView& c, const float* q, const PagedAttentionBatch& b,
                       int64_t nh, int64_t window, float sm, float* out) override {
    in_->paged_attention(c, q, b, nh, window, sm, out);
  }
  void gather_rows(const float* x, int64_t w, const int64_t* rows, int64_t n,
                   float* out) override {
    in_->gather_rows(x, w, rows, n, out);
  }
  void argmax_rows(const float* x, int64_t rows, int64_t w, int32_t* ids) override {
    in_->argmax_rows(x, rows, w, ids);
  }
  void sample_rows(float* x, int64_t rows, int64_t w, const SampleRowParams* p, LogitEdit* e,
                   int32_t* ids) override {
    in_->sample_rows(x, rows, w, p, e, ids);
  }
  bool samples_on_device() const override { return in_->samples_on_device(); }

 protected:
  Backend& inner() { return *in_; }

 private:
  std::shared_ptr<Backend> in_;
};

}  // namespace octet

#pragma once
// LaunchCounter: a Backend that runs every op on another backend and counts the device kernels
// the CUDA backend would queue for the same calls (kernels/cuda/launch_model.h: an sm_89+ GPU,
// decode attention as a CUDA graph runs it). Fused ops are forwarded whole and count as the
// CUDA backend runs them. The CPU rehearsal of `octet bench latency --device
// cuda`'s kernels per decode step, whose CUDA figure is a captured graph's kernel nodes
// (Backend::graph_kernel_count). Not thread-safe: one stream of ops, as every backend.
#include <cstdint>
#include <memory>

#include "kernels/forwarding_backend.h"

namespace octet {

class LaunchCounter final : public ForwardingBackend {
 public:
  explicit LaunchCounter(std::shared_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}

  /// Kernels counted since construction.
  int64_t launches() const { return launches_; }

  void embedding(const TensorRef& t, const int32_t* ids, int64_t n, float* out) override;
  void rms_norm(float* r, const float* d, const float* w, float* out, int64_t m, int64_t n,
                float eps) override;
  void rope(float* q, float* k, int64_t n, int64_t nh, int64_t nkv, int64_t hd, int64_t rd,
            const int64_t* pos, const float* f, RopeLayout l) override;
  void rope_write_kv(float* q, float* k, const float* v, int64_t n, int64_t nh, int64_t nkv,
                     int64_t hd, int64_t rd, const int64_t* pos, const float* f, RopeLayout l,
                     const KVCacheView& c, const int64_t* slots) override;
  void silu_mul(const float* g, const float* u, float* out, int64_t m, int64_t n) override;
  void gelu_tanh_mul(const float* g, const float* u, float* out, int64_t m, int64_t n) override;
  void rms_norm_quant_fp8(float* r, const float* d, const float* w, float* out, int64_t m,
                          int64_t n, float eps, uint8_t* q, float* s) override;
  void silu_mul_quant_fp8(const float* g, const float* u, float* out, int64_t m, int64_t n,
                          uint8_t* q, float* s) override;
  void scale(float* x, int64_t count, float s) override;
  void row_amax(const float* x, int64_t m, int64_t k, float* a) override;
  void f32_to_bf16(const float* x, int64_t count, uint16_t* out) override;
  void bf16_to_f32(const uint16_t* x, int64_t count, float* out) override;
  void quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const float* a, uint8_t* q,
                            float* s) override;
  void quantize_fp8_static(const float* x, int64_t m, int64_t k, float s, uint8_t* q) override;
  void linear(const float* x, int64_t m, const WeightRef& w, float* y) override;
  void linear_w8a8(const uint8_t* qa, const float* as, ScaleGranularity g, int64_t m,
                   const WeightRef& w, float* y) override;
  void linear_w8a8_add_rms_norm(const uint8_t* qa, const float* as, ScaleGranularity g,
                                int64_t m, const WeightRef& w, float* y, float* r,
                                const float* nw, float* out, float eps, uint8_t* q,
                                float* s) override;
  void linear_w8a8_silu_quant(const uint8_t* qa, const float* as, ScaleGranularity g,
                              int64_t m, const WeightRef& gw, const WeightRef& uw, float* gate,
                              float* up, uint8_t* q, float* s) override;
  void linear_w8a8_multi(const uint8_t* qa, const float* as, ScaleGranularity g, int64_t m,
                         const WeightRef* ws, float* const* ys, int count) override;
  void linear_w8a8_partials(const uint8_t* qa, int64_t m, const WeightRef& w,
                            float* acc) override;
  void linear_w8a8_combine(const float* acc, int64_t groups, const float* as, ScaleGranularity g,
                           int64_t m, const WeightRef& w, float* y) override;
  void hadamard_rotate(float* x, int64_t rows, int64_t hd) override;
  void write_kv_cache(const KVCacheView& c, const float* k, const float* v, const int64_t* slots,
                      int64_t n) override;
  void paged_attention(const KVCacheView& c, const float* q, const PagedAttentionBatch& b,
                       int64_t nh, int64_t window, float sm, float* out) override;
  void gather_rows(const float* x, int64_t w, const int64_t* rows, int64_t n,
                   float* out) override;
  void argmax_rows(const float* x, int64_t rows, int64_t w, int32_t* ids) override;
  void sample_rows(float* x, int64_t rows, int64_t w, const SampleRowParams* p, LogitEdit* e,
                   int32_t* ids) override;

 private:
  int64_t launches_ = 0;
};

}  // namespace octet

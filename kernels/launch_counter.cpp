// LaunchCounter (launch_counter.h): each op adds what kernels/cuda/launch_model.h says the CUDA
// backend queues for it (nothing for calls that queue nothing: empty shapes), then runs it.
#include "kernels/launch_counter.h"

#include <vector>

#include "kernels/cuda/launch_model.h"

namespace octet {

namespace ck = octet::cuda_kernels;

namespace {

// The kernels of ws[0..count) as CUDA's one stacked GEMM + epilogue, or 0 when the CUDA backend
// would run them one by one. Its loader stores mergeable weights side by side and row-major
// whatever this backend's layout (the CPU's AVX2 tiles): mergeability is judged on that.
int64_t merged_launches(const WeightRef* ws, int count) {
  if (count > 4) return 0;
  int64_t n = 0;
  std::vector<WeightRef> row_major(ws, ws + count);
  for (WeightRef& w : row_major) {
    n += w.n;
    w.layout = Fp8Layout::RowMajor;
  }
  return fp8_mergeable(row_major.data(), count) ? ck::launches_linear_w8a8_merged(n, ws[0].k)
                                                : 0;
}

}  // namespace

void LaunchCounter::embedding(const TensorRef& t, const int32_t* ids, int64_t n, float* out) {
  launches_ += n > 0 ? 1 : 0;
  inner().embedding(t, ids, n, out);
}

void LaunchCounter::rms_norm(float* r, const float* d, const float* w, float* out, int64_t m,
                             int64_t n, float eps) {
  launches_ += m > 0 ? 1 : 0;
  inner().rms_norm(r, d, w, out, m, n, eps);
}

void LaunchCounter::rope(float* q, float* k, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                         int64_t rd, const int64_t* pos, const float* f, RopeLayout l) {
  launches_ += n > 0 ? ck::launches_rope() : 0;
  inner().rope(q, k, n, nh, nkv, hd, rd, pos, f, l);
}

void LaunchCounter::rope_write_kv(float* q, float* k, const float* v, int64_t n, int64_t nh,
                                  int64_t nkv, int64_t hd, int64_t rd, const int64_t* pos,
                                  const float* f, RopeLayout l, const KVCacheView& c,
                                  const int64_t* slots) {
  launches_ += n > 0 ? 1 : 0;  // one fused kernel
  inner().rope_write_kv(q, k, v, n, nh, nkv, hd, rd, pos, f, l, c, slots);
}

void LaunchCounter::silu_mul(const float* g, const float* u, float* out, int64_t m, int64_t n) {
  launches_ += m * n > 0 ? 1 : 0;
  inner().silu_mul(g, u, out, m, n);
}

void LaunchCounter::gelu_tanh_mul(const float* g, const float* u, float* out, int64_t m,
                                  int64_t n) {
  launches_ += m * n > 0 ? 1 : 0;
  inner().gelu_tanh_mul(g, u, out, m, n);
}

void LaunchCounter::rms_norm_quant_fp8(float* r, const float* d, const float* w, float* out,
                                       int64_t m, int64_t n, float eps, uint8_t* q, float* s) {
  launches_ += m > 0 ? 1 : 0;  // one fused kernel
  inner().rms_norm_quant_fp8(r, d, w, out, m, n, eps, q, s);
}

void LaunchCounter::silu_mul_quant_fp8(const float* g, const float* u, float* out, int64_t m,
                                       int64_t n, uint8_t* q, float* s) {
  launches_ += m > 0 ? 1 : 0;  // one fused kernel
  inner().silu_mul_quant_fp8(g, u, out, m, n, q, s);
}

void LaunchCounter::scale(float* x, int64_t count, float s) {
  launches_ += count > 0 ? 1 : 0;
  inner().scale(x, count, s);
}

void LaunchCounter::row_amax(const float* x, int64_t m, int64_t k, float* a) {
  launches_ += m > 0 ? 1 : 0;
  inner().row_amax(x, m, k, a);
}

void LaunchCounter::f32_to_bf16(const float* x, int64_t count, uint16_t* out) {
  launches_ += count > 0 ? 1 : 0;
  inner().f32_to_bf16(x, count, out);
}

void LaunchCounter::bf16_to_f32(const uint16_t* x, int64_t count, float* out) {
  launches_ += count > 0 ? 1 : 0;
  inner().bf16_to_f32(x, count, out);
}

void LaunchCounter::quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const float* a,
                                         uint8_t* q, float* s) {
  launches_ += m > 0 ? 1 : 0;
  inner().quantize_fp8_dynamic(x, m, k, a, q, s);
}

void LaunchCounter::quantize_fp8_static(const float* x, int64_t m, int64_t k, float s,
                                        uint8_t* q) {
  launches_ += m * k > 0 ? 1 : 0;
  inner().quantize_fp8_static(x, m, k, s, q);
}

void LaunchCounter::linear(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m > 0 && w.n > 0)
    launches_ += ck::launches_linear(
        w.dtype == DType::F32 ? ck::GemmInput::F32 : ck::GemmInput::BF16, w.n, w.k,
        w.bias != nullptr);
  inner().linear(x, m, w, y);
}

void LaunchCounter::linear_w8a8(const uint8_t* qa, const float* as, ScaleGranularity g,
                                int64_t m, const WeightRef& w, float* y) {
  if (m > 0 && w.n > 0) launches_ += ck::launches_linear_w8a8(w.n, w.k);
  inner().linear_w8a8(qa, as, g, m, w, y);
}

void LaunchCounter::linear_w8a8_add_rms_norm(const uint8_t* qa, const float* as,
                                             ScaleGranularity g, int64_t m, const WeightRef& w,
                                             float* y, float* r, const float* nw, float* out,
                                             float eps, uint8_t* q, float* s) {
  if (m > 0 && w.n > 0) launches_ += ck::launches_linear_w8a8_add_rms_norm();
  inner().linear_w8a8_add_rms_norm(qa, as, g, m, w, y, r, nw, out, eps, q, s);
}

void LaunchCounter::linear_w8a8_silu_quant(const uint8_t* qa, const float* as,
                                           ScaleGranularity g, int64_t m, const WeightRef& gw,
                                           const WeightRef& uw, float* gate, float* up,
                                           uint8_t* q, float* s) {
  // CUDA: one GEMM + one row kernel when the two are merged; else the two linears and
  // silu_mul_quant_fp8.
  const WeightRef ws[2] = {gw, uw};
  if (m > 0 && merged_launches(ws, 2) > 0) {
    launches_ += 2;
  } else if (m > 0) {
    launches_ += ck::launches_linear_w8a8(gw.n, gw.k) + ck::launches_linear_w8a8(uw.n, uw.k) + 1;
  }
  inner().linear_w8a8_silu_quant(qa, as, g, m, gw, uw, gate, up, q, s);
}

void LaunchCounter::linear_w8a8_multi(const uint8_t* qa, const float* as, ScaleGranularity g,
                                      int64_t m, const WeightRef* ws, float* const* ys,
                                      int count) {
  const int64_t merged = m > 0 ? merged_launches(ws, count) : 0;
  launches_ += merged;
  for (int i = 0; i < count && merged == 0; ++i)
    if (m > 0 && ws[i].n > 0) launches_ += ck::launches_linear_w8a8(ws[i].n, ws[i].k);
  inner().linear_w8a8_multi(qa, as, g, m, ws, ys, count);
}

void LaunchCounter::linear_w8a8_partials(const uint8_t* qa, int64_t m, const WeightRef& w,
                                         float* acc) {
  if (m > 0 && w.n > 0) launches_ += ck::launches_linear_w8a8_partials(w.n, w.k, w.k_groups);
  inner().linear_w8a8_partials(qa, m, w, acc);
}

void LaunchCounter::linear_w8a8_combine(const float* acc, int64_t groups, const float* as,
                                        ScaleGranularity g, int64_t m, const WeightRef& w,
                                        float* y) {
  launches_ += m * w.n > 0 ? 1 : 0;
  inner().linear_w8a8_combine(acc, groups, as, g, m, w, y);
}

void LaunchCounter::hadamard_rotate(float* x, int64_t rows, int64_t hd) {
  launches_ += rows > 0 ? 1 : 0;
  inner().hadamard_rotate(x, rows, hd);
}

void LaunchCounter::write_kv_cache(const KVCacheView& c, const float* k, const float* v,
                                   const int64_t* slots, int64_t n) {
  launches_ += n > 0 ? 1 : 0;
  inner().write_kv_cache(c, k, v, slots, n);
}

void LaunchCounter::paged_attention(const KVCacheView& c, const float* q,
                                    const PagedAttentionBatch& b, int64_t nh, int64_t window,
                                    float sm, float* out) {
  OCTET_CHECK(b.num_seqs == 0 || (b.host_query_start_loc != nullptr && b.host_seq_lens != nullptr),
              "LaunchCounter: paged_attention needs the batch's host arrays");
  launches_ += ck::launches_paged_attention(b.num_seqs, b.host_query_start_loc, b.host_seq_lens,
                                            window);
  inner().paged_attention(c, q, b, nh, window, sm, out);
}

void LaunchCounter::gather_rows(const float* x, int64_t w, const int64_t* rows, int64_t n,
                                float* out) {
  launches_ += n > 0 && w > 0 ? 1 : 0;
  inner().gather_rows(x, w, rows, n, out);
}

void LaunchCounter::argmax_rows(const float* x, int64_t rows, int64_t w, int32_t* ids) {
  launches_ += rows > 0 ? 1 : 0;
  inner().argmax_rows(x, rows, w, ids);
}

void LaunchCounter::sample_rows(float* x, int64_t rows, int64_t w, const SampleRowParams* p,
                                LogitEdit* e, int32_t* ids) {
  launches_ += rows > 0 ? 1 : 0;
  inner().sample_rows(x, rows, w, p, e, ids);
}

}  // namespace octet

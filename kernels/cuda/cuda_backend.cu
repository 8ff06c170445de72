// CudaBackend (cuda_backend.h): buffers, transfers and the dispatch of every Backend op to the
// kernels of this folder, on one stream.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <stdexcept>
#include <vector>

#include "kernels/common/check.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_scope.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/hadamard.h"

namespace octet {

namespace ck = octet::cuda_kernels;

namespace {

constexpr size_t kStagingBytes = size_t{16} << 20;  // pinned download staging, per chunk

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const cudaDeviceProp& prop) : device_(device), prop_(prop) {
    OCTET_CUDA_CHECK(cudaSetDevice(device_));
    // First: it throws on a bad OCTET_ATTENTION_BACKEND, before anything here needs freeing.
    attention_ = std::make_unique<ck::PagedAttention>();  // on device_ (its SM count)
    OCTET_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    OCTET_CUDA_CHECK(cudaMallocHost(&staging_, kStagingBytes));
    lt_ = std::make_unique<ck::LtGemm>(stream_, prop_.major, prop_.minor);
    if (!lt_->has_fp8()) {
      std::fprintf(stderr,
                   "octet: warning: %s has no FP8 tensor cores (sm_%d%d < sm_89): FP8 linear "
                   "layers run W8A16 (E4M3 weights and activations dequantized to BF16 per "
                   "call, cuBLASLt BF16 GEMM), slower than FP8 on sm_89+\n",
                   name().c_str(), prop_.major, prop_.minor);
    }
  }

  ~CudaBackend() override {
    // No aborts in a destructor: a failing call at exit is ignored.
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
    graphs_.clear();
    lt_.reset();
    attention_.reset();
    scratch_.reset();
    cudaFreeHost(staging_);
    cudaStreamDestroy(stream_);
  }

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  std::string name() const override {
    const double gib = static_cast<double>(prop_.totalGlobalMem) / double(int64_t{1} << 30);
    char gib_text[32];
    std::snprintf(gib_text, sizeof(gib_text), "%.0f", gib);
    return "cuda:" + std::to_string(device_) + " (" + std::string(prop_.name) + ", sm_" +
           std::to_string(prop_.major) + std::to_string(prop_.minor) + ", " + gib_text + " GiB)";
  }

  int64_t memory_capacity_bytes() const override {
    return static_cast<int64_t>(prop_.totalGlobalMem);
  }

  DeviceMemoryInfo memory_info() const override {
    ck::DeviceScope on(device_);
    size_t free_bytes = 0, total_bytes = 0;
    OCTET_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return {static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
  }

  WorkspaceBytes workspace_bytes(const WorkspaceShape& shape) const override {
    return cuda_workspace_bytes(shape, lt_->has_fp8(), attention_->flashinfer());
  }

  WorkspaceBytes reserve_workspace(const WorkspaceShape& shape) override {
    OCTET_CHECK(capture_key_ < 0, "reserve_workspace during graph capture ", capture_key_);
    const WorkspaceBytes b = workspace_bytes(shape);
    ck::DeviceScope on(device_);
    OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued work may use the old buffers
    scratch_.reset();  // freed unless a graph holds it
    scratch_floats_ = 0;
    scratch_reserved_ = false;
    if (b.gemm_scratch > 0) {
      scratch_ = ck::device_buffer(device_, static_cast<size_t>(b.gemm_scratch));
      scratch_floats_ = static_cast<size_t>(b.gemm_scratch) / sizeof(float);
    }
    scratch_reserved_ = true;
    attention_->reserve(ck::AttentionWorkspace{b.attention_plan,
                                               b.attention_partials / int64_t{sizeof(float)},
                                               b.attention_prefill},
                        stream_);
    return b;
  }

  std::string describe() const override {
    return name() + "; GEMM: " + lt_->describe() + "; attention: " + attention_->describe();
  }

  // --- Buffers -----------------------------------------------------------------------------
  Buffer allocate(int64_t bytes) override {
    OCTET_CHECK(bytes >= 0, "allocate: negative size ", bytes);
    OCTET_CHECK(capture_key_ < 0, "allocate during graph capture ", capture_key_);
    if (bytes == 0) return {};
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, static_cast<size_t>(bytes));
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it
      throw std::bad_alloc();
    }
    OCTET_CUDA_CHECK(err);
    OCTET_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), stream_));
    const int device = device_;
    // cudaFree waits for the work that may still use the memory (it synchronises the device).
    // The caller's current device is restored: a rank thread freeing a peer's buffer keeps
    // its own GPU.
    return Buffer(std::shared_ptr<void>(p, [device](void* q) {
                    int current = device;
                    const bool known = cudaGetDevice(&current) == cudaSuccess;
                    cudaSetDevice(device);
                    cudaFree(q);
                    if (known) cudaSetDevice(current);
                  }),
                  bytes);
  }

  void upload(const Buffer& dst, int64_t offset, const void* src, int64_t bytes) override {
    OCTET_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= dst.bytes(), "upload: ", bytes,
                " bytes at ", offset, " overflow a buffer of ", dst.bytes());
    OCTET_CHECK(capture_key_ < 0, "upload during graph capture ", capture_key_);
    if (bytes == 0) return;
    OCTET_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(dst.data()) + offset, src,
                                     static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                     stream_));
    // From pageable memory the call returns once src is staged; from pinned memory the copy is
    // asynchronous, so wait for it before the caller may reuse src.
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, src) == cudaSuccess && attr.type == cudaMemoryTypeHost) {
      OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    cudaGetLastError();  // cudaPointerGetAttributes may leave an error for pageable pointers
  }

  void download(const Buffer& src, int64_t offset, void* dst, int64_t bytes) override {
    OCTET_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= src.bytes(), "download: ",
                bytes, " bytes at ", offset, " overflow a buffer of ", src.bytes());
    OCTET_CHECK(capture_key_ < 0, "download during graph capture ", capture_key_);
    download_raw(static_cast<const uint8_t*>(src.data()) + offset, dst, bytes);
  }

  void synchronize() override {
    OCTET_CHECK(capture_key_ < 0, "synchronize during graph capture ", capture_key_);
    OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // --- Ops ----------------------------------------------------------------------------------
  void embedding(const TensorRef& table, const int32_t* token_ids, int64_t n,
                 float* out) override {
    ck::embedding(table, token_ids, n, out, stream_);
  }

  void rms_norm(float* residual, const float* delta, const float* weight, float* out, int64_t m,
                int64_t n, float eps) override {
    ck::rms_norm(residual, delta, weight, out, m, n, eps, stream_);
  }

  void rope(float* q, float* k, int64_t n, int64_t num_heads, int64_t num_kv_heads,
            int64_t head_dim, int64_t rot_dim, const int64_t* positions, const float* inv_freq,
            RopeLayout layout) override {
    ck::rope(q, num_heads, k, num_kv_heads, n, head_dim, rot_dim, positions, inv_freq, layout,
             stream_);
  }

  void rope_write_kv(float* q, float* k, const float* v, int64_t n, int64_t num_heads,
                     int64_t num_kv_heads, int64_t head_dim, int64_t rot_dim,
                     const int64_t* positions, const float* inv_freq, RopeLayout layout,
                     const KVCacheView& cache, const int64_t* slot_mapping) override {
    OCTET_CHECK(cache.k_token_scale == nullptr && cache.v_token_scale == nullptr,
                "octet: CUDA paged KV: --kv-cache-dtype fp8_per_token_head is not implemented "
                "on CUDA");
    OCTET_CHECK(cache.num_kv_heads == num_kv_heads && cache.head_dim == head_dim,
                "rope_write_kv: k has ", num_kv_heads, " x ", head_dim, ", the cache ",
                cache.num_kv_heads, " x ", cache.head_dim);
    ck::RopeWriteKv a;
    a.q = q;
    a.q_heads = num_heads;
    a.k = k;
    a.v = v;
    a.n = n;
    a.rot_dim = rot_dim;
    a.positions = positions;
    a.inv_freq = inv_freq;
    a.layout = layout;
    a.slots = slot_mapping;
    ck::rope_write_kv(a, cache, stream_);
  }

  void hadamard_rotate(float* x, int64_t rows, int64_t head_dim) override {
    ck::hadamard_rotate(x, rows, head_dim, stream_);
  }

  void rms_norm_quant_fp8(float* residual, const float* delta, const float* weight, float* out,
                          int64_t m, int64_t n, float eps, uint8_t* q, float* scale) override {
    ck::rms_norm_quant_fp8(residual, delta, weight, out, m, n, eps, q, scale, stream_);
  }

  void silu_mul_quant_fp8(const float* gate, const float* up, float* out, int64_t m, int64_t n,
                          uint8_t* q, float* scale) override {
    ck::silu_mul_quant_fp8(gate, up, out, m, n, q, scale, stream_);
  }

  void silu_mul(const float* gate, const float* up, float* out, int64_t m, int64_t n) override {
    ck::silu_mul(gate, up, out, m, n, stream_);
  }

  void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t m,
                     int64_t n) override {
    ck::gelu_tanh_mul(gate, up, out, m, n, stream_);
  }

  void scale(float* x, int64_t count, float s) override { ck::scale(x, count, s, stream_); }

  void row_amax(const float* x, int64_t m, int64_t k, float* amax) override {
    ck::row_amax(x, m, k, amax, stream_);
  }

  void f32_to_bf16(const float* x, int64_t count, uint16_t* out) override {
    ck::f32_to_bf16(x, out, count, stream_);
  }

  void bf16_to_f32(const uint16_t* x, int64_t count, float* out) override {
    ck::bf16_to_f32(x, out, count, stream_);
  }

  void quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const float* amax, uint8_t* q,
                            float* scale) override {
    ck::quantize_fp8_dynamic(x, m, k, amax, q, scale, stream_);
  }

  void quantize_fp8_static(const float* x, int64_t m, int64_t k, float scale,
                           uint8_t* q) override {
    OCTET_CHECK(scale > 0.0f && scale <= 3.4028235e38f, "quantize_fp8_static: scale ", scale,
                " must be > 0 and finite");
    ck::quantize_fp8_static(x, m, k, 1.0f / scale, q, stream_);  // vLLM: x * (1 / s)
  }

  void linear(const float* x, int64_t m, const WeightRef& w, float* y) override {
    OCTET_CHECK(w.dtype == DType::F32 || w.dtype == DType::BF16, "linear: weight dtype ",
                dtype_name(w.dtype), " (FP8 weights take linear_w8a8)");
    if (m == 0 || w.n == 0) return;
    if (w.dtype == DType::F32 &&
        lt_->matmul(ck::GemmInput::F32, x, w.data, m, w.n, w.k, w.k, y)) {
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

  // One GEMM over all of k, whatever w.k_groups (exact_k_parts() is false): its FP32 sums go
  // straight into y and the scaling epilogue runs over them in place, two kernels a linear.
  // Rows run in pieces only where the W8A16 path's BF16 copies need more scratch than reserved
  // (rows never mix: the same bits as one call, the GEMMs being batch invariant).
  bool exact_k_parts() const override { return false; }

  void linear_w8a8(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                   int64_t m, const WeightRef& w, float* y) override {
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

  // q/k/v and gate/up side by side (FP8 tensor cores only): one GEMM of the stacked rows into
  // the GEMM scratch, then one epilogue writing each weight's output.
  bool merges_projections() const override { return lt_->has_fp8(); }

  void linear_w8a8_multi(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                         int64_t m, const WeightRef* ws, float* const* ys, int count) override {
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

  // One GEMM into y, then the epilogue, residual add, RMSNorm and quantization in one row
  // kernel; where cuBLASLt refuses the shape (or W8A16), linear_w8a8 then the fused norm.
  void linear_w8a8_add_rms_norm(const uint8_t* qa, const float* a_scale,
                                ScaleGranularity a_granularity, int64_t m, const WeightRef& w,
                                float* y, float* residual, const float* norm_weight, float* out,
                                float eps, uint8_t* q, float* scale) override {
    check_w8a8(w, "linear_w8a8_add_rms_norm");
    OCTET_CHECK(a_scale != nullptr, "linear_w8a8_add_rms_norm: null activation scale");
    if (m == 0 || w.n == 0) return;
    if (!lt_->has_fp8() ||
        !lt_->matmul(ck::GemmInput::E4M3, qa, w.data, m, w.n, w.k, w.k, y)) {
      Backend::linear_w8a8_add_rms_norm(qa, a_scale, a_granularity, m, w, y, residual,
                                        norm_weight, out, eps, q, scale);
      return;
    }
    ck::w8a8_add_rms_norm(y, a_scale, a_granularity == ScaleGranularity::PerRow, w.scale,
                          w.granularity == ScaleGranularity::PerRow, w.bias, residual,
                          norm_weight, out, m, w.n, eps, q, scale, stream_);
  }

  // Merged gate/up (one piece of rows: q may overwrite qa, so every GEMM row must be read
  // before any code is written): one GEMM into the scratch, then both epilogues, SiLU-mul and
  // the quantization in one row kernel. Otherwise the composition.
  void linear_w8a8_silu_quant(const uint8_t* qa, const float* a_scale,
                              ScaleGranularity a_granularity, int64_t m, const WeightRef& gate_w,
                              const WeightRef& up_w, float* gate, float* up, uint8_t* q,
                              float* scale) override {
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
    ck::w8a8_silu_quant(acc, m, f, a_scale, a_granularity == ScaleGranularity::PerRow,
                        gate_w.scale, gate_w.bias, gate, q, scale, stream_);
  }

  void linear_w8a8_partials(const uint8_t* qa, int64_t m, const WeightRef& w,
                            float* acc) override {
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

  void linear_w8a8_combine(const float* acc, int64_t groups, const float* a_scale,
                           ScaleGranularity a_granularity, int64_t m, const WeightRef& w,
                           float* y) override {
    OCTET_CHECK(groups >= 1 && a_scale != nullptr && w.scale != nullptr,
                "linear_w8a8_combine: groups ", groups, ", scales must be given");
    if (m == 0 || w.n == 0) return;
    ck::w8a8_combine(acc, groups, m * w.n, a_scale, a_granularity == ScaleGranularity::PerRow,
                     w.scale, w.granularity == ScaleGranularity::PerRow, w.bias, m, w.n, y,
                     stream_);
  }

  void write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                      const int64_t* slot_mapping, int64_t n) override {
    OCTET_CHECK(cache.k_token_scale == nullptr && cache.v_token_scale == nullptr,
                "octet: CUDA paged KV: --kv-cache-dtype fp8_per_token_head is not implemented "
                "on CUDA");
    ck::write_kv_cache(cache, k, v, slot_mapping, n, stream_);
  }

  void paged_attention(const KVCacheView& cache, const float* q, const PagedAttentionBatch& batch,
                       int64_t num_heads, int64_t sliding_window, float softmax_scale,
                       float* out) override {
    OCTET_CHECK(batch.num_seqs >= 0, "paged_attention: num_seqs ", batch.num_seqs);
    OCTET_CHECK(cache.k_token_scale == nullptr && cache.v_token_scale == nullptr,
                "octet: CUDA paged KV: --kv-cache-dtype fp8_per_token_head is not implemented "
                "on CUDA");
    if (batch.num_seqs == 0) return;
    if (capture_key_ >= 0) {  // recorded with a plan prepare_replay writes each step
      attention_->capture(cache, q, batch, num_heads, sliding_window, softmax_scale, out,
                          stream_);
      return;
    }
    if (batch.host_query_start_loc != nullptr && batch.host_seq_lens != nullptr) {
      // The caller's host copies: no read-back, nothing waits for the device.
      attention_->run(cache, q, batch, batch.host_query_start_loc, batch.host_seq_lens,
                      num_heads, sliding_window, softmax_scale, out, stream_);
      return;
    }
    // The plan needs the query counts and lengths on the host: one small read-back.
    const size_t n = static_cast<size_t>(batch.num_seqs);
    host_batch_.resize(2 * n + 1);
    OCTET_CHECK((2 * n + 1) * sizeof(int64_t) <= kStagingBytes, "paged_attention: ", n,
                " sequences");
    auto* staged = static_cast<int64_t*>(staging_);
    OCTET_CUDA_CHECK(cudaMemcpyAsync(staged, batch.query_start_loc, (n + 1) * sizeof(int64_t),
                                     cudaMemcpyDeviceToHost, stream_));
    OCTET_CUDA_CHECK(cudaMemcpyAsync(staged + n + 1, batch.seq_lens, n * sizeof(int64_t),
                                     cudaMemcpyDeviceToHost, stream_));
    OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(host_batch_.data(), staged, (2 * n + 1) * sizeof(int64_t));
    attention_->run(cache, q, batch, host_batch_.data(), host_batch_.data() + n + 1, num_heads,
                    sliding_window, softmax_scale, out, stream_);
  }

  void argmax_rows(const float* x, int64_t rows, int64_t width, int32_t* ids) override {
    ck::argmax_rows(x, rows, width, ids, stream_);
  }

  void sample_rows(float* x, int64_t rows, int64_t width, const SampleRowParams* params,
                   LogitEdit* edits, int32_t* ids) override {
    ck::sample_rows(x, rows, width, params, edits, ids, stream_);
  }
  bool samples_on_device() const override { return true; }

  void gather_rows(const float* x, int64_t width, const int64_t* rows, int64_t num_rows,
                   float* out) override {
    ck::gather_rows(x, width, rows, num_rows, out, stream_);
  }

  // --- Graphs ---------------------------------------------------------------------------------
  bool supports_graphs() const override { return true; }

  void begin_capture(int64_t key) override {
    OCTET_CHECK(key >= 0 && capture_key_ < 0, "begin_capture: graph ", key, " while capturing ",
                capture_key_);
    // The graph replaces any of this key: wait for its last replay before freeing it.
    if (auto it = graphs_.find(key); it != graphs_.end()) {
      OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
      OCTET_CUDA_CHECK(cudaGraphExecDestroy(it->second.exec));
      graphs_.erase(it);
    }
    attention_->begin_capture();
    capture_scratch_.clear();
    // Relaxed: the capture may cudaMalloc its attention plans (and, before reserve_workspace,
    // scratch); nothing on this stream may synchronise (the ops above refuse to).
    OCTET_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    capture_key_ = key;
  }

  void end_capture() override {
    OCTET_CHECK(capture_key_ >= 0, "end_capture without begin_capture");
    const int64_t key = capture_key_;
    capture_key_ = -1;
    cudaGraph_t graph = nullptr;
    OCTET_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    Graph g;
    g.kernels = kernel_nodes(graph);
    const cudaError_t err = cudaGraphInstantiate(&g.exec, graph, 0);
    cudaGraphDestroy(graph);
    OCTET_CUDA_CHECK(err);
    g.attention = attention_->end_capture();
    g.scratch = std::move(capture_scratch_);
    capture_scratch_.clear();
    graphs_.emplace(key, std::move(g));
  }

  bool has_graph(int64_t key) const override { return graphs_.count(key) != 0; }

  int64_t graph_kernel_count(int64_t key) const override {
    const auto it = graphs_.find(key);
    return it == graphs_.end() ? -1 : it->second.kernels;
  }

  void drop_graph(int64_t key) override {
    const auto it = graphs_.find(key);
    if (it == graphs_.end()) return;
    int current = device_;
    const bool known = cudaGetDevice(&current) == cudaSuccess;
    OCTET_CUDA_CHECK(cudaSetDevice(device_));
    OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));  // its last replay has finished
    OCTET_CUDA_CHECK(cudaGraphExecDestroy(it->second.exec));
    graphs_.erase(it);
    if (known) cudaSetDevice(current);
  }

  void replay(int64_t key, const PagedAttentionBatch& batch) override {
    OCTET_CHECK(capture_key_ < 0, "replay during graph capture ", capture_key_);
    const auto it = graphs_.find(key);
    OCTET_CHECK(it != graphs_.end(), "replay: no graph ", key);
    // The plans go up first on the same stream, then the graph reads them.
    ck::PagedAttention::prepare_replay(*it->second.attention, batch, stream_);
    OCTET_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream_));
  }

 private:
  static void check_w8a8(const WeightRef& w, const char* op) {
    OCTET_CHECK(w.dtype == DType::FP8_E4M3, op, ": weight dtype ", dtype_name(w.dtype));
    OCTET_CHECK(w.scale != nullptr, op, ": null weight scale");
    OCTET_CHECK(w.k_groups >= 1 && w.k % w.k_groups == 0, op, ": k ", w.k, " not split in ",
                w.k_groups, " groups");
  }

  ck::SimtGemmArgs simt_w8a8(const uint8_t* qa, int64_t m, const WeightRef& w, float* y) const {
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

  // Scratch floats of linear_w8a8 / _partials for m rows (cuda_gemm_scratch_floats): none
  // with FP8 tensor cores; W8A16: the BF16 copies of one group's weight [n, kg] and
  // activations [m, kg], 16-byte aligned.
  size_t gemm_scratch_floats(int64_t m, const WeightRef& w) const {
    return static_cast<size_t>(cuda_gemm_scratch_floats(m, w.n, w.k, w.k_groups, lt_->has_fp8()));
  }

  // Rows of one piece of an m-row call: m before reserve_workspace, else what fits the
  // reserved scratch (an OCTET_CHECK abort when not even one row does: a linear the
  // reservation's shape did not list).
  int64_t chunk_rows(int64_t m, const WeightRef& w, const char* op) const {
    if (!scratch_reserved_) return m;
    const int64_t rows = cuda_gemm_chunk_rows(static_cast<int64_t>(scratch_floats_), m, w.n, w.k,
                                              w.k_groups, lt_->has_fp8());
    OCTET_CHECK(rows >= 1, op, ": one row of a ", w.n, " x ", w.k, " linear (", w.k_groups,
                " k parts) needs ", gemm_scratch_floats(1, w), " floats of GEMM scratch; "
                "reserve_workspace reserved ", scratch_floats_);
    return rows;
  }

  // BF16 weights (the lm_head) on cuBLASLt: the activations rounded to BF16 (RNE) in the GEMM
  // scratch, as a BF16 model's are, then a BF16 x BF16 GEMM with FP32 sums and the bias; rows
  // in pieces that fit the scratch. False when cuBLASLt refuses the shape (checked before any
  // conversion; with one queued only if no algorithm passes its probes), the same answer for
  // every m: simt_gemm then runs it in FP32.
  bool lt_bf16(const float* x, int64_t m, const WeightRef& w, float* y) {
    ck::GemmCall call;  // the scratch holding the BF16 activations is 256-byte aligned
    call.type = ck::GemmInput::BF16;
    call.m = m;
    call.n = w.n;
    call.k = call.ld = w.k;
    call.w = reinterpret_cast<uintptr_t>(w.data);
    call.d = reinterpret_cast<uintptr_t>(y);
    if (ck::lt_refusal(call, lt_->has_fp8()) != ck::LtRefusal::None) return false;
    const int64_t row_floats = cuda_bf16_scratch_floats(1, w.k);
    const int64_t rows = !scratch_reserved_
                             ? m
                             : std::min<int64_t>(m, static_cast<int64_t>(scratch_floats_) /
                                                        row_floats);
    OCTET_CHECK(rows >= 1, "linear: one row of a BF16 ", w.n, " x ", w.k, " linear needs ",
                row_floats, " floats of GEMM scratch; reserve_workspace reserved ",
                scratch_floats_);
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

  // Rows of one piece of a merged GEMM of n stacked outputs (as chunk_rows).
  int64_t merged_chunk_rows(int64_t m, int64_t n) const {
    if (!scratch_reserved_) return m;
    const int64_t rows = std::min<int64_t>(m, static_cast<int64_t>(scratch_floats_) / n);
    OCTET_CHECK(rows >= 1, "linear_w8a8_multi: one row of ", n, " merged outputs needs ", n,
                " floats of GEMM scratch; reserve_workspace reserved ", scratch_floats_);
    return rows;
  }

  // The k-group part sums on cuBLASLt into d + g * stride (row stride w.n): FP8 on sm_89+,
  // W8A16 (both operands widened exactly to BF16 in the GEMM scratch) below. False, with
  // nothing queued but conversions, when cuBLASLt cannot take the shape; the answer depends
  // only on the shape and the operands' alignment, so every piece and both ops agree.
  bool lt_parts(const uint8_t* qa, int64_t m, const WeightRef& w, float* d, int64_t stride) {
    const int64_t kg = w.k / w.k_groups;
    const auto* wq = static_cast<const uint8_t*>(w.data);
    if (lt_->has_fp8()) {
      for (int64_t g = 0; g < w.k_groups; ++g) {
        const bool ok = lt_->matmul(ck::GemmInput::E4M3, qa + g * kg, wq + g * kg, m, w.n, kg,
                                    w.k, d + g * stride);
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

  // The GEMM scratch, at least `floats` floats, 256-byte aligned: one buffer for eager calls
  // and every graph (they run one at a time on the stream), which a graph keeps alive. After
  // reserve_workspace it never grows (callers cut their work into pieces that fit); before,
  // growing waits for the queued work outside a capture, and inside one allocates a new
  // buffer while the capture keeps the old (its earlier nodes, and queued work, use it).
  float* scratch(size_t floats) {
    if (floats > scratch_floats_) {
      OCTET_CHECK(!scratch_reserved_, "GEMM scratch: ", floats, " floats needed, ",
                  scratch_floats_, " reserved by reserve_workspace");
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

  // Device -> host through the pinned staging buffer, after all queued work.
  void download_raw(const void* src, void* dst, int64_t bytes) {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    for (int64_t done = 0; done < bytes;) {
      const size_t chunk = static_cast<size_t>(std::min<int64_t>(bytes - done, kStagingBytes));
      OCTET_CUDA_CHECK(cudaMemcpyAsync(staging_, s + done, chunk, cudaMemcpyDeviceToHost, stream_));
      OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
      std::memcpy(d + done, staging_, chunk);
      done += static_cast<int64_t>(chunk);
    }
  }

  int device_;
  cudaDeviceProp prop_;
  cudaStream_t stream_ = nullptr;
  void* staging_ = nullptr;  // pinned, kStagingBytes
  std::unique_ptr<ck::LtGemm> lt_;
  std::unique_ptr<ck::PagedAttention> attention_;
  std::shared_ptr<void> scratch_;  // GEMM scratch (scratch()), eager calls and graphs
  size_t scratch_floats_ = 0;
  bool scratch_reserved_ = false;  // reserve_workspace sized it: it never grows
  std::vector<int64_t> host_batch_;
  // Graphs: each with the attention plans and the scratch buffers its kernels use (the
  // backend's, shared with eager calls; kept alive here if they are replaced).
  // The kernel nodes of a captured graph (memory copies and others not counted; a failed
  // query counts -1).
  static int64_t kernel_nodes(cudaGraph_t graph) {
    size_t count = 0;
    if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) return -1;
    std::vector<cudaGraphNode_t> nodes(count);
    if (count > 0 && cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) return -1;
    int64_t kernels = 0;
    for (size_t i = 0; i < count; ++i) {
      cudaGraphNodeType type{};
      if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess) return -1;
      kernels += type == cudaGraphNodeTypeKernel ? 1 : 0;
    }
    return kernels;
  }

  struct Graph {
    int64_t kernels = -1;  // kernel nodes (kernel_nodes)
    cudaGraphExec_t exec = nullptr;
    std::shared_ptr<ck::GraphAttention> attention;
    std::vector<std::shared_ptr<void>> scratch;
  };
  std::map<int64_t, Graph> graphs_;
  int64_t capture_key_ = -1;  // the graph being captured, or -1
  std::vector<std::shared_ptr<void>> capture_scratch_;
};

}  // namespace

void* cuda_backend_stream(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  OCTET_CHECK(cuda != nullptr, "cuda_backend_stream: ", backend.name(), " is not a CUDA backend");
  return static_cast<void*>(cuda->stream());
}

int cuda_backend_device(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  OCTET_CHECK(cuda != nullptr, "cuda_backend_device: ", backend.name(), " is not a CUDA backend");
  return cuda->device();
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

int cuda_device_capability(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return prop.major * 10 + prop.minor;
}

std::unique_ptr<Backend> make_cuda_backend(int index) {
  const std::string device = "cuda:" + std::to_string(index);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::invalid_argument("device '" + device + "': no usable CUDA GPU (" +
                                cudaGetErrorString(err) + ")");
  }
  if (count == 0) throw std::invalid_argument("device '" + device + "': no CUDA GPU found");
  if (index < 0 || index >= count)
    throw std::invalid_argument("device '" + device + "': only " + std::to_string(count) +
                                " CUDA GPU(s)");
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    throw std::invalid_argument("device '" + device + "': cannot query it");
  }
  if (prop.major < 8)
    throw std::invalid_argument("device '" + device + "' (" + prop.name + ", sm_" +
                                std::to_string(prop.major) + std::to_string(prop.minor) +
                                "): compute capability 8.0 or newer is needed");
  return std::make_unique<CudaBackend>(index, prop);
}

}  // namespace octet

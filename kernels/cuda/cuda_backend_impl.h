// CudaBackend's class (cuda_backend.h has the factory and the plain-C++ sizing): one CUDA stream
// per backend orders every op. Its members are defined in cuda_backend.cu (device, buffers,
// graphs), cuda_backend_ops.cu (element-wise, attention, sampling) and cuda_backend_linear.cu
// (GEMM dispatch and the GEMM scratch). Included only by those .cu files (CUDA types).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"

namespace octet {

namespace ck = octet::cuda_kernels;

/// The Backend on one NVIDIA GPU (cuda_backend.h); made by make_cuda_backend.
class CudaBackend final : public Backend {
 public:
  /// Pinned staging for downloads and plan read-backs, bytes per chunk.
  static constexpr size_t kStagingBytes = size_t{16} << 20;

  CudaBackend(int device, const cudaDeviceProp& prop);
  ~CudaBackend() override;
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  std::string name() const override;
  int64_t memory_capacity_bytes() const override {
    return static_cast<int64_t>(prop_.totalGlobalMem);
  }
  DeviceMemoryInfo memory_info() const override;
  WorkspaceBytes workspace_bytes(const WorkspaceShape& shape) const override {
    return cuda_workspace_bytes(shape, lt_->has_fp8(), attention_->flashinfer());
  }
  WorkspaceBytes reserve_workspace(const WorkspaceShape& shape) override;
  std::string describe() const override {
    return name() + "; GEMM: " + lt_->describe() + "; attention: " + attention_->describe();
  }

  // Buffers and transfers (cuda_backend.cu).
  Buffer allocate(int64_t bytes) override;
  void upload(const Buffer& dst, int64_t offset, const void* src, int64_t bytes) override;
  void download(const Buffer& src, int64_t offset, void* dst, int64_t bytes) override;
  void synchronize() override;

  // Element-wise, attention and sampling ops (cuda_backend_ops.cu).
  void embedding(const TensorRef& table, const int32_t* token_ids, int64_t n, float* out) override;
  void rms_norm(float* residual, const float* delta, const float* weight, float* out, int64_t m,
                int64_t n, float eps) override;
  void rope(float* q, float* k, int64_t n, int64_t num_heads, int64_t num_kv_heads,
            int64_t head_dim, int64_t rot_dim, const int64_t* positions, const float* inv_freq,
            RopeLayout layout) override;
  void rope_write_kv(float* q, float* k, const float* v, int64_t n, int64_t num_heads,
                     int64_t num_kv_heads, int64_t head_dim, int64_t rot_dim,
                     const int64_t* positions, const float* inv_freq, RopeLayout layout,
                     const KVCacheView& cache, const int64_t* slot_mapping) override;
  void hadamard_rotate(float* x, int64_t rows, int64_t head_dim) override;
  void rms_norm_quant_fp8(float* residual, const float* delta, const float* weight, float* out,
                          int64_t m, int64_t n, float eps, uint8_t* q, float* scale) override;
  void silu_mul_quant_fp8(const float* gate, const float* up, float* out, int64_t m, int64_t n,
                          uint8_t* q, float* scale) override;
  void silu_mul(const float* gate, const float* up, float* out, int64_t m, int64_t n) override;
  void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t m, int64_t n) override;
  void scale(float* x, int64_t count, float s) override { ck::scale(x, count, s, stream_); }
  void row_amax(const float* x, int64_t m, int64_t k, float* amax) override;
  void f32_to_bf16(const float* x, int64_t count, uint16_t* out) override;
  void bf16_to_f32(const uint16_t* x, int64_t count, float* out) override;
  void quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const float* amax, uint8_t* q,
                            float* scale) override;
  void quantize_fp8_static(const float* x, int64_t m, int64_t k, float scale, uint8_t* q) override;

  // Linears (cuda_backend_linear.cu).
  void linear(const float* x, int64_t m, const WeightRef& w, float* y) override;
  // One GEMM over all of k, whatever w.k_groups (exact_k_parts() is false): its FP32 sums go
  // straight into y and the scaling epilogue runs over them in place, two kernels a linear.
  // Rows run in pieces only where the W8A16 path's BF16 copies need more scratch than reserved
  // (rows never mix: the same bits as one call, the GEMMs being batch invariant).
  bool exact_k_parts() const override { return false; }
  void linear_w8a8(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                   int64_t m, const WeightRef& w, float* y) override;
  // q/k/v and gate/up side by side (FP8 tensor cores only): one GEMM of the stacked rows into
  // the GEMM scratch, then one epilogue writing each weight's output.
  bool merges_projections() const override { return lt_->has_fp8(); }
  void linear_w8a8_multi(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                         int64_t m, const WeightRef* ws, float* const* ys, int count) override;
  // One GEMM into y, then the epilogue, residual add, RMSNorm and quantization in one row
  // kernel; where cuBLASLt refuses the shape (or W8A16), linear_w8a8 then the fused norm.
  void linear_w8a8_add_rms_norm(const uint8_t* qa, const float* a_scale,
                                ScaleGranularity a_granularity, int64_t m, const WeightRef& w,
                                float* y, float* residual, const float* norm_weight, float* out,
                                float eps, uint8_t* q, float* scale) override;
  // Merged gate/up (one piece of rows: q may overwrite qa, so every GEMM row must be read
  // before any code is written): one GEMM into the scratch, then both epilogues, SiLU-mul and
  // the quantization in one row kernel. Otherwise the composition.
  void linear_w8a8_silu_quant(const uint8_t* qa, const float* a_scale,
                              ScaleGranularity a_granularity, int64_t m, const WeightRef& gate_w,
                              const WeightRef& up_w, float* gate, float* up, uint8_t* q,
                              float* scale) override;
  void linear_w8a8_partials(const uint8_t* qa, int64_t m, const WeightRef& w, float* acc) override;
  void linear_w8a8_combine(const float* acc, int64_t groups, const float* a_scale,
                           ScaleGranularity a_granularity, int64_t m, const WeightRef& w,
                           float* y) override;

  // KV cache and attention (cuda_backend_ops.cu).
  void write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                      const int64_t* slot_mapping, int64_t n) override;
  void paged_attention(const KVCacheView& cache, const float* q, const PagedAttentionBatch& batch,
                       int64_t num_heads, int64_t sliding_window, float softmax_scale,
                       float* out) override;
  void argmax_rows(const float* x, int64_t rows, int64_t width, int32_t* ids) override;
  void sample_rows(float* x, int64_t rows, int64_t width, const SampleRowParams* params,
                   LogitEdit* edits, int32_t* ids) override;
  bool samples_on_device() const override { return true; }
  void gather_rows(const float* x, int64_t width, const int64_t* rows, int64_t num_rows,
                   float* out) override;

  // CUDA graphs (cuda_backend.cu).
  bool supports_graphs() const override { return true; }
  void begin_capture(int64_t key) override;
  void end_capture() override;
  bool has_graph(int64_t key) const override { return graphs_.count(key) != 0; }
  int64_t graph_kernel_count(int64_t key) const override;
  void drop_graph(int64_t key) override;
  void replay(int64_t key, const PagedAttentionBatch& batch) override;

 private:
  // Linear helpers (cuda_backend_linear.cu).
  static void check_w8a8(const WeightRef& w, const char* op);
  ck::SimtGemmArgs simt_w8a8(const uint8_t* qa, int64_t m, const WeightRef& w, float* y) const;
  // Scratch floats of linear_w8a8 / _partials for m rows (cuda_gemm_scratch_floats): none
  // with FP8 tensor cores; W8A16: the BF16 copies of one group's weight [n, kg] and
  // activations [m, kg], 16-byte aligned.
  size_t gemm_scratch_floats(int64_t m, const WeightRef& w) const;
  // Rows of one piece of an m-row call: m before reserve_workspace, else what fits the
  // reserved scratch (an OCTET_CHECK abort when not even one row does: a linear the
  // reservation's shape did not list).
  int64_t chunk_rows(int64_t m, const WeightRef& w, const char* op) const;
  // BF16 weights (the lm_head) on cuBLASLt: the activations rounded to BF16 (RNE) in the GEMM
  // scratch, as a BF16 model's are, then a BF16 x BF16 GEMM with FP32 sums and the bias; rows
  // in pieces that fit the scratch. False when cuBLASLt refuses the shape (checked before any
  // conversion; with one queued only if no algorithm passes its probes), the same answer for
  // every m: simt_gemm then runs it in FP32.
  bool lt_bf16(const float* x, int64_t m, const WeightRef& w, float* y);
  // Rows of one piece of a merged GEMM of n stacked outputs (as chunk_rows).
  int64_t merged_chunk_rows(int64_t m, int64_t n) const;
  // The k-group part sums on cuBLASLt into d + g * stride (row stride w.n): FP8 on sm_89+,
  // W8A16 (both operands widened exactly to BF16 in the GEMM scratch) below. False, with
  // nothing queued but conversions, when cuBLASLt cannot take the shape; the answer depends
  // only on the shape and the operands' alignment, so every piece and both ops agree.
  bool lt_parts(const uint8_t* qa, int64_t m, const WeightRef& w, float* d, int64_t stride);
  // The GEMM scratch, at least `floats` floats, 256-byte aligned: one buffer for eager calls
  // and every graph (they run one at a time on the stream), which a graph keeps alive. After
  // reserve_workspace it never grows (callers cut their work into pieces that fit); before,
  // growing waits for the queued work outside a capture, and inside one allocates a new
  // buffer while the capture keeps the old (its earlier nodes, and queued work, use it).
  float* scratch(size_t floats);
  // Device -> host through the pinned staging buffer, after all queued work.
  void download_raw(const void* src, void* dst, int64_t bytes);

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

  // The kernel nodes of a captured graph (memory copies and others not counted; a failed
  // query counts -1).
  static int64_t kernel_nodes(cudaGraph_t graph);
  // Graphs: each with the attention plans and the scratch buffers its kernels use (the
  // backend's, shared with eager calls; kept alive here if they are replaced).
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

}  // namespace octet

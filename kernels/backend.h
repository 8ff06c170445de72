// Backend: the one seam between the model recipe (models/) and a device. The recipe makes one
// virtual call per op per layer, never per element, on memory the backend allocated; it never
// names a device. CpuBackend (kernels/cpu/cpu_backend.h) holds the CPU kernels and every OpenMP
// region; a CUDA backend implements the same calls. Chosen once per process (--device).
// Shapes are row-major; every pointer argument is memory of this backend (Buffer::data()), host
// pointers only where a parameter says "host". Ops are ordered on one stream: a later op sees
// an earlier op's writes; download() and synchronize() wait for all queued work.
// Errors: a shape or dtype the backend does not support, or a broken invariant (null pointer,
// slot or block id out of range, non-finite FP8 scale), is an OCTET_CHECK abort; allocation
// failure throws std::bad_alloc.
// Anchors: ggml's backend interface (buffers + graph ops), vLLM's attention backend and
// linear method objects chosen once per platform.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/check.h"
#include "kernels/common/dtype.h"
#include "kernels/common/sampling.h"
#include "kernels/common/views.h"

namespace octet {

/// Memory owned by a Backend: freed when the last copy of the handle goes (shared ownership, so
/// weights may be shared between models and views). Zero bytes gives an empty buffer with
/// data() == nullptr.
class Buffer {
 public:
  Buffer() = default;
  Buffer(std::shared_ptr<void> mem, int64_t bytes) : mem_(std::move(mem)), bytes_(bytes) {}
  void* data() const { return mem_.get(); }
  int64_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }
  template <class T>
  T* as() const { return static_cast<T*>(mem_.get()); }
  /// Bytes [offset, offset + bytes) of this buffer, sharing its ownership (OCTET_CHECK that
  /// they lie inside it).
  Buffer slice(int64_t offset, int64_t bytes) const {
    OCTET_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= bytes_, "Buffer::slice: [",
                offset, ", +", bytes, ") of ", bytes_, " bytes");
    if (bytes == 0) return Buffer();
    return Buffer(std::shared_ptr<void>(mem_, static_cast<uint8_t*>(mem_.get()) + offset), bytes);
  }

 private:
  std::shared_ptr<void> mem_;
  int64_t bytes_ = 0;
};

/// What reserve_workspace sizes a backend's scratch for: the largest work one rank's steps may
/// give it (engine/kv_budget.h workspace_shape fills it from the scheduler limits and the model).
struct WorkspaceShape {
  int64_t max_num_batched_tokens = 0;  // token rows of one eager step
  int64_t max_num_seqs = 0;            // sequences (and logits rows) of one step
  int64_t max_model_len = 0;           // positions of one sequence
  int64_t block_size = 0;              // tokens per KV block
  int64_t num_heads = 0;               // query heads on this rank
  int64_t head_dim = 0;
  int64_t max_graph_seqs = 0;          // sequences of the largest decode graph; 0: no graphs
  /// This rank's FP8 linears (linear_w8a8 / _partials): out features n, in features k, and the
  /// k parts a row-parallel layer sums (WeightRef::k_groups); merged: a group of adjacent
  /// weights linear_w8a8_multi takes at once (fp8_adjacent), n their sum; bf16: a linear of
  /// BF16 weights (the lm_head), not FP8.
  struct Linear {
    int64_t n = 0, k = 0, k_groups = 1;
    bool merged = false;
    bool bf16 = false;
  };
  std::vector<Linear> fp8_linears;
};

/// Device bytes of a backend's reserved workspace (reserve_workspace), by part; all zero on a
/// backend that keeps none (the CPU).
struct WorkspaceBytes {
  int64_t gemm_scratch = 0;        // CUDA GEMM sums of merged projections, W8A16's BF16 copies
  int64_t attention_partials = 0;  // flash-decoding partial softmax states (eager and graphs)
  int64_t attention_plan = 0;      // the eager attention work lists
  int64_t attention_prefill = 0;   // FlashInfer prefill's 16-bit q and output
  int64_t total() const {
    return gemm_scratch + attention_partials + attention_plan + attention_prefill;
  }
};

/// A device's memory now (CUDA: cudaMemGetInfo on the backend's device). total_bytes 0: the
/// backend does not know it (the CPU: the engine reads MemAvailable itself).
struct DeviceMemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  /// "cpu", "cuda:0 (NVIDIA H200, sm_90, 139 GiB)", ... for logs.
  virtual std::string name() const = 0;

  /// One line for the start-up log: the device and, where it has a choice, the GEMM path and
  /// the attention kernels it runs. Default: name().
  virtual std::string describe() const { return name(); }
  /// Total memory of the device in bytes (what --gpu-memory-utilization is a fraction of), or 0
  /// when the backend does not know it (the CPU: the engine reads MemAvailable itself).
  virtual int64_t memory_capacity_bytes() const { return 0; }
  /// Free and total memory of the device now. Default: unknown (all zero).
  virtual DeviceMemoryInfo memory_info() const { return {}; }

  // --- Workspace: scratch the ops need beyond the caller's buffers --------------------------
  /// The bytes reserve_workspace(shape) allocates on this backend. Default: none.
  virtual WorkspaceBytes workspace_bytes(const WorkspaceShape& shape) const {
    (void)shape;
    return {};
  }
  /// Allocates the workspace for `shape` now (freeing any grown before), so that no op later
  /// allocates scratch: an op whose work exceeds it runs in pieces that fit (same results bit
  /// for bit). Call before the KV pool is allocated, outside a graph capture; returns what it
  /// holds (workspace_bytes(shape)). Throws std::bad_alloc when the device lacks the memory.
  /// Default: nothing to reserve.
  virtual WorkspaceBytes reserve_workspace(const WorkspaceShape& shape) {
    return workspace_bytes(shape);
  }

  // --- Buffers -----------------------------------------------------------------------------
  /// `bytes` of zeroed memory (large ones on huge pages on the CPU).
  virtual Buffer allocate(int64_t bytes) = 0;
  /// Copies `bytes` from host `src` into dst at byte `offset`. Returns once src may be reused.
  virtual void upload(const Buffer& dst, int64_t offset, const void* src, int64_t bytes) = 0;
  /// The layout this backend's linear_w8a8 reads FP8 weights best in (WeightRef::layout).
  /// Default: row-major.
  virtual Fp8Layout fp8_weight_layout() const { return Fp8Layout::RowMajor; }
  /// A new buffer (allocate, upload) holding the E4M3 weight src: [n, k] row-major (host) in
  /// fp8_weight_layout(), returned in *layout; k_groups as WeightRef's.
  Buffer upload_fp8_weight(const uint8_t* src, int64_t n, int64_t k, int64_t k_groups,
                           Fp8Layout* layout);
  /// The layout this backend's linear reads BF16 weights best in (WeightRef::bf16_layout).
  /// Default: row-major.
  virtual Bf16Layout bf16_weight_layout() const { return Bf16Layout::RowMajor; }
  /// A new buffer holding the BF16 weight src: [n, k] row-major (host) in bf16_weight_layout(),
  /// returned in *layout.
  Buffer upload_bf16_weight(const uint16_t* src, int64_t n, int64_t k, Bf16Layout* layout);
  /// Copies `bytes` at byte `offset` of src into host `dst`, after all queued work.
  virtual void download(const Buffer& src, int64_t offset, void* dst, int64_t bytes) = 0;
  /// Waits until all queued work is done.
  virtual void synchronize() = 0;

  // --- Ops the Llama recipe runs (models/llama.h) -----------------------------------------
  /// out[i, :] = table[token_ids[i], :] widened to FP32. table: [vocab, hidden] F32 or BF16;
  /// token_ids: [n] (each in [0, vocab)); out: [n, hidden].
  virtual void embedding(const TensorRef& table, const int32_t* token_ids, int64_t n,
                         float* out) = 0;

  /// RMSNorm with fused residual add (Zhang & Sennrich 2019; vLLM's fused_add_rms_norm): when
  /// delta != nullptr first residual += delta; then out = residual / sqrt(mean(residual^2) +
  /// eps) * weight, per row. residual, delta, out: [m, n]; weight: [n]. out may not alias.
  virtual void rms_norm(float* residual, const float* delta, const float* weight, float* out,
                        int64_t m, int64_t n, float eps) = 0;

  /// Rotates q [n, num_heads * head_dim] and k [n, num_kv_heads * head_dim] in place at
  /// positions [n]: angle_i = pos * inv_freq[i], inv_freq: [rot_dim / 2]; only the first
  /// rot_dim dims of each head rotate, paired as `layout` says. k may be null (q only).
  virtual void rope(float* q, float* k, int64_t n, int64_t num_heads, int64_t num_kv_heads,
                    int64_t head_dim, int64_t rot_dim, const int64_t* positions,
                    const float* inv_freq, RopeLayout layout) = 0;

  /// rope(q, k, ...) (k not null), then write_kv_cache(cache, k, v, slot_mapping, n) of the
  /// rotated k: the values of the two calls; CUDA runs them as one kernel.
  virtual void rope_write_kv(float* q, float* k, const float* v, int64_t n, int64_t num_heads,
                             int64_t num_kv_heads, int64_t head_dim, int64_t rot_dim,
                             const int64_t* positions, const float* inv_freq, RopeLayout layout,
                             const KVCacheView& cache, const int64_t* slot_mapping) {
    rope(q, k, n, num_heads, num_kv_heads, head_dim, rot_dim, positions, inv_freq, layout);
    write_kv_cache(cache, k, v, slot_mapping, n);
  }

  /// out[m, n] = silu(gate) * up, silu(x) = x / (1 + exp(-x)) (SwiGLU, Shazeer 2020).
  /// out may alias gate.
  virtual void silu_mul(const float* gate, const float* up, float* out, int64_t m,
                        int64_t n) = 0;

  /// out[m, n] = gelu_tanh(gate) * up, gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
  /// x^3))) (GeGLU, Shazeer 2020; Gemma's gelu_pytorch_tanh). out may alias gate.
  virtual void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t m,
                             int64_t n) = 0;

  /// rms_norm, then out's rows quantized per token: quantize_fp8_dynamic(out, m, n, null, q,
  /// scale), q [m, n], scale [m]. The values of the two calls; a backend may run them as one
  /// kernel (CUDA), as vLLM's fused RMSNorm + dynamic per-token quantization.
  virtual void rms_norm_quant_fp8(float* residual, const float* delta, const float* weight,
                                  float* out, int64_t m, int64_t n, float eps, uint8_t* q,
                                  float* scale) {
    rms_norm(residual, delta, weight, out, m, n, eps);
    quantize_fp8_dynamic(out, m, n, nullptr, q, scale);
  }

  /// silu_mul, then out's rows quantized per token (as rms_norm_quant_fp8): one kernel on CUDA.
  virtual void silu_mul_quant_fp8(const float* gate, const float* up, float* out, int64_t m,
                                  int64_t n, uint8_t* q, float* scale) {
    silu_mul(gate, up, out, m, n);
    quantize_fp8_dynamic(out, m, n, nullptr, q, scale);
  }

  /// x[i] *= s for i < count (Gemma's embeddings times sqrt(hidden_size)).
  virtual void scale(float* x, int64_t count, float s) = 0;

  /// amax[i] = max_j |x[i, j]| (NaN ignored) of x: [m, k]: the local half of a dynamic
  /// per-token scale whose row is split over ranks (all-reduce max, then quantize_fp8_dynamic).
  virtual void row_amax(const float* x, int64_t m, int64_t k, float* amax) = 0;

  /// out[i] = x[i] rounded to BF16 bits for i < count: to nearest even, finite values past the
  /// BF16 range to +-inf, NaN -> 0x7FFF (cuda_bf16.h's __float2bfloat16_rn; kernels/common/
  /// half.h float_to_bf16). x: [count] FP32; out: [count] uint16 BF16 bits (a row-parallel
  /// output on its way to Communicator::all_reduce_sum_bf16).
  virtual void f32_to_bf16(const float* x, int64_t count, uint16_t* out) = 0;
  /// out[i] = x[i] widened to FP32, exactly (the BF16 bits are the FP32's top half; a NaN keeps
  /// its payload). x: [count] BF16 bits; out: [count] FP32.
  virtual void bf16_to_f32(const uint16_t* x, int64_t count, float* out) = 0;

  /// Dynamic per-token E4M3 quantization, vLLM's rule (kernels/cpu/w8a8.h): scale[i] =
  /// max(amax_i / 448, 1 / (448 * 512)), q = fp8(x / scale[i]). x: [m, k]; q: [m, k]; scale: [m].
  /// amax: [m] precomputed row maxima (tensor parallelism), or null to take them from x.
  virtual void quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const float* amax,
                                    uint8_t* q, float* scale) = 0;

  /// Static per-tensor E4M3 quantization: q = fp8(x * (1 / scale)), vLLM's static rule; scale is
  /// a host value (> 0, finite). x, q: [m, k].
  virtual void quantize_fp8_static(const float* x, int64_t m, int64_t k, float scale,
                                   uint8_t* q) = 0;

  /// y[m, n] = x[m, k] . W^T + bias for an F32 or BF16 weight (W.dtype), FP32 accumulation.
  /// Batch invariant: row i of y is bit-identical whatever m and the row's position.
  virtual void linear(const float* x, int64_t m, const WeightRef& w, float* y) = 0;

  /// FP8 W8A8: y[m, n] = (sum_k fp32(qa[m,k]) * fp32(qw[n,k])) * (a_scale * s_w[n]) + bias,
  /// FP32 accumulation. qa: [m, k] E4M3; a_scale: [m] (a_granularity PerRow, dynamic) or [1]
  /// (PerTensor, static); w.dtype == FP8_E4M3. Batch invariant as linear. The k-sum is taken
  /// in w.k_groups parts when exact_k_parts(), else over all of k at once (one GEMM).
  virtual void linear_w8a8(const uint8_t* qa, const float* a_scale,
                           ScaleGranularity a_granularity, int64_t m, const WeightRef& w,
                           float* y) = 0;

  /// linear_w8a8 into y, then rms_norm(residual, y, norm_weight, out, m, w.n, eps) and, with q
  /// non-null, out's per-token codes into q / scale (rms_norm_quant_fp8): the values of those
  /// calls. q / scale may be qa / a_scale (read before they are written). CUDA runs the
  /// epilogue, residual add, norm and quantization as one row kernel after the GEMM.
  virtual void linear_w8a8_add_rms_norm(const uint8_t* qa, const float* a_scale,
                                        ScaleGranularity a_granularity, int64_t m,
                                        const WeightRef& w, float* y, float* residual,
                                        const float* norm_weight, float* out, float eps,
                                        uint8_t* q, float* scale) {
    linear_w8a8(qa, a_scale, a_granularity, m, w, y);
    if (q != nullptr) {
      rms_norm_quant_fp8(residual, y, norm_weight, out, m, w.n, eps, q, scale);
    } else {
      rms_norm(residual, y, norm_weight, out, m, w.n, eps);
    }
  }

  /// The gate and up projections of one input, then SwiGLU and its quantization:
  /// linear_w8a8_multi(qa, a_scale, a_granularity, m, {gate_w, up_w}, {gate, up}), then
  /// silu_mul_quant_fp8(gate, up, gate, m, gate_w.n, q, scale): the values of those calls in
  /// gate, q and scale (up's contents are left unspecified). q / scale may be qa / a_scale.
  /// CUDA runs both epilogues, SiLU-mul and the quantization as one row kernel after one GEMM
  /// of the adjacent weights.
  virtual void linear_w8a8_silu_quant(const uint8_t* qa, const float* a_scale,
                                      ScaleGranularity a_granularity, int64_t m,
                                      const WeightRef& gate_w, const WeightRef& up_w,
                                      float* gate, float* up, uint8_t* q, float* scale) {
    const WeightRef ws[2] = {gate_w, up_w};
    float* const ys[2] = {gate, up};
    linear_w8a8_multi(qa, a_scale, a_granularity, m, ws, ys, 2);
    silu_mul_quant_fp8(gate, up, gate, m, gate_w.n, q, scale);
  }

  /// Whether linear_w8a8 sums a weight's k parts (WeightRef::k_groups) one by one, each from
  /// zero, so that row-parallel ranks' gathered part sums give world size 1's bits (the CPU:
  /// tensor parallelism changes no bit). false (CUDA): one GEMM over all of k whatever
  /// k_groups; row-parallel layers then all-reduce their outputs in BF16 (models/linear.h) and
  /// outputs move by rounding with the TP size, as in vLLM.
  virtual bool exact_k_parts() const { return true; }

  /// Whether the loader should store the q/k/v and the gate/up FP8 weights of a layer side by
  /// side in one allocation where fp8_mergeable allows (models/linear.h
  /// upload_linears_merged), so that linear_w8a8_multi runs each group as one GEMM (CUDA).
  virtual bool merges_projections() const { return false; }

  /// linear_w8a8 of one input for `count` weights (q/k/v, gate/up): ys[i] = linear_w8a8(qa,
  /// a_scale, a_granularity, m, ws[i]), bit for bit where exact_k_parts(). A backend may run
  /// them as one kernel (the CPU's AVX2 GEMV: one thread-team hand-off; CUDA: one GEMM of
  /// adjacent weights, whose sums may round in another order than one GEMM each, still batch
  /// invariant); the default calls linear_w8a8 per weight.
  virtual void linear_w8a8_multi(const uint8_t* qa, const float* a_scale,
                                 ScaleGranularity a_granularity, int64_t m, const WeightRef* ws,
                                 float* const* ys, int count) {
    for (int i = 0; i < count; ++i) linear_w8a8(qa, a_scale, a_granularity, m, ws[i], ys[i]);
  }

  /// The raw FP32 part sums of linear_w8a8 (no scales, no bias), for a row-parallel layer
  /// whose parts are all-gathered across ranks: acc: [w.k_groups, m, n], acc[g, i, j] = sum over
  /// inputs [g * k / G, (g + 1) * k / G) of fp32(qa[i, t]) * fp32(qw[j, t]), computed exactly as
  /// linear_w8a8 computes that part. qa: [m, k] E4M3; w.dtype == FP8_E4M3.
  virtual void linear_w8a8_partials(const uint8_t* qa, int64_t m, const WeightRef& w,
                                    float* acc) = 0;

  /// linear_w8a8's epilogue over gathered part sums acc: [groups, m, n]: y[i, j] =
  /// (((acc[0,i,j] + acc[1,i,j]) + ...) + acc[groups-1,i,j]) * (a_scale * s_w[j]) + bias[j].
  /// With acc from linear_w8a8_partials over all of k (groups == w.k_groups), y equals
  /// linear_w8a8's bit for bit where exact_k_parts(). w supplies the scales and bias only.
  virtual void linear_w8a8_combine(const float* acc, int64_t groups, const float* a_scale,
                                   ScaleGranularity a_granularity, int64_t m,
                                   const WeightRef& w, float* y) = 0;

  /// Normalized Walsh-Hadamard transform of each row, in place: x[r, :] = H x[r, :] /
  /// sqrt(head_dim), H the Sylvester-ordered +-1 Hadamard matrix (H[i][j] = (-1)^popcount(i & j)).
  /// x: [rows, head_dim] FP32 contiguous; head_dim a power of two (OCTET_CHECK). The transform
  /// is orthogonal and symmetric, so applying it twice is the identity and rotating q and k by
  /// it leaves q.k unchanged (--kv-cache-rotation hadamard; QuaRot, Ashkboos et al. 2024).
  /// Batch invariant: each row's result depends only on that row.
  virtual void hadamard_rotate(float* x, int64_t rows, int64_t head_dim) = 0;

  /// Stores n tokens' K and V (k, v: [n, num_kv_heads, head_dim] FP32) into slots
  /// slot_mapping[i] of `cache` (negative: skipped), converted to cache.dtype: 16-bit RNE, FP8
  /// fp8(x / scale[kv head]) with saturation (vLLM's reshape_and_cache).
  virtual void write_kv_cache(const KVCacheView& cache, const float* k, const float* v,
                              const int64_t* slot_mapping, int64_t n) = 0;

  /// Causal paged attention (Kwon et al. 2023), varlen queries: q [num_tokens, num_heads,
  /// head_dim] FP32 -> out, same shape, over the blocks of `batch` (GQA: query head h reads KV
  /// head h / (num_heads / num_kv_heads)); sliding_window > 0 keeps the last `window` positions
  /// (HF semantics), 0 = full. Scores, softmax and the V sum in FP32. batch's arrays are memory
  /// of this backend. Batch invariant: a query's output depends only on its own sequence.
  virtual void paged_attention(const KVCacheView& cache, const float* q,
                               const PagedAttentionBatch& batch, int64_t num_heads,
                               int64_t sliding_window, float softmax_scale, float* out) = 0;

  /// Greedy tokens on the device: ids[r] = the first index of row r's largest value (torch.argmax's
  /// ties: the lowest index) when every value of the row is finite, else -1 (the host then
  /// samples that row itself and reports the bad logit). x: [rows, width]; ids: [rows] int32.
  virtual void argmax_rows(const float* x, int64_t rows, int64_t width, int32_t* ids) = 0;

  /// Tokens sampled on the device (kernels/common/sampling.h): ids[r] = the token the host
  /// sampler (engine/sampler.h) would draw from row r with params[r] after its edits (logits
  /// processing), kSampleNonFinite when the row holds NaN or +-inf or its processing fails (the
  /// row is then left as it was), kSampleSkipped for mode kSkip. x: [rows, width] (rows sampled
  /// may be overwritten); params: [rows]; edits: the rows' LogitEdits (null when none; their
  /// `raw` fields are scratch); ids: [rows] int32.
  virtual void sample_rows(float* x, int64_t rows, int64_t width, const SampleRowParams* params,
                           LogitEdit* edits, int32_t* ids) = 0;
  /// Whether the engine should sample on this backend (sample_rows) rather than read the logits
  /// back: true where they cross a bus (CUDA); the CPU's host sampler is its fastest.
  virtual bool samples_on_device() const { return false; }

  /// out[r, :] = x[rows[r], :] for r < num_rows (the rows whose logits are needed).
  /// x: [*, width]; rows: [num_rows]; out: [num_rows, width].
  virtual void gather_rows(const float* x, int64_t width, const int64_t* rows,
                           int64_t num_rows, float* out) = 0;

  // --- Graphs: a decode step's ops recorded once, replayed each step (CUDA graphs) ----------
  // The caller (engine/model_runner) keeps every buffer the recorded ops touch at the same
  // address for the graph's life and uploads each step's batch into them before replay().

  /// Whether begin_capture / end_capture / replay work on this backend. Default: no.
  virtual bool supports_graphs() const { return false; }
  /// From now until end_capture(), ops are recorded as graph `key` (replacing an older graph
  /// of that key) and not run. Only the ops of this section's recipe in between (no upload,
  /// download, synchronize or allocate); paged_attention must see one query per sequence.
  virtual void begin_capture(int64_t key) {
    OCTET_CHECK(false, name(), ": no graph capture (graph ", key, ")");
  }
  virtual void end_capture() { OCTET_CHECK(false, name(), ": no graph capture"); }
  /// Frees graph `key` (after its queued replays); no-op when there is none.
  virtual void drop_graph(int64_t key) { (void)key; }
  /// Whether graph `key` was captured.
  virtual bool has_graph(int64_t key) const {
    (void)key;
    return false;
  }
  /// The kernels one replay of graph `key` launches (its kernel nodes: cuBLASLt's included,
  /// memory copies not), or -1: no such graph, or the backend cannot tell.
  virtual int64_t graph_kernel_count(int64_t key) const {
    (void)key;
    return -1;
  }
  /// Queues graph `key`, its paged_attention plans made from batch's host_query_start_loc and
  /// host_seq_lens (required; num_seqs and max_blocks_per_seq as at capture).
  virtual void replay(int64_t key, const PagedAttentionBatch& batch) {
    (void)batch;
    OCTET_CHECK(false, name(), ": no graph to replay (graph ", key, ")");
  }
};

/// The backend for `device`: "cpu", or "cuda" / "cuda:N" when built with CUDA, or "auto" (the
/// CUDA backend when built with it and a GPU is present, else the CPU). Throws
/// std::invalid_argument naming the device for an unknown or unavailable one.
std::unique_ptr<Backend> make_backend(const std::string& device);

/// What make_backend(device) would run on, without creating it: "auto" becomes "cuda:N" (the
/// first GPU of compute capability >= 8.0 when built with CUDA) or "cpu"; others unchanged.
std::string resolve_device(const std::string& device);

}  // namespace octet

#pragma once
// A linear layer's weights in one of the formats octet computes with, and y = x W^T (+ b).
//   F32:      W [out, in] FP32 (the unquantized path; GGUF weights are dequantized to FP32).
//   BF16:     W [out, in] bf16 bits (embeddings / lm_head "stay 16-bit").
//   FP8_E4M3: W [out, in] E4M3 with weight_scale [out] (channel) or [1] (tensor); activations
//             quantized per token at run time (FP8_DYNAMIC) or with a static input_scale.
// DESIGN.md "Numerics conventions": y[m,n] = s_a[m] * s_w[n] * sum_k qa[m,k] * qw[n,k], FP32.
// Loaders build a HostLinearWeight (host vectors), cut a rank's shard, then upload it to the
// Backend as a LinearWeight (backend buffers only; no host copy is kept).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/communicator.h"

namespace octet {

/// A linear layer on the host, as read from a checkpoint (before upload).
struct HostLinearWeight {
  std::string name;  // HF module name, e.g. "model.layers.0.self_attn.q_proj" (for errors/logs)
  DType format = DType::F32;      // F32, BF16 or FP8_E4M3
  int64_t out_features = 0;
  int64_t in_features = 0;
  std::vector<float> w_f32;       // [out, in] when F32
  std::vector<uint16_t> w_bf16;   // [out, in] when BF16
  std::vector<uint8_t> w_fp8;     // [out, in] E4M3 when FP8_E4M3
  std::vector<float> w_scale;     // [out] or [1] when FP8_E4M3
  ScaleGranularity w_granularity = ScaleGranularity::PerRow;
  bool static_input = false;      // FP8: true -> input_scale, false -> dynamic per token
  float input_scale = 0.0f;       // FP8 static only
  std::vector<float> bias;        // [out] or empty
  int64_t k_groups = 1;           // FP8 row-parallel: k parts on this rank (WeightRef::k_groups)
};

/// A linear layer on a Backend.
struct LinearWeight {
  std::string name;
  DType format = DType::F32;
  int64_t out_features = 0;
  int64_t in_features = 0;
  Buffer weight;  // [out, in] of `format`
  Buffer scale;   // FP8: [out] (PerRow) or [1] (PerTensor) FP32; else empty
  ScaleGranularity w_granularity = ScaleGranularity::PerRow;
  bool static_input = false;
  float input_scale = 0.0f;
  Buffer input_scale_buffer;  // FP8 static: [1] FP32 = input_scale (linear_w8a8's a_scale)
  Buffer bias;    // [out] FP32 or empty
  int64_t k_groups = 1;  // FP8 row-parallel: k parts on this rank (WeightRef::k_groups)
  Fp8Layout layout = Fp8Layout::RowMajor;  // FP8: how `weight` holds the codes
  Bf16Layout bf16_layout = Bf16Layout::RowMajor;  // BF16: how `weight` holds the values

  /// The kernels' view of this weight.
  WeightRef ref() const;
  /// Bytes of weight data read per forward call (weights and scales), for bandwidth figures.
  int64_t weight_bytes() const { return weight.bytes() + scale.bytes(); }
};

/// Uploads a host weight to `backend` (its shard, already cut by the caller).
LinearWeight upload_linear(Backend& backend, const HostLinearWeight& w);

/// Uploads weights that one input feeds (q/k/v, gate/up): where backend.merges_projections()
/// and the host weights qualify (fp8_mergeable's rule; FP8 with dynamic activations), their
/// codes, scales and biases go into one allocation each, in order, and each LinearWeight is a
/// slice of them (fp8_adjacent holds, so linear_w8a8_multi may run one GEMM); otherwise each
/// as upload_linear. Either way the results compute the same as upload_linear's.
std::vector<LinearWeight> upload_linears_merged(Backend& backend,
                                                const std::vector<HostLinearWeight>& ws);

/// Uploads n floats (norm weights, biases) to a new buffer of `backend`; empty for n == 0.
Buffer upload_f32(Backend& backend, const std::vector<float>& v);

/// Whether every weight of ws is FP8 with dynamic per-token activations and the same
/// in_features: one quantization of x serves them all, and the op producing x may make it
/// (Backend::rms_norm_quant_fp8, silu_mul_quant_fp8) and pass x_quantized below.
bool fp8_dynamic_inputs(std::initializer_list<const LinearWeight*> ws);

/// y: [m, out] = x: [m, in] . W^T (+ bias), in the weight's format. FP8 weights quantize x
/// first into qa: [m, in] E4M3 and a_scale: [m] (caller-owned backend memory), unless
/// x_quantized: qa and a_scale already hold x's dynamic per-token codes (fp8_dynamic_inputs).
void linear_forward(Backend& backend, const LinearWeight& w, const float* x, int64_t m,
                    float* y, uint8_t* qa, float* a_scale, bool x_quantized = false);

/// linear_forward of one input x for `count` weights (q/k/v, gate/up): ys[i] = linear_forward(
/// *ws[i], x) (bit for bit on the CPU; Backend::linear_w8a8_multi). FP8 weights with dynamic
/// activations and equal in_features quantize x once (none when x_quantized) and run as one
/// Backend::linear_w8a8_multi call; otherwise one linear_forward each.
void linear_forward_multi(Backend& backend, const LinearWeight* const* ws, int count,
                          const float* x, int64_t m, float* const* ys, uint8_t* qa,
                          float* a_scale, bool x_quantized = false);

/// linear_forward of an FP8 weight (world size 1) followed by the residual RMSNorm its output
/// feeds: y = x W^T (+ bias), residual += y, out = rms(residual) * norm_weight and, with
/// quantize_out, out's per-token codes into qa / a_scale for the next linears: one
/// Backend::linear_w8a8_add_rms_norm call after x's quantization (none when x_quantized).
void linear_forward_add_norm(Backend& backend, const LinearWeight& w, const float* x, int64_t m,
                             float* y, uint8_t* qa, float* a_scale, bool x_quantized,
                             float* residual, const float* norm_weight, float* out, float eps,
                             bool quantize_out);

/// Scratch of a row-parallel layer at world size > 1 (backend memory, caller-owned). FP8 on a
/// backend with exact_k_parts(): amax: [m]; partials: [w.k_groups, m, out]; gathered: [world *
/// w.k_groups, m, out]. Without exact_k_parts() (any format): bf16: [m, out] BF16 bits (2 bytes
/// each), the outputs on their way through Communicator::all_reduce_sum_bf16.
struct RowParallelScratch {
  float* amax = nullptr;
  float* partials = nullptr;
  float* gathered = nullptr;
  uint16_t* bf16 = nullptr;
};

/// A row-parallel layer (o_proj, down_proj; models/tensor_parallel.h): y: [m, out] = the whole
/// output on every rank, from this rank's input columns x: [m, in_shard]. World size 1:
/// linear_forward. On a backend with exact_k_parts() (the CPU): FP8 takes the whole row's
/// dynamic scale (row_amax, all_reduce_max, quantize with it: codes equal world size 1's), this
/// rank's k-part sums, all_gather, combine: bit-identical to world size 1; F32/BF16 the partial
/// product, then all_reduce_sum (FP32, rank order). Without exact_k_parts() (CUDA), vLLM's
/// layer: the partial product (FP8: this rank's columns quantized alone; the bias on rank 0
/// only), rounded to BF16 into scratch.bf16 (Backend::f32_to_bf16), all_reduce_sum_bf16,
/// widened back into y (bf16_to_f32): outputs move with the TP size by BF16 rounding.
/// x_quantized (qa, a_scale hold this rank's x quantized per token) only at world size 1 or
/// without exact k parts.
void linear_forward_row_parallel(Backend& backend, Communicator& comm, const LinearWeight& w,
                                 const float* x, int64_t m, float* y, uint8_t* qa,
                                 float* a_scale, const RowParallelScratch& scratch,
                                 bool x_quantized = false);

/// Quantizes an F32 host weight to FP8 E4M3 in place (scale = amax/448 per output channel or
/// per tensor, compressed-tensors' rule in the arithmetic of the checkpoint's dtype, so the codes
/// equal llm-compressor's; see kernels/common/weight_quant.h); activations dynamic per token.
/// Throws std::logic_error for a BF16 weight.
void quantize_linear_fp8(HostLinearWeight& w, ScaleGranularity granularity,
                         DType arithmetic = DType::F32);

}  // namespace octet

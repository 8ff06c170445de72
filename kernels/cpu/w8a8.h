#pragma once
// FP8 W8A8 linear layers on the CPU: E4M3 weights and activations with FP32 scales and FP32
// accumulation, computing what an FP8 tensor core computes (DESIGN.md "Numerics conventions"):
//   y[m, n] = acc[m, n] * (s_a[m] * s_w[n])  (+ bias[n]),  acc = sum_k fp32(qa[m,k]) * fp32(qw[n,k])
// The product of two E4M3 values is exact in FP32; only the accumulation order differs from the
// plain reference (ref::linear_w8a8), so results agree to FP32 rounding of the sum.
// Scales multiply on dequantization: q = fp8(x / s), x_hat = fp32(q) * s.
//
// Quantization rules mirrored here (checked against the upstream sources named):
//  * Weights, compressed-tensors `calculate_qparams` + `_quantize` (neuralmagic/compressed-
//    tensors 0.19.0, the version llmcompressor 0.14.0.1 pins, identical in 0.20.1: quantization/
//    utils/helpers.py and lifecycle/forward_helpers.py), as llm-compressor's min-max observer
//    calls them (min/max over the row or the tensor), symmetric FP8, on the CPU torch path:
//      amax  = max(|min(w, 0)|, max(w, 0))             over the row (channel) or the tensor
//      s     = amax / (896 / 2)                        (division by 448)
//      s     = (s == 0) ? torch.finfo(dtype).eps : s  (only exact zeros are replaced)
//      q     = float8_e4m3fn(clamp(w / s + 0, -448, 448))  (division, RNE); the + 0 is the
//              zero_point (zeros) llm-compressor registers and the compressor adds: -0 -> +0
//    All arithmetic is done in the weight's own dtype (torch: FP32 math rounded to bf16/fp16 for
//    16-bit weights; the scale tensor has the weight's dtype, initialize.py "scale_dtype =
//    observed_dtype"). quantize_weight_e4m3 is the FP32-weight case (eps 2^-23);
//    quantize_weight_e4m3_as reproduces BF16 (eps 2^-7) and FP16 (eps 2^-10) bit for bit, tested
//    against codes made by compressed-tensors (tests/kernels/golden/w8a8_weight_quant.json).
//    Older compressed-tensors (<= 0.12) clamped every scale to >= 2^-23 instead; the results
//    differ only for rows with amax < 448 * 2^-23. On CUDA (SM90+) 0.19 runs a Triton kernel
//    that divides in FP32 without rounding w / s to bf16; that variant is not reproduced here.
//    A NaN in a row gives a NaN scale (torch.amax propagates NaN) and NaN codes for that row;
//    callers that load weights reject non-finite scales.
//  * Dynamic per-token activations, vLLM `dynamic_per_token_scaled_fp8_quant` (vllm-project/
//    vllm, csrc/quantization/w8a8/fp8/common.cu, scaled_fp8_conversion<false> in common.cuh):
//      amax  = fmaxf over |x| (NaN ignored),  s = max(amax / 448.0f, 1 / (448 * 512))
//      q     = fp8(clamp(x / s, -448, 448))     (true division; satfinite RNE conversion)
//    One deliberate difference: vLLM's fminf/fmaxf clamp turns a NaN element into +448; here a
//    NaN element stays NaN (code 0x7F), as DESIGN.md says NaN stays NaN. Finite rows: identical.
//  * Static per-tensor activations, vLLM `static_scaled_fp8_quant` (same file): q =
//    fp8(clamp(x * (1.0f / s), -448, 448)) — vLLM multiplies by the FP32 reciprocal here.
#include <cstdint>

#include "kernels/common/views.h"
#include "kernels/common/weight_quant.h"
#include "kernels/cpu/fp8_layout.h"  // Rows8x32, the AVX2 path's layout

namespace octet {

/// Dynamic per-token quantization of activations x: [m, k] -> q: [m, k] E4M3, scale: [m], with
/// vLLM's rule above: scale[i] = max(amax(x[i, :]) / 448, kActivationScaleMin), q = fp8(x / s).
/// amax: [m] precomputed row maxima (tensor parallelism: the whole row's, all-reduced over the
/// ranks) used instead of x's own, or null; same code path and bits either way.
void quantize_per_token_e4m3(const float* x, int64_t m, int64_t k, const float* amax,
                             uint8_t* q, float* scale);

/// Static per-tensor quantization with a given input_scale (> 0, finite; CHECKed):
/// q = fp8(x * (1 / scale)), vLLM's static rule above.
void quantize_static_e4m3(const float* x, int64_t m, int64_t k, float scale, uint8_t* q);

/// y: [m, n] = acc * (s_a * s_w) (+ bias: [n] or nullptr), see the file comment. qa: [m, k]
/// E4M3; a_scale: [m] (a_granularity PerRow) or [1] (PerTensor). Multithreaded (OpenMP over
/// the outputs, never over k). Path chosen once per process by CPU features: AVX-512
/// VBMI+BF16, else AVX2+FMA+F16C, else scalar. Batch invariant: row i of y is bit-identical for
/// every m, position of the row in the batch and thread count (each output's FP32 sum is the
/// same instruction sequence whatever m is; more rows only share the decoded weights, which
/// are read once per tile of rows); the AVX2 path gives the same bits for either layout of w.
/// Codes must not be NaN (0x7F/0xFF): the AVX2 path decodes them as 480. w.k_groups > 1
/// (row-parallel layers): acc is the sum of w.k_groups parts of k, each the path's sum over
/// its k / G inputs from zero, added in part order (aborts unless G divides k).
void linear_w8a8(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                 const Fp8WeightView& w, const float* bias, float* y, int64_t m);

// Explicit paths, for tests and benchmarks; results equal linear_w8a8 / quantize_per_token_e4m3
// up to FP32 accumulation order (each path is batch invariant on its own). The _avx2 ones abort
// when fp8_avx2_available() is false.
void linear_w8a8_scalar(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                        const Fp8WeightView& w, const float* bias, float* y, int64_t m);
void linear_w8a8_avx2(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                      const Fp8WeightView& w, const float* bias, float* y, int64_t m);
/// True when the CPU has AVX-512 F/BW/VBMI/BF16 (w8a8_linear_avx512.cpp): linear_w8a8 then runs
/// every m through VPERMI2B decode + VDPBF16PS, exact products, FP32 accumulation.
bool w8a8_avx512_available();
/// The AVX-512 path (aborts when unavailable): tiles of up to 4 rows x 4 outputs share each
/// decoded 64-code weight chunk; m == 1 is the decode GEMV.
void linear_w8a8_avx512(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                        const Fp8WeightView& w, const float* bias, float* y, int64_t m);
void quantize_per_token_e4m3_scalar(const float* x, int64_t m, int64_t k, const float* amax,
                                    uint8_t* q, float* scale);
void quantize_per_token_e4m3_avx2(const float* x, int64_t m, int64_t k, const float* amax,
                                  uint8_t* q, float* scale);
/// The rows' own maxima (amax null).
inline void quantize_per_token_e4m3(const float* x, int64_t m, int64_t k, uint8_t* q,
                                    float* scale) {
  quantize_per_token_e4m3(x, m, k, nullptr, q, scale);
}
inline void quantize_per_token_e4m3_scalar(const float* x, int64_t m, int64_t k, uint8_t* q,
                                           float* scale) {
  quantize_per_token_e4m3_scalar(x, m, k, nullptr, q, scale);
}
inline void quantize_per_token_e4m3_avx2(const float* x, int64_t m, int64_t k, uint8_t* q,
                                         float* scale) {
  quantize_per_token_e4m3_avx2(x, m, k, nullptr, q, scale);
}

/// Which W8A8 path runs: Auto = linear_w8a8's choice (by CPU features, once per process).
enum class W8A8Path { Auto, Scalar, Avx2, Avx512 };

/// The path linear_w8a8 runs on this CPU (the best its features allow, or the environment's
/// OCTET_CPU_W8A8_KERNEL = auto | avx512 | avx2 | scalar, for measuring one against another;
/// std::invalid_argument for another value or one the CPU cannot run), the weight layout it
/// streams fastest (Rows8x32 for the AVX2 path, RowMajor otherwise) and its name for logs.
/// Only the AVX2 path reads Rows8x32; the others abort on it.
W8A8Path w8a8_auto_path();
Fp8Layout w8a8_preferred_layout();
const char* w8a8_kernel_name();

/// linear_w8a8 of one input qa for `count` weights (q/k/v, gate/up: same k): ys[i] = the
/// linear_w8a8 output of ws[i] with biases[i] (null for none), bit for bit. On the AVX2 path at
/// m <= 4 with Rows8x32 weights of equal k and k_groups, all rows run in one parallel loop (one
/// thread-team hand-off instead of `count`); otherwise one linear_w8a8 call each.
void linear_w8a8_multi(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                       const Fp8WeightView* ws, const float* const* biases, float* const* ys,
                       int count, int64_t m);

/// Row-parallel part sums (Backend::linear_w8a8_partials): acc: [w.k_groups, m, n] raw FP32,
/// acc[g, i, j] = the path's sum over inputs [g * k / G, (g + 1) * k / G) of qa[i] . qw[j] (no
/// scales, no bias), the same sums linear_w8a8 adds in order before its epilogue.
void linear_w8a8_partials(const uint8_t* qa, const Fp8WeightView& w, float* acc, int64_t m,
                          W8A8Path path = W8A8Path::Auto);

/// y: [m, n] = linear_w8a8's epilogue over acc: [groups, m, n] summed in group order
/// (Backend::linear_w8a8_combine); w supplies the scales only. With acc from
/// linear_w8a8_partials (same path, groups == w.k_groups) y equals linear_w8a8's bit for bit.
void linear_w8a8_combine(const float* acc, int64_t groups, const float* a_scale,
                         ScaleGranularity a_granularity, const Fp8WeightView& w,
                         const float* bias, float* y, int64_t m);

namespace ref {
/// Plain reference of linear_w8a8: decode every code to FP32, FP32 accumulation in index order
/// within each of w.k_groups parts, the parts added in order, y = acc * (s_a * s_w) + bias.
void linear_w8a8(const uint8_t* qa, const float* a_scale, ScaleGranularity a_granularity,
                 const Fp8WeightView& w, const float* bias, float* y, int64_t m);
}  // namespace ref

}  // namespace octet

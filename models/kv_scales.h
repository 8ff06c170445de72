#pragma once
// Where FP8 KV cache scales come from: the checkpoint's tensors, a JSON scales file
// (--kv-scales-path), or amax of K/V over a calibration text (--calculate-kv-scales).
// A scale multiplies on dequantization (DESIGN.md "Numerics conventions"):
//   q = fp8(k / k_scale), k_hat = float(q) * k_scale; likewise v with v_scale.
// Every scale this file returns is FP32, finite and > 0. The engine chooses between sources
// (file > checkpoint > calculated) and prints the table.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/common/dtype.h"

namespace octet {

class HFCheckpoint;
struct QuantConfig;
struct DenseKVCache;

/// One layer's scales. Each vector has 1 element (per tensor: one scale for every KV head) or
/// num_kv_heads elements (per KV head, head h uses [h]). k_scale and v_scale may differ in
/// granularity (e.g. a per-tensor K and per-head V scale in a scales file).
struct LayerKVScales {
  std::vector<float> k_scale;
  std::vector<float> v_scale;
};

/// Reads the KV scales of every layer of an HF checkpoint. Per layer N, with
/// p = "model.layers.N.self_attn.", the tensors recognized are (vLLM's maybe_remap_kv_scale_name
/// and CompressedTensorsConfig.get_cache_scale accept the same set):
///   p + "k_scale",             p + "v_scale"              compressed-tensors / llm-compressor
///   p + "k_proj.k_scale",      p + "v_proj.v_scale"       NVIDIA ModelOpt
///   p + "k_proj.output_scale", p + "v_proj.output_scale"  older compressed-tensors, Quark
///   p + "attn.k_scale",        p + "attn.v_scale"         vLLM's own parameter names
///   p + "kv_scale"                                        legacy (AutoFP8): one scale, K and V
/// Shapes: per tensor [], [1], [1, 1] or [1, 1, 1]; per KV head [num_kv_heads],
/// [num_kv_heads, 1] or [num_kv_heads, 1, 1]. llm-compressor (compressed-tensors 0.19
/// initialize_qparams) writes [1] for kv_cache_scheme strategy "tensor" and
/// [num_kv_heads, 1, 1] for "attn_head", in the model's dtype. dtype F32, BF16 or F16
/// (converted to FP32). Variants found twice for one layer must hold equal values.
/// Returns [num_layers]: the layer's scales, or nullopt for a layer with no such tensor.
/// Throws ModelFileError naming the tensor (path = the file holding it) for: a dtype other than
/// F32/BF16/F16; a shape not listed above; a NaN, inf, zero or negative value; two variants with
/// different values for one layer; a K scale without a V scale or vice versa; a layer index
/// >= num_layers; a per-head scale when quant.kv_cache_scheme says strategy "tensor", or a
/// per-tensor one when it says "attn_head" (num_kv_heads > 1). Throws ModelFileError(dir +
/// "/config.json") when kv_cache_scheme is asymmetric (zero points are not supported; vLLM's
/// CompressedTensorsKVCacheMethod refuses it too).
std::vector<std::optional<LayerKVScales>> load_checkpoint_kv_scales(const HFCheckpoint& ckpt,
                                                                    const QuantConfig& quant,
                                                                    int64_t num_layers,
                                                                    int64_t num_kv_heads);

/// A scales file as read by load_kv_scales_file.
struct LayerScalesFile {
  std::string format;          // "octet" or "vllm-quantization-param" (the legacy schema)
  std::string kv_cache_dtype;  // as written ("fp8_e4m3", "float8_e4m3fn", ...); "" if absent
  std::optional<DType> dtype;  // kv_cache_dtype read: FP8_E4M3 or FP8_E5M2; nullopt if absent
  std::vector<LayerKVScales> layers;  // [num_layers], every layer present
};

/// Reads a KV scales file (--kv-scales-path). Two JSON formats:
///
/// octet's own (written by `octet calibrate`, easy to write by hand):
///   {"kv_cache_dtype": "fp8_e4m3",            optional: the cache dtype the scales are for,
///                                             fp8 | fp8_e4m3 | float8_e4m3fn (E4M3) or
///                                             fp8_e5m2 | float8_e5m2 (E5M2)
///    "model_type": "llama",                   optional, informative: any string
///    "layers": {"0": {"k_scale": 0.02, "v_scale": [0.01, 0.02]},
///               "1": {"k_scale": [0.03], "v_scale": 0.04}, ...}}
///   Every layer "0".."num_layers-1" exactly once (decimal, no leading zeros), each with exactly
///   the keys k_scale and v_scale; a scale is a number (per tensor) or an array of 1 or
///   num_kv_heads numbers. No other keys.
///
/// vLLM's legacy --quantization-param-path schema (vllm/model_executor/layers/quantization/
/// schema.py, QuantParamSchema; written by AMMO/ModelOpt's extract_scales for ROCm):
///   {"model_type": "llama", "kv_cache": {"dtype": "float8_e4m3fn",
///    "scaling_factor": {"0": {"0": 0.03, "1": 0.05, ...}}}}
///   scaling_factor maps tensor-parallel rank -> layer -> one per-tensor scale used for both K
///   and V. octet runs one rank: only rank "0" may be present. dtype must be "float8_e4m3fn" (as
///   vLLM asserts). The file is recognized by its top-level "kv_cache" key.
///
/// The file is read whole, at most kMaxScalesFileBytes (config/file_read.h; /dev/zero or a
/// FIFO is an error, not an endless read).
///
/// Errors: ModelFileError(path, problem) naming the layer and key for an unreadable or too large
/// file, malformed JSON, a duplicate key, a missing layer, a layer index >= num_layers or not a
/// decimal index, an unknown key, a wrong head count, a value that is not a number or is NaN,
/// infinite, zero or negative (also after rounding to FP32), an unknown kv_cache_dtype, a
/// kv_cache_dtype other than `cache_dtype` when that is given (E4M3 scales on an E5M2 cache or
/// the reverse: the scales' range is wrong by 128x), and for the legacy schema a dtype other
/// than float8_e4m3fn or a rank other than "0". Bad num_layers / num_kv_heads (< 1):
/// std::invalid_argument.
LayerScalesFile load_kv_scales_file(const std::string& path, int64_t num_layers,
                                    int64_t num_kv_heads,
                                    std::optional<DType> cache_dtype = std::nullopt);

/// Headroom of calculated scales: amax maps to fp8_max / kCalculatedKVScaleHeadroom (224 for
/// E4M3, 28672 for E5M2), so K/V on other text may be up to 2x the calibration amax before they
/// saturate. The price is one binade at the bottom of FP8's range (E4M3 has ~15 normal binades;
/// relative precision within the normal range does not depend on the scale). vLLM's
/// calculate_kv_scales divides amax by K_SCALE_CONSTANT = 200 and V_SCALE_CONSTANT = 100
/// (vllm/envs.py defaults), i.e. a headroom of 2.24x for K and 4.48x for V over E4M3's 448.
/// Measured on SmolLM2-135M-Instruct (FP32, per KV head, kv_calibration_text() = 1061 tokens):
/// on 1024 tokens of GPL-3, octet's llama.cpp, DESIGN.md and random integers, amax exceeded the
/// calibration amax in up to 40 of 90 heads, by at most 1.34x (K) and 1.48x (V): 2x covers it.
inline constexpr float kCalculatedKVScaleHeadroom = 2.0f;

/// Scales from the K/V a forward pass wrote to `cache` (k, v: [num_layers, max_tokens,
/// num_kv_heads, head_dim] FP32): per layer, amax = max |x| over positions 0..num_tokens-1 and
/// over each KV head (per_head) or all heads (per tensor), separately for K and V, and
///   scale = amax / (fp8_max / kCalculatedKVScaleHeadroom), fp8_max = 448 (FP8_E4M3) or 57344
///   (FP8_E5M2).
/// A head (or layer) whose amax is 0, or so small that the scale is not a normal FP32 number,
/// gets scale 1.0 (all its values quantize to ~0 whatever the scale).
/// Returns [num_layers]; each k_scale / v_scale has num_kv_heads elements (per_head) or 1.
/// Throws std::invalid_argument when dtype is not FP8, num_tokens is not in [1, max_tokens], or
/// the cache's sizes do not match the dimensions; std::runtime_error naming layer, head and
/// position when a K or V value is NaN or infinite (the model, not the scale, is broken).
/// Reference: vLLM Attention.calc_kv_scales (vllm/attention/layer.py).
std::vector<LayerKVScales> calculate_kv_scales(const DenseKVCache& cache, int64_t num_tokens,
                                               int64_t num_layers, int64_t num_kv_heads,
                                               int64_t head_dim, DType dtype,
                                               bool per_head);

/// Built-in calibration text for --calculate-kv-scales (~400 words: English prose, a dialogue,
/// C++ and Python code, JSON, a table of numbers, a list), written for octet. Its K/V amax
/// should cover the kinds of text a chat model sees; NUL-terminated, ASCII only.
const char* kv_calibration_text();

}  // namespace octet

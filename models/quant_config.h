#pragma once
// QuantConfig: how a checkpoint's linear layers are quantized, parsed from config.json
// `quantization_config`:
//  - compressed-tensors (quant_method "compressed-tensors", format "float-quantized" or
//    "naive-quantized"): config_groups (any key) with targets, weights {num_bits 8, type float,
//    strategy channel|tensor, symmetric}, input_activations {dynamic true + strategy token, or
//    dynamic false + strategy tensor} or null (weight-only), `ignore` (names or "re:" regexes),
//    kv_cache_scheme (kept for the KV cache). Spec: github.com/neuralmagic/compressed-tensors.
//  - quant_method "fp8" (HF transformers / vLLM Fp8Config): activation_scheme dynamic|static,
//    per-tensor weight_scale, ignored_layers / modules_to_not_convert.
//  - none: an unquantized checkpoint (octet may quantize online at load).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/common/dtype.h"

namespace octet {

enum class ActivationScheme {
  None,             // weight-only or unquantized: activations stay FP32
  DynamicPerToken,  // FP8_DYNAMIC: scale per token computed at run time
  StaticPerTensor,  // input_scale tensor from the checkpoint
};

/// compressed-tensors kv_cache_scheme, kept for the KV cache issue.
struct KVCacheScheme {
  int num_bits = 8;
  std::string type = "float";
  std::string strategy = "tensor";  // tensor | attn_head
  bool dynamic = false;
  bool symmetric = true;
};

/// The "re:" entries of a parsed QuantConfig, compiled once (models/bounded_regex.h).
struct QuantPatterns;

struct QuantConfig {
  std::string quant_method = "none";  // "none" | "compressed-tensors" | "fp8"
  bool weights_fp8 = false;           // linear weights stored / computed as E4M3
  ScaleGranularity weight_granularity = ScaleGranularity::PerRow;
  ActivationScheme activation_scheme = ActivationScheme::None;
  std::vector<std::string> targets;   // e.g. {"Linear"}
  std::vector<std::string> ignore;    // module names or "re:<regex>", e.g. "lm_head"
  std::optional<KVCacheScheme> kv_cache_scheme;
  /// Set by from_hf_config from targets and ignore as parsed: exact names hashed, every "re:"
  /// entry compiled once, with the config path and key for errors. Null (a QuantConfig built by
  /// hand): is_quantized compiles the lists on each call. Code that edits targets or ignore
  /// after parsing resets it.
  std::shared_ptr<const QuantPatterns> patterns;

  /// Distinct "re:" entries accepted in one quantization_config (each is a compiled program).
  static constexpr size_t kMaxRegexEntries = 1024;

  /// Parses config.json's "quantization_config" (absent -> quant_method "none").
  /// Throws ModelFileError(config_path, "quantization_config: <key>: problem") for an unknown
  /// quant_method, format, strategy or type, num_bits != 8, a config group without targets, a
  /// value of the wrong JSON type, a scheme octet cannot run (e.g. int8 weights), or a "re:"
  /// entry that PCRE2 cannot compile within BoundedRegex's limits (length, nesting).
  static QuantConfig from_hf_config(const nlohmann::json& config, const std::string& config_path);

  /// Whether module `name` (e.g. "model.layers.0.mlp.down_proj") is quantized: matched by a
  /// target and by no `ignore` entry. Target "Linear" matches the linear modules of
  /// LlamaForCausalLM (names ending in "_proj", and "lm_head"); other targets and ignore entries
  /// are exact module names or "re:<regex>" matched as Python's re.match does (anchored at the
  /// start only), as compressed-tensors and vLLM match them. quant_method "fp8" never quantizes
  /// lm_head (vLLM's Fp8Config applies to LinearBase layers only). Regexes run on PCRE2 with
  /// match limits (BoundedRegex); a match that hits a limit throws ModelFileError(config path,
  /// "quantization_config: <key>: regex ... on '<module>': match limit exceeded ...") rather
  /// than counting as a non-match.
  bool is_quantized(const std::string& module_name) const;
};

}  // namespace octet

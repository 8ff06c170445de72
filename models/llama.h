#pragma once
// The Llama-family decoder (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM):
//   x = embed(tokens)
//   per layer: h = x + o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))), n = rms(x)
//              x = h + down(silu(gate(rms(h))) * up(rms(h)))
//   logits = lm_head(rms(x))          (lm_head = embed when tie_word_embeddings)
// Mistral and Qwen2 differ only in what the config sets: per-layer sliding windows
// (ModelConfig::layer_sliding_window) and, for Qwen2, q/k/v biases (LinearWeight::bias).
// Source: Touvron et al. 2023 (LLaMA), HF transformers modeling_{llama,mistral,qwen2}.py.
// Linear layers run in FP32 (quantization "none", the reference that goldens check) or FP8 W8A8
// (models/linear.h); norms, RoPE, attention and the residual stream are FP32 throughout.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/ops_ref.h"
#include "models/linear.h"
#include "models/model_config.h"
#include "models/quant_config.h"
#include "models/forward_batch.h"
#include "models/paged_kv_cache.h"

namespace octet {

class GGUFFile;
class HFCheckpoint;
class WeightSource;

/// How to load weights. quantization: "auto" (use the checkpoint's FP8 weights when it has
/// them, else quantize online to FP8), "fp8" (same as auto), "none" (FP32 everything; an FP8
/// checkpoint's weights are dequantized, w * scale). weight_granularity applies to online
/// quantization (per output channel by default, or one scale per tensor).
struct LoadOptions {
  std::string quantization = "auto";
  ScaleGranularity weight_granularity = ScaleGranularity::PerRow;
};

struct LlamaLayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  LinearWeight q_proj;           // [num_heads*head_dim, hidden]
  LinearWeight k_proj;           // [num_kv_heads*head_dim, hidden]
  LinearWeight v_proj;           // [num_kv_heads*head_dim, hidden]
  LinearWeight o_proj;           // [hidden, num_heads*head_dim]
  std::vector<float> ffn_norm;   // [hidden]
  LinearWeight gate_proj;        // [intermediate, hidden]
  LinearWeight up_proj;          // [intermediate, hidden]
  LinearWeight down_proj;        // [hidden, intermediate]
};

struct LlamaWeights {
  std::vector<float> embed_tokens;  // [vocab, hidden] FP32 (rows are looked up)
  std::vector<float> norm;          // [hidden]
  LinearWeight lm_head;             // [vocab, hidden]: FP32 unquantized, else BF16 or FP8
  std::vector<LlamaLayerWeights> layers;
};

/// Contiguous FP32 KV cache of one sequence (reference path; the paged FP8 cache is the
/// engine's). k, v: [num_layers, max_tokens, num_kv_heads, head_dim].
struct DenseKVCache {
  int64_t max_tokens = 0;
  std::vector<float> k;
  std::vector<float> v;
};

class LlamaModel {
 public:
  /// Loads config and weights from a GGUF file (dequantized to FP32, then quantized per
  /// `options`; biases stay FP32). Throws ModelFileError naming the file for an unsupported
  /// architecture, a missing tensor (a layer's bias included when the config has biases), a
  /// tensor whose shape does not match the config, or an unsupported type.
  static LlamaModel load(const GGUFFile& file, const LoadOptions& options = {});
  /// Loads a Hugging Face checkpoint (config.json + safetensors), FP8 or not. Additionally
  /// throws ModelFileError for a malformed quantization_config or quantized tensors
  /// (missing/ill-shaped/non-finite scales).
  static LlamaModel load(const HFCheckpoint& checkpoint, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const QuantConfig& quant_config() const { return quant_; }
  RopeLayout rope_layout() const { return rope_layout_; }
  const LlamaWeights& weights() const { return weights_; }
  /// "fp8-w8a8-dynamic", "fp8-w8a8-static", "fp32", ... for logs and benchmarks.
  std::string linear_format() const;
  /// Bytes of weights read per decode step (every linear + lm_head; embedding rows excluded).
  int64_t decode_weight_bytes() const;

  /// A zeroed cache for up to max_tokens positions (bytes: 2*layers*max_tokens*kv_dim*4).
  DenseKVCache new_cache(int64_t max_tokens) const;

  /// Runs n tokens at positions start_pos..start_pos+n-1 (causal; earlier positions must be in
  /// `cache`), writes their K/V to `cache`, and returns logits [n, vocab] when all_logits, else
  /// [1, vocab] for the last token. Throws std::invalid_argument for a token id outside
  /// [0, vocab) or when start_pos + n exceeds cache.max_tokens.
  std::vector<float> forward(const int32_t* tokens, int64_t n, int64_t start_pos,
                             DenseKVCache& cache, bool all_logits) const;

  /// One engine step over the paged KV cache (models/llama_paged.cpp): runs batch.token_ids
  /// at batch.positions, writes their K/V to batch.slot_mapping in `cache` (in each layer's
  /// dtype and scales), attends over the block tables with each layer's sliding window, and
  /// returns logits [batch.logits_indices.size(), vocab] (FP32) for the rows named there.
  /// Batch-invariant: a token's logits depend only on its own sequence. Throws
  /// std::invalid_argument for token ids outside the vocabulary or inconsistent batch arrays.
  std::vector<float> forward(const ForwardBatch& batch, PagedKVCache& cache) const;

 private:
  static LlamaModel build(const WeightSource& src, ModelConfig config, QuantConfig quant,
                          const LoadOptions& options);

  /// A forward's KV store and attention for one layer: q [n, heads*head_dim], k and v
  /// [n, kv_heads*head_dim] after RoPE -> attn [n, heads*head_dim].
  using AttendFn = std::function<void(int64_t layer, const float* q, const float* k,
                                      const float* v, float* attn)>;
  /// The recipe both forwards share (file comment): embeddings of tokens [n], per layer norm,
  /// q/k/v, RoPE at positions [n], `attend`, o_proj and residual, norm, SwiGLU MLP and residual;
  /// then the final norm and lm_head for the token indices `rows`. Returns logits
  /// [rows.size(), vocab]. Every step but `attend` is per token, so rows never mix.
  std::vector<float> run_decoder(const int32_t* tokens, int64_t n, const int64_t* positions,
                                 const AttendFn& attend, const std::vector<int64_t>& rows) const;

  ModelConfig config_;
  QuantConfig quant_;
  LlamaWeights weights_;
  std::vector<float> inv_freq_;  // [rotary_dim/2]
  RopeLayout rope_layout_ = RopeLayout::AdjacentPairs;
};

}  // namespace octet

#pragma once
// The Llama-family decoder in plain FP32: the readable reference forward pass that every later
// kernel and execution path (FP8 W8A8, paged KV, CUDA) is tested against.
//   x = embed(tokens)
//   per layer: h = x + o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))), n = rms(x)
//              x = h + down(silu(gate(rms(h))) * up(rms(h)))
//   logits = lm_head(rms(x))          (lm_head = embed when tie_word_embeddings)
// Source: Touvron et al. 2023 (LLaMA), HF transformers modeling_llama.py.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/ops_ref.h"
#include "models/model_config.h"

namespace octet {

class GGUFFile;

/// FP32 weights of one decoder layer. Linear weights are [out, in] row-major.
struct LlamaLayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  std::vector<float> q_proj;     // [num_heads*head_dim, hidden]
  std::vector<float> k_proj;     // [num_kv_heads*head_dim, hidden]
  std::vector<float> v_proj;     // [num_kv_heads*head_dim, hidden]
  std::vector<float> o_proj;     // [hidden, num_heads*head_dim]
  std::vector<float> ffn_norm;   // [hidden]
  std::vector<float> gate_proj;  // [intermediate, hidden]
  std::vector<float> up_proj;    // [intermediate, hidden]
  std::vector<float> down_proj;  // [hidden, intermediate]
};

struct LlamaWeights {
  std::vector<float> embed_tokens;  // [vocab, hidden]
  std::vector<float> norm;          // [hidden]
  std::vector<float> lm_head;       // [vocab, hidden]; empty when tied to embed_tokens
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
  /// Loads config and weights from a GGUF file, dequantizing every tensor to FP32.
  /// Throws ModelFileError naming the file for an unsupported architecture, a missing tensor,
  /// a tensor whose shape does not match the config, or an unsupported tensor type.
  static LlamaModel load(const GGUFFile& file);

  const ModelConfig& config() const { return config_; }
  ref::RopeLayout rope_layout() const { return rope_layout_; }

  /// A zeroed cache for up to max_tokens positions (bytes: 2*layers*max_tokens*kv_dim*4).
  DenseKVCache new_cache(int64_t max_tokens) const;

  /// Runs n tokens at positions start_pos..start_pos+n-1 (causal; earlier positions must be in
  /// `cache`), writes their K/V to `cache`, and returns logits [n, vocab] when all_logits, else
  /// [1, vocab] for the last token. Throws std::invalid_argument for a token id outside
  /// [0, vocab) or when start_pos + n exceeds cache.max_tokens.
  std::vector<float> forward(const int32_t* tokens, int64_t n, int64_t start_pos,
                             DenseKVCache& cache, bool all_logits) const;

 private:
  ModelConfig config_;
  LlamaWeights weights_;
  std::vector<float> inv_freq_;  // [rotary_dim/2]
  ref::RopeLayout rope_layout_ = ref::RopeLayout::AdjacentPairs;
};

}  // namespace octet

#pragma once
// ModelConfig: the architecture hyper-parameters of a Llama-style decoder (Llama, Mistral, Qwen2),
// named as in Hugging Face's config.json (LlamaConfig, MistralConfig, Qwen2Config), read from
// GGUF metadata ("<arch>.block_count", ...; see
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md#llm).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace octet {

class GGUFFile;

/// RoPE frequency scaling (HF `rope_scaling`). None: inv_freq_i = theta^(-2i/d).
/// Linear: positions divided by factor. Llama3: Meta's wavelength-dependent scaling
/// (HF modeling_rope_utils._compute_llama3_parameters). FreqFactors: per-frequency divisors
/// stored in the GGUF tensor `rope_freqs.weight` (llama.cpp writes Llama 3.x scaling this way).
struct RopeScaling {
  enum class Type { None, Linear, Llama3, FreqFactors };
  Type type = Type::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_max_position_embeddings = 8192;
  std::vector<float> freq_factors;  // [rot_dim/2], only for FreqFactors
};

struct ModelConfig {
  std::string architecture;  // HF model_type or GGUF general.architecture: llama, mistral, qwen2
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;          // hidden_size / num_attention_heads unless stored
  int64_t rotary_dim = 0;        // dims rotated per head (= head_dim for Llama)
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 2048;
  /// Biases (LinearWeight::bias): q/k/v projections (Qwen2 always; Llama `attention_bias`),
  /// o_proj (Llama `attention_bias`), gate/up/down (Llama `mlp_bias`). GGUF: the tensors
  /// blk.0.attn_q.bias, blk.0.attn_output.bias, blk.0.ffn_up.bias exist.
  bool qkv_bias = false;
  bool o_proj_bias = false;
  bool mlp_bias = false;
  /// Per layer: attention window in tokens, 0 = full attention. [num_hidden_layers]
  /// A window W lets the query at position p see keys max(0, p-W+1)..p (W keys, itself
  /// included), as transformers' masking_utils.sliding_window_overlay (kv > p - W) and
  /// llama.cpp's is_masked_swa (p - kv >= W is masked).
  std::vector<int64_t> layer_sliding_window;

  /// Reads "general.architecture" ("llama" or "qwen2"; llama.cpp converts Mistral to "llama")
  /// and "<arch>.*" keys. rope_theta defaults to 10000 when the file does not store it
  /// (llama.cpp's default). Sliding windows, where the file has them (llama.cpp's converters
  /// write none for llama or qwen2): "<arch>.attention.sliding_window" W (0 = none) and
  /// "<arch>.attention.sliding_window_pattern", either a bool per layer (true = W) or a period n
  /// (llama.cpp's set_swa_pattern: layer i slides iff n == 0 or i % n < n - 1); W without a
  /// pattern slides every layer. Throws ModelFileError naming the file for an unsupported
  /// architecture or missing/inconsistent values (heads not dividing hidden, a pattern whose
  /// length is not block_count, sliding layers without a window, qwen2 without q/k/v biases).
  static ModelConfig from_gguf(const GGUFFile& file);

  /// Reads a Hugging Face config.json of LlamaForCausalLM, MistralForCausalLM or
  /// Qwen2ForCausalLM (model_type llama, mistral, qwen2; when both keys are given they must
  /// agree): hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads (default =
  /// heads), head_dim (default hidden/heads), intermediate_size, vocab_size, rms_norm_eps,
  /// rope_theta (default 10000), rope_scaling (linear, llama3; rope_type or legacy type),
  /// tie_word_embeddings (default false), max_position_embeddings (default 2048, Mistral
  /// 131072, Qwen2 32768), hidden_act (silu only), attention_bias / mlp_bias (Llama).
  /// Windows as transformers 5 applies them (see layer_sliding_window):
  ///   llama:   none (LlamaAttention has no window);
  ///   mistral: `sliding_window` on every layer (absent: MistralConfig's default 4096; null:
  ///            none); MistralModel ignores layer_types, so layer_types that disagree with
  ///            that are an error rather than a guess;
  ///   qwen2:   W = `sliding_window` if `use_sliding_window` (default false) else none; layer i
  ///            slides iff layer_types[i] == "sliding_attention", or, without layer_types, iff
  ///            W is set and i >= max_window_layers (default 28).
  /// `layer_types` (any architecture) must list num_hidden_layers entries of "full_attention"
  /// or "sliding_attention" ("attention" is read as full, transformers' legacy name); llama
  /// layer_types naming sliding layers are an error (transformers ignores them, vLLM does not).
  /// Throws ModelFileError(config_path, problem naming the key) for an unsupported
  /// `architectures` entry or model_type, or missing/invalid values (e.g. sliding_window not a
  /// positive integer, sliding_attention layers without a window).
  static ModelConfig from_hf_config(const nlohmann::json& config, const std::string& config_path);

  /// RoPE inverse frequencies [rotary_dim/2] with rope_scaling applied (Linear divides every
  /// frequency by factor, which equals dividing positions by it).
  std::vector<float> rope_inv_freq() const;
};

}  // namespace octet

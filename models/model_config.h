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
  std::string architecture;  // HF model_type or GGUF general.architecture: llama, mistral, qwen2,
                             // qwen3, gemma3
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
  /// Gemma 3 and Qwen3 switches, all off for Llama, Mistral and Qwen2 (HF modeling_gemma3.py,
  /// modeling_qwen3.py; llama.cpp's gemma3 and qwen3 graphs):
  /// qk_norm: per-head RMSNorm of q and k before RoPE (self_attn.q_norm / k_norm, [head_dim]).
  bool qk_norm = false;
  /// Gemma's four norms per layer: the attention output goes through post_attention_layernorm
  /// before the residual add, the MLP input through pre_feedforward_layernorm and its output
  /// through post_feedforward_layernorm before the residual add.
  bool sandwich_norms = false;
  /// The MLP activation (HF hidden_act / hidden_activation): "silu" (SwiGLU) or
  /// "gelu_pytorch_tanh" (GeGLU with tanh-approximated GELU, Gemma).
  std::string hidden_act = "silu";
  /// Embeddings are multiplied by this (Gemma: sqrt(hidden_size), rounded to FP32).
  float embedding_multiplier = 1.0f;
  /// Attention scores are scaled by query_pre_attn_scalar^-0.5; 0 = head_dim (the usual).
  float query_pre_attn_scalar = 0.0f;
  /// RoPE base of the sliding-window layers (Gemma 3's rope_local_base_freq, 10000); 0 = the
  /// same rope_theta as the full layers. rope_scaling applies to the full layers only.
  float rope_local_base_freq = 0.0f;
  /// HF Gemma checkpoints store RMSNorm weights w and multiply by (1 + w); the loader adds the
  /// 1 (llama.cpp's GGUF converter already did, so GGUF weights are used as stored).
  bool norm_weight_offset = false;

  /// config.json's bos_token_id and eos_token_id (an id or a list), -1 / empty when absent or
  /// null (GGUF: the tokenizer's, not kept here). Each in [0, vocab_size).
  int64_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;

  /// Documented caps of validate(): generous bounds that admit every released Llama-style model
  /// (Llama 3.1 405B: hidden 16384, 126 layers, 128 heads, intermediate 53248) while keeping
  /// every product of sizes far from int64 overflow.
  static constexpr int64_t kMaxHiddenSize = int64_t{1} << 20;
  static constexpr int64_t kMaxIntermediateSize = int64_t{1} << 22;
  static constexpr int64_t kMaxLayers = 4096;
  static constexpr int64_t kMaxHeads = int64_t{1} << 16;  // attention and KV heads
  static constexpr int64_t kMaxHeadDim = int64_t{1} << 14;
  static constexpr int64_t kMaxVocabSize = (int64_t{1} << 31) - 1;  // token ids are int32
  /// max_position_embeddings, sliding_window, rope_scaling.original_max_position_embeddings.
  static constexpr int64_t kMaxPositions = int64_t{1} << 28;
  /// Total parameters (embeddings, lm_head, every layer): 2^42, about 4.4 trillion.
  static constexpr int64_t kMaxParameters = int64_t{1} << 42;

  /// The one dimension check, run by from_hf_config and from_gguf before anything is sized from
  /// the values: every size in [1, its cap] (head_dim, rotary_dim even, rotary_dim <= head_dim,
  /// num_key_value_heads dividing num_attention_heads), the parameter count (computed with
  /// overflow checks) <= kMaxParameters, rms_norm_eps, rope_theta and rope_scaling factors
  /// finite, positive and normal as float, the RoPE frequencies they imply finite and positive,
  /// layer_sliding_window empty or one entry per layer in [0, kMaxPositions], bos/eos ids below
  /// vocab_size. Throws ModelFileError(path, "<field> ...") naming the config.json field, or
  /// with `gguf_arch` non-empty the GGUF key ("<arch>.embedding_length is ...").
  void validate(const std::string& path, const std::string& gguf_arch = "") const;

  /// The parameter count of a Llama-style decoder of this shape (q/k/v/o, gate/up/down, norms,
  /// biases, embeddings and lm_head unless tied), or -1 when it would exceed kMaxParameters
  /// (computed without overflow for any non-negative sizes).
  int64_t num_parameters() const;

  /// Reads "general.architecture" ("llama", "qwen2", "qwen3" or "gemma3"; llama.cpp converts
  /// Mistral to "llama"; gemma3: see the Gemma switches above)
  /// and "<arch>.*" keys. rope_theta defaults to 10000 when the file does not store it
  /// (llama.cpp's default). Sliding windows, where the file has them (llama.cpp's converters
  /// write none for llama or qwen2): "<arch>.attention.sliding_window" W (0 = none) and
  /// "<arch>.attention.sliding_window_pattern", either a bool per layer (true = W) or a period n
  /// (llama.cpp's set_swa_pattern: layer i slides iff n == 0 or i % n < n - 1); W without a
  /// pattern slides every layer. Throws ModelFileError naming the file for an unsupported
  /// architecture or missing/inconsistent values (heads not dividing hidden, a pattern whose
  /// length is not block_count, sliding layers without a window, qwen2 without q/k/v biases)
  /// and for anything validate() rejects.
  static ModelConfig from_gguf(const GGUFFile& file);

  /// Reads a Hugging Face config.json of LlamaForCausalLM, MistralForCausalLM or
  /// Qwen2ForCausalLM, Qwen3ForCausalLM (model_type llama, mistral, qwen2, qwen3; qwen3 as
  /// qwen2 without biases unless attention_bias, with q/k norms; when both keys are given they must
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
  /// bos_token_id / eos_token_id: an id or a list of ids (validated; see eos_token_ids).
  /// Throws ModelFileError(config_path, problem naming the key) for an unsupported
  /// `architectures` entry or model_type, missing/invalid values (e.g. sliding_window not a
  /// positive integer, sliding_attention layers without a window, a value of the wrong JSON
  /// type) and for anything validate() rejects.
  static ModelConfig from_hf_config(const nlohmann::json& config, const std::string& config_path);

  /// RoPE inverse frequencies [rotary_dim/2] with rope_scaling applied (Linear divides every
  /// frequency by factor, which equals dividing positions by it).
  std::vector<float> rope_inv_freq() const;
  /// Those of the sliding-window layers: base rope_local_base_freq, unscaled (Gemma 3); equal
  /// to rope_inv_freq() when rope_local_base_freq is 0.
  std::vector<float> rope_local_inv_freq() const;
  /// The softmax scale: query_pre_attn_scalar^-0.5, or head_dim^-0.5 when it is 0.
  float attention_scale() const;
};

}  // namespace octet

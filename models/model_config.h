#pragma once
// ModelConfig: the architecture hyper-parameters of a Llama-style decoder, named as in Hugging
// Face's config.json (LlamaConfig), read from GGUF metadata ("<arch>.block_count", ...; see
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
  std::string architecture;  // "llama"
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
  /// Per layer: attention window in tokens, 0 = full attention. [num_hidden_layers]
  std::vector<int64_t> layer_sliding_window;

  /// Reads "general.architecture" and "<arch>.*" keys. rope_theta defaults to 10000 when the
  /// file does not store it (llama.cpp's default). Throws ModelFileError naming the file for an
  /// unsupported architecture or missing/inconsistent values (e.g. heads not dividing hidden).
  static ModelConfig from_gguf(const GGUFFile& file);

  /// Reads a Hugging Face config.json (LlamaForCausalLM): hidden_size, num_hidden_layers,
  /// num_attention_heads, num_key_value_heads (default = heads), head_dim (default
  /// hidden/heads), intermediate_size, vocab_size, rms_norm_eps, rope_theta (default 10000),
  /// rope_scaling (linear, llama3; rope_type or legacy type), tie_word_embeddings (default
  /// false), max_position_embeddings. Throws ModelFileError(config_path, problem naming the key)
  /// for an unsupported `architectures` entry or model_type, or missing/invalid values.
  static ModelConfig from_hf_config(const nlohmann::json& config, const std::string& config_path);

  /// RoPE inverse frequencies [rotary_dim/2] with rope_scaling applied (Linear divides every
  /// frequency by factor, which equals dividing positions by it).
  std::vector<float> rope_inv_freq() const;
};

}  // namespace octet

#include "models/model_config.h"

#include <cmath>

#include "models/gguf.h"

namespace octet {

namespace {

const char* kSupportedArchitectures[] = {"llama"};

bool is_supported(const std::string& arch) {
  for (const char* a : kSupportedArchitectures)
    if (arch == a) return true;
  return false;
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const GGUFFile& file) {
  ModelConfig c;
  c.architecture = file.get_string("general.architecture");
  if (!is_supported(c.architecture))
    throw ModelFileError(file.path(), "unsupported architecture '" + c.architecture +
                                          "' (supported: llama)");
  const std::string a = c.architecture + ".";
  c.hidden_size = file.get_int(a + "embedding_length");
  c.num_hidden_layers = file.get_int(a + "block_count");
  c.num_attention_heads = file.get_int(a + "attention.head_count");
  c.num_key_value_heads = file.get_int(a + "attention.head_count_kv", c.num_attention_heads);
  c.intermediate_size = file.get_int(a + "feed_forward_length");
  c.rms_norm_eps = static_cast<float>(file.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = static_cast<float>(file.get_float(a + "rope.freq_base", 10000.0));
  c.max_position_embeddings = file.get_int(a + "context_length", 2048);

  auto bad = [&](const std::string& what) { throw ModelFileError(file.path(), what); };
  if (c.hidden_size <= 0 || c.num_hidden_layers <= 0 || c.num_attention_heads <= 0 ||
      c.num_key_value_heads <= 0 || c.intermediate_size <= 0)
    bad("non-positive model dimension in " + a + "* metadata");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    bad("attention.head_count " + std::to_string(c.num_attention_heads) +
        " is not a multiple of attention.head_count_kv " + std::to_string(c.num_key_value_heads));
  c.head_dim = file.get_int(a + "attention.key_length", 0);
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      bad("embedding_length is not a multiple of attention.head_count");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.rotary_dim = file.get_int(a + "rope.dimension_count", c.head_dim);
  if (c.rotary_dim <= 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
    bad("rope.dimension_count " + std::to_string(c.rotary_dim) + " is invalid for head_dim " +
        std::to_string(c.head_dim));

  // vocab: <arch>.vocab_size, else the tokenizer's token count, else token_embd's rows.
  c.vocab_size = file.get_int(a + "vocab_size", 0);
  if (c.vocab_size == 0) {
    if (const GGUFTensorInfo* t = file.find_tensor("token_embd.weight"); t && t->dims.size() == 2)
      c.vocab_size = t->dims[1];
  }
  if (c.vocab_size <= 0) bad("cannot determine vocab_size");
  c.tie_word_embeddings = file.find_tensor("output.weight") == nullptr;

  // rope scaling
  const std::string scaling = file.get_string(a + "rope.scaling.type", "none");
  if (const GGUFTensorInfo* f = file.find_tensor("rope_freqs.weight")) {
    if (f->num_elements() != c.rotary_dim / 2)
      bad("rope_freqs.weight has " + std::to_string(f->num_elements()) + " values, expected " +
          std::to_string(c.rotary_dim / 2));
    c.rope_scaling.type = RopeScaling::Type::FreqFactors;
    c.rope_scaling.freq_factors = file.dequantize(*f);
  } else if (scaling == "linear") {
    c.rope_scaling.type = RopeScaling::Type::Linear;
    c.rope_scaling.factor = static_cast<float>(file.get_float(a + "rope.scaling.factor"));
    if (!(c.rope_scaling.factor > 0.0f)) bad("rope.scaling.factor must be positive");
  } else if (scaling != "none") {
    bad("unsupported rope.scaling.type '" + scaling + "'");
  }

  if (c.max_position_embeddings <= 0)
    bad("context_length " + std::to_string(c.max_position_embeddings) + " must be positive");
  if (!(c.rms_norm_eps > 0.0f) || !std::isfinite(c.rms_norm_eps))
    bad("attention.layer_norm_rms_epsilon must be a finite positive number");
  if (!(c.rope_theta > 0.0f) || !std::isfinite(c.rope_theta))
    bad("rope.freq_base must be a finite positive number");
  // Every layer has tensors: a block_count beyond them is a corrupt header, caught before
  // anything is allocated per layer.
  if (!file.find_tensor("blk." + std::to_string(c.num_hidden_layers - 1) + ".attn_norm.weight"))
    bad("block_count is " + std::to_string(c.num_hidden_layers) + " but the file has no tensor "
        "blk." + std::to_string(c.num_hidden_layers - 1) + ".attn_norm.weight");
  c.layer_sliding_window.assign(c.num_hidden_layers, 0);
  return c;
}

std::vector<float> ModelConfig::rope_inv_freq() const {
  const int64_t half = rotary_dim / 2;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    // HF: 1 / theta ** (arange(0, dim, 2).float() / dim), computed in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    inv[i] = 1.0f / std::pow(rope_theta, exponent);
  }
  switch (rope_scaling.type) {
    case RopeScaling::Type::None:
      break;
    case RopeScaling::Type::Linear:
      for (int64_t i = 0; i < half; ++i) inv[i] /= rope_scaling.factor;
      break;
    case RopeScaling::Type::FreqFactors:
      for (int64_t i = 0; i < half; ++i) inv[i] /= rope_scaling.freq_factors[i];
      break;
    case RopeScaling::Type::Llama3: {
      // Meta Llama 3.1: wavelengths above low_freq_wavelen are divided by factor, below
      // high_freq_wavelen kept, and smoothly interpolated in between.
      const float old_ctx = static_cast<float>(rope_scaling.original_max_position_embeddings);
      const float low_wavelen = old_ctx / rope_scaling.low_freq_factor;
      const float high_wavelen = old_ctx / rope_scaling.high_freq_factor;
      const float pi = 3.14159265358979323846f;
      for (int64_t i = 0; i < half; ++i) {
        const float wavelen = 2.0f * pi / inv[i];
        if (wavelen > low_wavelen) {
          inv[i] = inv[i] / rope_scaling.factor;
        } else if (wavelen >= high_wavelen) {
          const float smooth = (old_ctx / wavelen - rope_scaling.low_freq_factor) /
                               (rope_scaling.high_freq_factor - rope_scaling.low_freq_factor);
          inv[i] = (1.0f - smooth) * inv[i] / rope_scaling.factor + smooth * inv[i];
        }
      }
      break;
    }
  }
  return inv;
}

}  // namespace octet

#include "models/model_config.h"

#include <cmath>

#include "models/gguf.h"
#include "models/model_file_error.h"

namespace octet {

namespace {

// llama.cpp writes Mistral as "llama" (Q/K permuted); qwen2 keeps HF's half-split Q/K rows.
// gemma3 and qwen3 keep HF's rows too (llama.cpp rotates them as NEOX).
const char* kSupportedArchitectures[] = {"llama", "qwen2", "qwen3", "gemma3"};

bool is_supported(const std::string& arch) {
  for (const char* a : kSupportedArchitectures)
    if (arch == a) return true;
  return false;
}

// Per-layer windows from "<arch>.attention.sliding_window" and ".sliding_window_pattern" (see
// ModelConfig::from_gguf; llama.cpp's llama_model_base::load_swa_pattern and
// llama_hparams::set_swa_pattern with dense_first = false).
std::vector<int64_t> gguf_layer_windows(const GGUFFile& file, const std::string& a,
                                        int64_t num_layers) {
  auto bad = [&](const std::string& what) { throw ModelFileError(file.path(), what); };
  const std::string window_key = a + "attention.sliding_window";
  const std::string pattern_key = a + "attention.sliding_window_pattern";
  const int64_t window = file.get_int(window_key, 0);
  if (window < 0) bad(window_key + " is " + std::to_string(window) + ", must be >= 0");
  std::vector<bool> sliding(size_t(num_layers), true);  // a window without a pattern: all
  // llama.cpp's gemma3 sets the pattern in code (set_swa_pattern(6)): every 6th layer is full.
  if (a == "gemma3." && !file.find(pattern_key))
    for (int64_t i = 0; i < num_layers; ++i) sliding[size_t(i)] = i % 6 < 5;
  if (const GGUFValue* p = file.find(pattern_key)) {
    if (p->type == GGUFValueType::ARRAY) {
      const GGUFArray& items = p->array();
      if (int64_t(items.size()) != num_layers)
        bad(pattern_key + " has " + std::to_string(items.size()) +
            " entries but block_count is " + std::to_string(num_layers));
      for (size_t i = 0; i < items.size(); ++i) {
        if (items[i].type == GGUFValueType::BOOL) {
          sliding[i] = items[i].as_bool();
        } else if (items[i].is_integer()) {
          sliding[i] = items[i].as_int() != 0;
        } else {
          bad(pattern_key + "[" + std::to_string(i) + "] is a " +
              gguf_value_type_name(items[i].type) + ", expected a bool");
        }
      }
    } else if (p->is_integer()) {
      const int64_t n = p->as_int();
      if (n < 0) bad(pattern_key + " is " + std::to_string(n) + ", must be >= 0");
      for (int64_t i = 0; i < num_layers; ++i) sliding[size_t(i)] = n == 0 || i % n < n - 1;
    } else {
      bad(pattern_key + " is a " + gguf_value_type_name(p->type) +
          ", expected a bool array or an integer period");
    }
    if (window == 0)
      for (size_t i = 0; i < sliding.size(); ++i)
        if (sliding[i] && p->type == GGUFValueType::ARRAY)
          bad(pattern_key + " marks layer " + std::to_string(i) + " sliding but " + window_key +
              " is absent or 0");
  }
  std::vector<int64_t> windows(size_t(num_layers), 0);
  for (size_t i = 0; i < windows.size(); ++i) windows[i] = sliding[i] ? window : 0;
  return windows;
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const GGUFFile& file) {
  ModelConfig c;
  c.architecture = file.get_string("general.architecture");
  if (!is_supported(c.architecture))
    throw ModelFileError(file.path(), "unsupported architecture '" + c.architecture +
                                          "' (supported: llama, qwen2, qwen3, gemma3)");
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
  c.head_dim = file.get_int(a + "attention.key_length", 0);
  if (c.head_dim == 0 && c.hidden_size > 0 && c.num_attention_heads > 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      bad("embedding_length is not a multiple of attention.head_count");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.rotary_dim = file.get_int(a + "rope.dimension_count", c.head_dim);

  // vocab: <arch>.vocab_size, else the tokenizer's token count, else token_embd's rows.
  c.vocab_size = file.get_int(a + "vocab_size", 0);
  if (c.vocab_size == 0) {
    if (const GGUFTensorInfo* t = file.find_tensor("token_embd.weight"); t && t->dims.size() == 2)
      c.vocab_size = t->dims[1];
  }
  if (c.vocab_size <= 0) bad("cannot determine vocab_size");
  c.tie_word_embeddings = file.find_tensor("output.weight") == nullptr;
  c.validate(file.path(), c.architecture);  // before anything is sized from these values

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
  } else if (scaling != "none") {
    bad("unsupported rope.scaling.type '" + scaling + "'");
  }

  // Every layer has tensors: a block_count beyond them is a corrupt header, caught before
  // anything is allocated per layer.
  if (!file.find_tensor("blk." + std::to_string(c.num_hidden_layers - 1) + ".attn_norm.weight"))
    bad("block_count is " + std::to_string(c.num_hidden_layers) + " but the file has no tensor "
        "blk." + std::to_string(c.num_hidden_layers - 1) + ".attn_norm.weight");
  // Biases, where the tensors exist (llama.cpp loads them as optional; qwen2 requires q/k/v).
  c.qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.o_proj_bias = file.find_tensor("blk.0.attn_output.bias") != nullptr;
  c.mlp_bias = file.find_tensor("blk.0.ffn_up.bias") != nullptr;
  if (c.architecture == "qwen2" && !c.qkv_bias)
    bad("qwen2 needs q/k/v biases but there is no tensor blk.0.attn_q.bias");
  c.layer_sliding_window = gguf_layer_windows(file, a, c.num_hidden_layers);
  c.qk_norm = file.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
  if (c.architecture == "qwen3" && !c.qk_norm)
    bad("qwen3 needs q/k norms but there is no tensor blk.0.attn_q_norm.weight");
  if (c.architecture == "gemma3") {
    // llama.cpp's gemma3 (llama-model.cpp): norms as stored (its converter added the 1),
    // GeGLU, embeddings * sqrt(n_embd), local RoPE base 10000 unless rope.freq_base_swa says,
    // attention scale 1/sqrt(head_dim) except Gemma 3 27B (62 layers): 1/sqrt(n_embd/n_head).
    if (!c.qk_norm) bad("gemma3 needs q/k norms but there is no tensor blk.0.attn_q_norm.weight");
    c.sandwich_norms = true;
    c.hidden_act = "gelu_pytorch_tanh";
    c.embedding_multiplier = std::sqrt(static_cast<float>(c.hidden_size));
    c.rope_local_base_freq = static_cast<float>(file.get_float(a + "rope.freq_base_swa", 10000.0));
    c.query_pre_attn_scalar = static_cast<float>(
        c.num_hidden_layers == 62 ? c.hidden_size / c.num_attention_heads : c.head_dim);
  }
  c.validate(file.path(), c.architecture);
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

std::vector<float> ModelConfig::rope_local_inv_freq() const {
  if (rope_local_base_freq == 0.0f) return rope_inv_freq();
  ModelConfig local = *this;
  local.rope_theta = rope_local_base_freq;
  local.rope_scaling = RopeScaling{};
  return local.rope_inv_freq();
}

float ModelConfig::attention_scale() const {
  const float s = query_pre_attn_scalar > 0.0f ? query_pre_attn_scalar
                                               : static_cast<float>(head_dim);
  return 1.0f / std::sqrt(s);
}

}  // namespace octet

// ModelConfig::validate: the one place where a model's dimensions are checked (ranges,
// divisibility, overflow-free products, positive normal floats), for config.json and GGUF alike.
#include <cmath>
#include <cstdio>
#include <string>

#include "models/model_config.h"
#include "models/model_file_error.h"

namespace octet {

namespace {

/// HF config.json field -> GGUF key suffix (after "<arch>."), for messages on GGUF files.
constexpr std::pair<const char*, const char*> kGgufKeys[] = {
    {"hidden_size", "embedding_length"},
    {"num_hidden_layers", "block_count"},
    {"num_attention_heads", "attention.head_count"},
    {"num_key_value_heads", "attention.head_count_kv"},
    {"head_dim", "attention.key_length"},
    {"rotary_dim", "rope.dimension_count"},
    {"intermediate_size", "feed_forward_length"},
    {"vocab_size", "vocab_size"},
    {"max_position_embeddings", "context_length"},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon"},
    {"rope_theta", "rope.freq_base"},
    {"rope_scaling.factor", "rope.scaling.factor"},
    {"sliding_window", "attention.sliding_window"},
};

bool positive_normal(float v) { return std::isnormal(v) && v > 0.0f; }

std::string fmt(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

/// a * b + c with saturation at INT64_MAX (inputs >= 0).
int64_t mul_add_sat(int64_t a, int64_t b, int64_t c = 0) {
  int64_t p = 0;
  if (__builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(p, c, &p)) return INT64_MAX;
  return p;
}

}  // namespace

int64_t ModelConfig::num_parameters() const {
  const int64_t h = hidden_size, q = mul_add_sat(num_attention_heads, head_dim),
                kv = mul_add_sat(num_key_value_heads, head_dim), ff = intermediate_size;
  // q, o: h x q each; k, v: h x kv each; gate, up, down: h x ff each; two norms of h.
  int64_t per_layer = mul_add_sat(h, mul_add_sat(2, q, mul_add_sat(2, kv)));
  per_layer = mul_add_sat(mul_add_sat(3, h), ff, per_layer);
  per_layer = mul_add_sat(2, h, per_layer);
  if (qkv_bias) per_layer = mul_add_sat(1, q, mul_add_sat(2, kv, per_layer));
  if (o_proj_bias) per_layer = mul_add_sat(1, h, per_layer);
  if (mlp_bias) per_layer = mul_add_sat(2, ff, mul_add_sat(1, h, per_layer));
  if (qk_norm) per_layer = mul_add_sat(2, head_dim, per_layer);       // q_norm, k_norm
  if (sandwich_norms) per_layer = mul_add_sat(2, h, per_layer);       // post-attention, post-FFN
  int64_t total = mul_add_sat(per_layer, num_hidden_layers, h);  // + the final norm
  total = mul_add_sat(mul_add_sat(vocab_size, h), tie_word_embeddings ? 1 : 2, total);
  return total > kMaxParameters ? -1 : total;
}

void ModelConfig::validate(const std::string& path, const std::string& gguf_arch) const {
  auto name = [&](const std::string& field) {
    if (gguf_arch.empty()) return field;
    for (const auto& [hf, key] : kGgufKeys)
      if (field == hf) return gguf_arch + "." + key;
    return field;
  };
  auto bad = [&](const std::string& field, const std::string& problem) {
    throw ModelFileError(path, name(field) + " " + problem);
  };
  auto in_range = [&](const char* field, int64_t v, int64_t max) {
    if (v < 1 || v > max)
      bad(field, "is " + std::to_string(v) + ", must be in [1, " + std::to_string(max) + "]");
  };
  in_range("hidden_size", hidden_size, kMaxHiddenSize);
  in_range("num_hidden_layers", num_hidden_layers, kMaxLayers);
  in_range("num_attention_heads", num_attention_heads, kMaxHeads);
  in_range("num_key_value_heads", num_key_value_heads, num_attention_heads);
  in_range("head_dim", head_dim, kMaxHeadDim);
  in_range("rotary_dim", rotary_dim, head_dim);
  in_range("intermediate_size", intermediate_size, kMaxIntermediateSize);
  in_range("vocab_size", vocab_size, kMaxVocabSize);
  in_range("max_position_embeddings", max_position_embeddings, kMaxPositions);
  if (num_attention_heads % num_key_value_heads != 0)
    bad("num_attention_heads", std::to_string(num_attention_heads) +
                                   " is not a multiple of num_key_value_heads " +
                                   std::to_string(num_key_value_heads));
  if (head_dim % 2 != 0) bad("head_dim", std::to_string(head_dim) + " is odd");
  if (rotary_dim % 2 != 0) bad("rotary_dim", std::to_string(rotary_dim) + " is odd");
  if (num_parameters() < 0)
    throw ModelFileError(path, "the dimensions (hidden_size " + std::to_string(hidden_size) +
                                   ", num_hidden_layers " + std::to_string(num_hidden_layers) +
                                   ", intermediate_size " + std::to_string(intermediate_size) +
                                   ", vocab_size " + std::to_string(vocab_size) +
                                   ") give more than 2^42 parameters");

  auto normal = [&](const char* field, float v) {
    if (!positive_normal(v))
      bad(field, "is " + fmt(v) + " as float32; it must be finite, positive and "
                 "normal (>= 1.2e-38)");
  };
  normal("rms_norm_eps", rms_norm_eps);
  normal("rope_theta", rope_theta);
  const RopeScaling& s = rope_scaling;
  if (s.type == RopeScaling::Type::Linear || s.type == RopeScaling::Type::Llama3)
    normal("rope_scaling.factor", s.factor);
  if (s.type == RopeScaling::Type::Llama3) {
    normal("rope_scaling.low_freq_factor", s.low_freq_factor);
    normal("rope_scaling.high_freq_factor", s.high_freq_factor);
    if (!(s.high_freq_factor > s.low_freq_factor))
      bad("rope_scaling.high_freq_factor", "must exceed rope_scaling.low_freq_factor");
    in_range("rope_scaling.original_max_position_embeddings", s.original_max_position_embeddings,
             kMaxPositions);
  }
  if (s.type == RopeScaling::Type::FreqFactors) {
    if (int64_t(s.freq_factors.size()) != rotary_dim / 2)
      throw ModelFileError(path, "rope_freqs.weight has " + std::to_string(s.freq_factors.size()) +
                                     " values, expected " + std::to_string(rotary_dim / 2));
    for (size_t i = 0; i < s.freq_factors.size(); ++i)
      if (!positive_normal(s.freq_factors[i]))
        throw ModelFileError(path, "rope_freqs.weight[" + std::to_string(i) + "] is " +
                                       fmt(s.freq_factors[i]) +
                                       "; it must be finite, positive and normal");
  }
  // The frequencies RoPE will use (a tiny theta or a huge factor can still overflow them).
  const std::vector<float> inv = rope_inv_freq();
  for (size_t i = 0; i < inv.size(); ++i)
    if (!(std::isfinite(inv[i]) && inv[i] > 0.0f))
      bad("rope_theta", "and rope_scaling give RoPE frequency " + std::to_string(i) + " = " +
                            fmt(inv[i]) + "; it must be finite and positive");

  if (!layer_sliding_window.empty()) {
    if (int64_t(layer_sliding_window.size()) != num_hidden_layers)
      throw ModelFileError(path, std::to_string(layer_sliding_window.size()) +
                                     " sliding windows for " + std::to_string(num_hidden_layers) +
                                     " layers");
    for (int64_t w : layer_sliding_window)
      if (w < 0 || w > kMaxPositions)
        bad("sliding_window", "is " + std::to_string(w) + ", must be in [0, " +
                                  std::to_string(kMaxPositions) + "]");
  }
  if (bos_token_id >= vocab_size)
    bad("bos_token_id", std::to_string(bos_token_id) + " is not below vocab_size " +
                            std::to_string(vocab_size));
  for (size_t i = 0; i < eos_token_ids.size(); ++i)
    if (eos_token_ids[i] < 0 || eos_token_ids[i] >= vocab_size)
      bad(eos_token_ids.size() == 1 ? "eos_token_id" : "eos_token_id[" + std::to_string(i) + "]",
          std::to_string(eos_token_ids[i]) + " is not below vocab_size " +
              std::to_string(vocab_size));
}

}  // namespace octet

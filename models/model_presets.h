#pragma once
// Architectures by name for --load-format dummy (models/dummy_weights.h): a preset is the
// Hugging Face config.json of a model, so it goes through ModelConfig::from_hf_config like a
// file would. Values of the Llama 3 presets are those of meta-llama/Llama-3.1-8B, -70B and
// Llama-3.2-1B's config.json on the Hugging Face hub.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace octet {

struct ModelPreset {
  std::string name;
  nlohmann::json config;  // config.json; vocab_size absent when vocab_from_tokenizer
  bool vocab_from_tokenizer = false;  // vocab_size = the tokenizer's (tiny test models)
};

/// The preset called `name`: "llama-3.1-8b", "llama-3.1-70b" (hidden 4096 / 8192, 32 / 80
/// layers, 32 / 64 heads, 8 KV heads, head_dim 128, intermediate 14336 / 28672, vocab 128256,
/// rope_theta 500000 with llama3 rope_scaling factor 8, 131072 positions, untied lm_head),
/// "llama-3.2-1b" (hidden 2048, 16 layers, 32 heads, 8 KV heads, head_dim 64, intermediate
/// 8192, vocab 128256, rope_theta 500000 with llama3 rope_scaling factor 32, 131072 positions,
/// tie_word_embeddings) or "tiny-llama" (hidden 64, 2 layers, 4 heads, 2 KV heads,
/// intermediate 128, 2048 positions, vocab = the tokenizer's); nullopt for another name.
std::optional<ModelPreset> find_model_preset(const std::string& name);

/// Every preset name, in a fixed order (for messages and --help).
std::vector<std::string> model_preset_names();

}  // namespace octet

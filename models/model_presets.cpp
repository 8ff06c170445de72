#include "models/model_presets.h"

namespace octet {

namespace {

// Llama 3 config.json: 8 KV heads, vocab 128256, rope_theta 500000, llama3 rope_scaling with
// `rope_factor` (8 for 3.1, 32 for 3.2), 131072 positions.
nlohmann::json llama3(int64_t hidden, int64_t layers, int64_t heads, int64_t head_dim,
                      int64_t intermediate, double rope_factor, bool tie_word_embeddings) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", hidden},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"num_key_value_heads", 8},
          {"head_dim", head_dim},
          {"intermediate_size", intermediate},
          {"vocab_size", 128256},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"rope_scaling",
           {{"rope_type", "llama3"},
            {"factor", rope_factor},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 8192}}},
          {"max_position_embeddings", 131072},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", tie_word_embeddings},
          {"bos_token_id", 128000},
          {"eos_token_id", 128001}};
}

std::vector<ModelPreset> presets() {
  std::vector<ModelPreset> out;
  out.push_back({"llama-3.1-8b", llama3(4096, 32, 32, 128, 14336, 8.0, false), false});
  out.push_back({"llama-3.1-70b", llama3(8192, 80, 64, 128, 28672, 8.0, false), false});
  out.push_back({"llama-3.2-1b", llama3(2048, 16, 32, 64, 8192, 32.0, true), false});
  out.push_back({"tiny-llama",
                 {{"architectures", {"LlamaForCausalLM"}},
                  {"model_type", "llama"},
                  {"hidden_size", 64},
                  {"num_hidden_layers", 2},
                  {"num_attention_heads", 4},
                  {"num_key_value_heads", 2},
                  {"intermediate_size", 128},
                  {"rms_norm_eps", 1e-5},
                  {"rope_theta", 10000.0},
                  {"max_position_embeddings", 2048},
                  {"hidden_act", "silu"},
                  {"tie_word_embeddings", false}},
                 true});
  return out;
}

}  // namespace

std::optional<ModelPreset> find_model_preset(const std::string& name) {
  for (ModelPreset& p : presets())
    if (p.name == name) return std::move(p);
  return std::nullopt;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const ModelPreset& p : presets()) names.push_back(p.name);
  return names;
}

}  // namespace octet

#include "models/model_presets.h"

namespace octet {

namespace {

nlohmann::json llama31(int64_t hidden, int64_t layers, int64_t heads, int64_t intermediate) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", hidden},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"num_key_value_heads", 8},
          {"head_dim", 128},
          {"intermediate_size", intermediate},
          {"vocab_size", 128256},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"rope_scaling",
           {{"rope_type", "llama3"},
            {"factor", 8.0},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 8192}}},
          {"max_position_embeddings", 131072},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", false},
          {"bos_token_id", 128000},
          {"eos_token_id", 128001}};
}

std::vector<ModelPreset> presets() {
  std::vector<ModelPreset> out;
  out.push_back({"llama-3.1-8b", llama31(4096, 32, 32, 14336), false});
  out.push_back({"llama-3.1-70b", llama31(8192, 80, 64, 28672), false});
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

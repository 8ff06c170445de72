// ModelConfig::from_hf_config: a Hugging Face config.json (LlamaConfig) -> ModelConfig.
// Keys and defaults as transformers' LlamaConfig; RoPE from "rope_theta" / "rope_scaling"
// (transformers 4) or "rope_parameters" (transformers 5, same fields plus rope_theta).
#include <cmath>

#include <nlohmann/json.hpp>

#include "models/model_config.h"
#include "models/model_file_error.h"

namespace octet {

namespace {

using nlohmann::json;

class ConfigReader {
 public:
  ConfigReader(const json& j, const std::string& path) : j_(j), path_(path) {}

  [[noreturn]] void fail(const std::string& problem) const { throw ModelFileError(path_, problem); }

  /// A positive integer at `key`; `fallback` when absent or null (< 0: required).
  int64_t positive_int(const json& obj, const std::string& key, int64_t fallback,
                       const std::string& prefix = "") const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (fallback < 0) fail("missing " + prefix + key);
      return fallback;
    }
    if (!it->is_number_integer() || it->get<int64_t>() <= 0)
      fail(prefix + key + " must be a positive integer, got " + it->dump());
    return it->get<int64_t>();
  }

  /// A finite positive number at `key`, or `fallback` when absent or null.
  float positive_float(const json& obj, const std::string& key, float fallback,
                       const std::string& prefix = "") const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_number() || !(it->get<double>() > 0.0) || !std::isfinite(it->get<double>()))
      fail(prefix + key + " must be a positive number, got " + it->dump());
    return float(it->get<double>());
  }

  const json& root() const { return j_; }

 private:
  const json& j_;
  const std::string& path_;
};

void read_rope_scaling(const ConfigReader& r, const json& s, const std::string& key,
                       RopeScaling& out) {
  if (!s.is_object()) r.fail(key + " must be an object or null, got " + s.dump());
  std::string type;
  for (const char* k : {"rope_type", "type"}) {
    if (const auto it = s.find(k); it != s.end() && !it->is_null()) {
      if (!it->is_string()) r.fail(key + "." + k + " must be a string");
      type = it->get<std::string>();
      break;
    }
  }
  const std::string p = key + ".";
  if (type.empty() || type == "default") {
    if (type.empty() && s.contains("factor"))
      r.fail(key + " has a factor but no rope_type (supported: default, linear, llama3)");
    out.type = RopeScaling::Type::None;
  } else if (type == "linear") {
    out.type = RopeScaling::Type::Linear;
    out.factor = r.positive_float(s, "factor", -1.0f, p);
    if (out.factor < 0) r.fail("missing " + p + "factor");
  } else if (type == "llama3") {
    out.type = RopeScaling::Type::Llama3;
    out.factor = r.positive_float(s, "factor", -1.0f, p);
    if (out.factor < 0) r.fail("missing " + p + "factor");
    out.low_freq_factor = r.positive_float(s, "low_freq_factor", 1.0f, p);
    out.high_freq_factor = r.positive_float(s, "high_freq_factor", 4.0f, p);
    if (!(out.high_freq_factor > out.low_freq_factor))
      r.fail(p + "high_freq_factor must exceed low_freq_factor");
    out.original_max_position_embeddings =
        r.positive_int(s, "original_max_position_embeddings", 8192, p);
  } else {
    r.fail("unsupported " + p + "rope_type '" + type + "' (supported: default, linear, llama3)");
  }
}

}  // namespace

ModelConfig ModelConfig::from_hf_config(const json& config, const std::string& config_path) {
  const ConfigReader r(config, config_path);
  if (!config.is_object()) r.fail("config is not a JSON object");

  // Architecture: model_type "llama" or architectures ["LlamaForCausalLM"].
  std::string model_type, arch;
  if (const auto it = config.find("model_type"); it != config.end() && !it->is_null()) {
    if (!it->is_string()) r.fail("model_type must be a string");
    model_type = it->get<std::string>();
  }
  if (const auto it = config.find("architectures"); it != config.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string())
      r.fail("architectures must be a non-empty array of strings");
    arch = (*it)[0].get<std::string>();
    if (it->size() > 1) r.fail("architectures lists " + it->dump() + "; expected one entry");
  }
  if (model_type.empty() && arch.empty()) r.fail("missing model_type and architectures");
  if (!arch.empty() && arch != "LlamaForCausalLM")
    r.fail("unsupported architecture '" + arch + "' (supported: LlamaForCausalLM)");
  if (!model_type.empty() && model_type != "llama")
    r.fail("unsupported model_type '" + model_type + "' (supported: llama)");

  ModelConfig c;
  c.architecture = "llama";
  c.hidden_size = r.positive_int(config, "hidden_size", -1);
  c.num_hidden_layers = r.positive_int(config, "num_hidden_layers", -1);
  c.num_attention_heads = r.positive_int(config, "num_attention_heads", -1);
  c.num_key_value_heads = r.positive_int(config, "num_key_value_heads", c.num_attention_heads);
  c.intermediate_size = r.positive_int(config, "intermediate_size", -1);
  c.vocab_size = r.positive_int(config, "vocab_size", -1);
  c.max_position_embeddings = r.positive_int(config, "max_position_embeddings", 2048);
  c.rms_norm_eps = r.positive_float(config, "rms_norm_eps", 1e-6f);  // LlamaConfig's default
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("num_attention_heads " + std::to_string(c.num_attention_heads) +
           " is not a multiple of num_key_value_heads " + std::to_string(c.num_key_value_heads));
  if (!config.contains("head_dim") || config["head_dim"].is_null()) {
    if (c.hidden_size % c.num_attention_heads != 0)
      r.fail("hidden_size " + std::to_string(c.hidden_size) +
             " is not a multiple of num_attention_heads " + std::to_string(c.num_attention_heads) +
             " and head_dim is not given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  } else {
    c.head_dim = r.positive_int(config, "head_dim", -1);
  }
  if (c.head_dim % 2 != 0) r.fail("head_dim " + std::to_string(c.head_dim) + " is odd");
  c.rotary_dim = c.head_dim;

  if (const auto it = config.find("tie_word_embeddings"); it != config.end() && !it->is_null()) {
    if (!it->is_boolean()) r.fail("tie_word_embeddings must be a boolean");
    c.tie_word_embeddings = it->get<bool>();
  }

  // RoPE: transformers 5 writes rope_parameters {rope_theta, rope_type, ...}; 4 writes
  // rope_theta and rope_scaling at the top level.
  c.rope_theta = r.positive_float(config, "rope_theta", 10000.0f);
  if (const auto it = config.find("rope_parameters"); it != config.end() && !it->is_null()) {
    if (!it->is_object()) r.fail("rope_parameters must be an object");
    c.rope_theta = r.positive_float(*it, "rope_theta", c.rope_theta, "rope_parameters.");
    read_rope_scaling(r, *it, "rope_parameters", c.rope_scaling);
  }
  if (const auto it = config.find("rope_scaling"); it != config.end() && !it->is_null())
    read_rope_scaling(r, *it, "rope_scaling", c.rope_scaling);

  c.layer_sliding_window.assign(size_t(c.num_hidden_layers), 0);
  return c;
}

}  // namespace octet

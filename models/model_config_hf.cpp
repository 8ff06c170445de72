// ModelConfig::from_hf_config: a Hugging Face config.json (LlamaConfig, MistralConfig,
// Qwen2Config) -> ModelConfig. Keys and defaults as transformers 5.24's configuration_*.py; RoPE
// from "rope_theta" / "rope_scaling" (transformers 4) or "rope_parameters" (transformers 5, same
// fields plus rope_theta); per-layer windows as modeling_{llama,mistral,qwen2}.py apply them.
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "models/config_json.h"
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
      fail(prefix + key + " must be a positive integer below 2^63, got " + json_brief(*it));
    return it->get<int64_t>();
  }

  /// A finite positive number at `key`, or `fallback` when absent or null.
  float positive_float(const json& obj, const std::string& key, float fallback,
                       const std::string& prefix = "") const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_number() || !(it->get<double>() > 0.0) || !std::isfinite(it->get<double>()))
      fail(prefix + key + " must be a positive number, got " + json_brief(*it));
    return float(it->get<double>());
  }

  const json& root() const { return j_; }
  const std::string& path() const { return path_; }

 private:
  const json& j_;
  const std::string& path_;
};

void read_rope_scaling(const ConfigReader& r, const json& s, const std::string& key,
                       RopeScaling& out) {
  if (!s.is_object()) r.fail(key + " must be an object or null, got " + json_brief(s));
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

/// Gemma3TextConfig's switches (HF modeling_gemma3.py; ModelConfig's Gemma fields): GeGLU,
/// q/k norms, four norms per layer stored as w for (1 + w), embeddings * sqrt(hidden_size),
/// query_pre_attn_scalar (default 256), RoPE: rope_parameters {full_attention, sliding_attention}
/// (transformers 5) or rope_theta / rope_local_base_freq (default 10000) / rope_scaling
/// (transformers 4). Soft-capping and bidirectional attention are refused.
void read_gemma3(const ConfigReader& r, ModelConfig& c) {
  const json& j = r.root();
  for (const char* key : {"hidden_activation", "hidden_act"})
    if (const auto it = j.find(key); it != j.end() && !it->is_null() &&
                                      *it != "gelu_pytorch_tanh")
      r.fail(std::string("unsupported ") + key + " " + json_brief(*it) +
             " (supported: \"gelu_pytorch_tanh\")");
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (const auto it = j.find(key); it != j.end() && !it->is_null())
      r.fail(std::string(key) + " is " + json_brief(*it) + "; octet supports only null");
  if (const auto it = j.find("use_bidirectional_attention"); it != j.end() && *it == true)
    r.fail("use_bidirectional_attention true is not supported");
  c.qk_norm = c.sandwich_norms = c.norm_weight_offset = true;
  c.hidden_act = "gelu_pytorch_tanh";
  c.embedding_multiplier = std::sqrt(static_cast<float>(c.hidden_size));
  c.query_pre_attn_scalar = r.positive_float(j, "query_pre_attn_scalar", 256.0f);
  c.rope_local_base_freq = r.positive_float(j, "rope_local_base_freq", 10000.0f);
  const auto params = j.find("rope_parameters");
  if (!j.contains("rope_theta") && (params == j.end() || !params->is_object() ||
                                    !params->contains("rope_theta")))
    c.rope_theta = 1e6f;  // Gemma3TextConfig's default
  if (const auto it = params; it != j.end() && it->is_object()) {
    if (const auto f = it->find("full_attention"); f != it->end()) {
      c.rope_theta = r.positive_float(*f, "rope_theta", c.rope_theta,
                                      "rope_parameters.full_attention.");
      read_rope_scaling(r, *f, "rope_parameters.full_attention", c.rope_scaling);
    }
    if (const auto s = it->find("sliding_attention"); s != it->end()) {
      c.rope_local_base_freq = r.positive_float(*s, "rope_theta", c.rope_local_base_freq,
                                                "rope_parameters.sliding_attention.");
      RopeScaling local;
      read_rope_scaling(r, *s, "rope_parameters.sliding_attention", local);
      if (local.type != RopeScaling::Type::None)
        r.fail("rope_parameters.sliding_attention: only rope_type default is supported");
    }
  }
}

/// The HF architectures octet runs, with their model_type.
struct Architecture {
  const char* hf_class;
  const char* model_type;
  int64_t default_max_position_embeddings;  // the config class's default
};
constexpr Architecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", 2048},
    {"MistralForCausalLM", "mistral", 4096 * 32},
    {"Qwen2ForCausalLM", "qwen2", 32768},
    {"Qwen3ForCausalLM", "qwen3", 32768},
    {"Gemma3ForCausalLM", "gemma3_text", 131072},
};

std::string supported_list(bool classes) {
  std::string s;
  for (const Architecture& a : kArchitectures)
    s += std::string(s.empty() ? "" : ", ") + (classes ? a.hf_class : a.model_type);
  return s;
}

/// A boolean at `key`, or `fallback` when absent or null.
bool read_bool(const ConfigReader& r, const std::string& key, bool fallback) {
  const auto it = r.root().find(key);
  if (it == r.root().end() || it->is_null()) return fallback;
  if (!it->is_boolean()) r.fail(key + " must be a boolean, got " + json_brief(*it));
  return it->get<bool>();
}

/// `sliding_window`: a positive integer, or 0 when null; `fallback` when absent.
int64_t read_sliding_window(const ConfigReader& r, int64_t fallback) {
  const auto it = r.root().find("sliding_window");
  if (it == r.root().end()) return fallback;
  if (it->is_null()) return 0;
  if (!it->is_number_integer() || it->get<int64_t>() <= 0)
    r.fail("sliding_window must be a positive integer or null, got " + json_brief(*it));
  return it->get<int64_t>();
}

/// `layer_types` as one flag per layer (true = "sliding_attention"); empty when absent or null.
std::vector<bool> read_layer_types(const ConfigReader& r, int64_t num_layers) {
  const auto it = r.root().find("layer_types");
  if (it == r.root().end() || it->is_null()) return {};
  if (!it->is_array()) r.fail("layer_types must be an array of strings, got " + json_brief(*it));
  if (int64_t(it->size()) != num_layers)
    r.fail("layer_types has " + std::to_string(it->size()) + " entries but num_hidden_layers is " +
           std::to_string(num_layers));
  std::vector<bool> sliding;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string v = t.is_string() ? t.get<std::string>() : "";
    if (v == "sliding_attention") {
      sliding.push_back(true);
    } else if (v == "full_attention" || v == "attention") {  // "attention": legacy name
      sliding.push_back(false);
    } else {
      r.fail("layer_types[" + std::to_string(i) + "] is " + json_brief(t) +
             "; supported: \"full_attention\", \"sliding_attention\"");
    }
  }
  return sliding;
}

/// Per-layer windows (0 = full) as transformers 5.24's modeling code applies them; see
/// ModelConfig::from_hf_config.
std::vector<int64_t> read_layer_windows(const ConfigReader& r, const std::string& model_type,
                                        int64_t num_layers) {
  const std::vector<bool> types = read_layer_types(r, num_layers);
  std::vector<int64_t> windows(size_t(num_layers), 0);
  auto first_sliding = [&]() -> int64_t {
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i]) return int64_t(i);
    return -1;
  };
  if (model_type == "llama") {
    read_sliding_window(r, 0);  // validated, unused: LlamaAttention has no window
    if (const int64_t i = first_sliding(); i >= 0)
      r.fail("layer_types[" + std::to_string(i) + "] is \"sliding_attention\" but "
             "LlamaForCausalLM has no sliding-window attention (transformers ignores it, vLLM "
             "applies sliding_window); refusing to guess");
    return windows;
  }
  if (model_type == "gemma3_text") {
    // Gemma3TextConfig: sliding_window 4096 by default; without layer_types every
    // sliding_window_pattern-th layer (default 6) is full.
    const int64_t w = read_sliding_window(r, 4096);
    int64_t pattern = 6;
    if (const auto it = r.root().find("sliding_window_pattern");
        it != r.root().end() && !it->is_null()) {
      if (!it->is_number_integer() || it->get<int64_t>() <= 0)
        r.fail("sliding_window_pattern must be a positive integer, got " + json_brief(*it));
      pattern = it->get<int64_t>();
    }
    for (int64_t i = 0; i < num_layers; ++i) {
      const bool sliding = types.empty() ? (i + 1) % pattern != 0 : types[size_t(i)];
      if (sliding && w == 0)
        r.fail("layer " + std::to_string(i) + " is sliding but sliding_window is null");
      windows[size_t(i)] = sliding ? w : 0;
    }
    return windows;
  }
  if (model_type == "mistral") {
    // MistralConfig.sliding_window defaults to 4096; MistralModel masks every layer with it.
    const int64_t w = read_sliding_window(r, 4096);
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i] != (w > 0))
        r.fail("layer_types[" + std::to_string(i) + "] is " +
               (types[i] ? "\"sliding_attention\"" : "\"full_attention\"") +
               " but MistralForCausalLM applies sliding_window (" +
               (w > 0 ? std::to_string(w) : "null") + ") to every layer and ignores layer_types");
    std::fill(windows.begin(), windows.end(), w);
    return windows;
  }
  // qwen2: Qwen2Config.__post_init__ drops the window unless use_sliding_window, and derives
  // layer_types from max_window_layers when they are not given.
  const int64_t sw = read_sliding_window(r, 4096);
  const int64_t w = read_bool(r, "use_sliding_window", false) ? sw : 0;
  int64_t max_window_layers = 28;
  if (const auto it = r.root().find("max_window_layers"); it != r.root().end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      r.fail("max_window_layers must be a non-negative integer, got " + json_brief(*it));
    max_window_layers = it->get<int64_t>();
  }
  if (types.empty()) {
    for (int64_t i = 0; i < num_layers; ++i) windows[size_t(i)] = i >= max_window_layers ? w : 0;
    return windows;
  }
  if (const int64_t i = first_sliding(); i >= 0 && w == 0)
    r.fail("layer_types[" + std::to_string(i) + "] is \"sliding_attention\" but there is no "
           "window (use_sliding_window is false or sliding_window is null)");
  for (size_t i = 0; i < types.size(); ++i) windows[i] = types[i] ? w : 0;
  return windows;
}

}  // namespace

ModelConfig ModelConfig::from_hf_config(const json& config, const std::string& config_path) {
  const ConfigReader r(config, config_path);
  if (!config.is_object()) r.fail("config is not a JSON object");

  // Architecture: model_type ("llama") and/or architectures (["LlamaForCausalLM"]).
  std::string model_type, arch;
  if (const auto it = config.find("model_type"); it != config.end() && !it->is_null()) {
    if (!it->is_string()) r.fail("model_type must be a string");
    model_type = it->get<std::string>();
  }
  if (const auto it = config.find("architectures"); it != config.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string())
      r.fail("architectures must be a non-empty array of strings");
    arch = (*it)[0].get<std::string>();
    if (it->size() > 1) r.fail("architectures lists " + json_brief(*it) + "; expected one entry");
  }
  if (model_type.empty() && arch.empty()) r.fail("missing model_type and architectures");
  const Architecture* by_class = nullptr;
  const Architecture* by_type = nullptr;
  for (const Architecture& a : kArchitectures) {
    if (arch == a.hf_class) by_class = &a;
    if (model_type == a.model_type) by_type = &a;
  }
  if (!arch.empty() && !by_class)
    r.fail("unsupported architecture '" + arch + "' (supported: " + supported_list(true) + ")");
  if (!model_type.empty() && !by_type)
    r.fail("unsupported model_type '" + model_type + "' (supported: " + supported_list(false) +
           ")");
  if (by_class && by_type && by_class != by_type)
    r.fail("architectures '" + arch + "' does not match model_type '" + model_type + "'");
  const Architecture& a = by_class ? *by_class : *by_type;

  ModelConfig c;
  c.architecture = a.model_type;
  c.hidden_size = r.positive_int(config, "hidden_size", -1);
  c.num_hidden_layers = r.positive_int(config, "num_hidden_layers", -1);
  c.num_attention_heads = r.positive_int(config, "num_attention_heads", -1);
  c.num_key_value_heads = r.positive_int(config, "num_key_value_heads", c.num_attention_heads);
  c.intermediate_size = r.positive_int(config, "intermediate_size", -1);
  c.vocab_size = r.positive_int(config, "vocab_size", -1);
  c.max_position_embeddings =
      r.positive_int(config, "max_position_embeddings", a.default_max_position_embeddings);
  c.rms_norm_eps = r.positive_float(config, "rms_norm_eps", 1e-6f);  // LlamaConfig's default
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("num_attention_heads " + std::to_string(c.num_attention_heads) +
           " is not a multiple of num_key_value_heads " + std::to_string(c.num_key_value_heads));
  const bool gemma3 = a.model_type == std::string("gemma3_text");
  if (gemma3) c.tie_word_embeddings = true;  // Gemma3TextConfig's default (head_dim 256)
  if (gemma3 && (!config.contains("head_dim") || config["head_dim"].is_null())) {
    c.head_dim = 256;
  } else if (!config.contains("head_dim") || config["head_dim"].is_null()) {
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

  if (c.architecture == "gemma3_text") {
    read_gemma3(r, c);
  } else if (const auto it = config.find("hidden_act"); it != config.end() && !it->is_null()) {
    if (*it != "silu")
      r.fail("unsupported hidden_act " + json_brief(*it) + " (supported: \"silu\")");
  }
  if (c.architecture == "qwen3") {
    // Qwen3Attention: q_norm / k_norm over head_dim; q/k/v/o biases iff attention_bias.
    c.qk_norm = true;
    c.qkv_bias = c.o_proj_bias = read_bool(r, "attention_bias", false);
  } else if (c.architecture == "qwen2") {
    c.qkv_bias = true;  // Qwen2Attention: q/k/v Linear(bias=True), o_proj bias=False
  } else if (c.architecture == "llama") {
    c.qkv_bias = c.o_proj_bias = read_bool(r, "attention_bias", false);
    c.mlp_bias = read_bool(r, "mlp_bias", false);
  }
  if (const auto bos = json_token_ids(config, "bos_token_id", config_path, false); !bos.empty())
    c.bos_token_id = bos[0];
  c.eos_token_ids = json_token_ids(config, "eos_token_id", config_path, true);
  c.validate(config_path);  // before anything is sized from the values
  c.layer_sliding_window = read_layer_windows(r, c.architecture, c.num_hidden_layers);
  c.validate(config_path);
  return c;
}

}  // namespace octet

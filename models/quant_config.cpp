#include "models/quant_config.h"

#include <regex>

#include <nlohmann/json.hpp>

#include "models/model_file_error.h"

namespace octet {

namespace {

using nlohmann::json;

/// Throws ModelFileError(path, "quantization_config: " + problem).
[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw ModelFileError(path, "quantization_config: " + problem);
}

std::string dump(const json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

/// obj[key] as a string, `def` when absent or null; error when present with another type.
std::string get_string(const json& obj, const std::string& key, const std::string& where,
                       const std::string& path, const std::string& def = "") {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_string()) fail(path, where + key + " must be a string, got " + it->dump());
  return it->get<std::string>();
}

bool get_bool(const json& obj, const std::string& key, const std::string& where,
              const std::string& path, bool def) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_boolean()) fail(path, where + key + " must be true or false, got " + it->dump());
  return it->get<bool>();
}

/// A list of strings (a single string counts as a list of one).
std::vector<std::string> get_string_list(const json& obj, const std::string& key,
                                         const std::string& where, const std::string& path) {
  std::vector<std::string> out;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return out;
  if (it->is_string()) return {it->get<std::string>()};
  if (!it->is_array()) fail(path, where + key + " must be a list of strings, got " + it->dump());
  for (const json& e : *it) {
    if (!e.is_string()) fail(path, where + key + " entries must be strings, got " + e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

/// Checks num_bits == 8 and type == "float" of a compressed-tensors quantization args object.
void check_fp8_args(const json& args, const std::string& where, const std::string& path) {
  auto nb = args.find("num_bits");
  if (nb == args.end() || !nb->is_number_integer())
    fail(path, where + "num_bits missing or not an integer");
  if (nb->get<int64_t>() != 8)
    fail(path, where + "num_bits " + std::to_string(nb->get<int64_t>()) +
                   " is not supported (only 8-bit float, E4M3)");
  const std::string type = get_string(args, "type", where, path, "int");
  if (type != "float")
    fail(path, where + "type '" + type + "' is not supported (only \"float\", E4M3)");
  if (!get_bool(args, "symmetric", where, path, true))
    fail(path, where + "symmetric false (asymmetric, zero points) is not supported");
}

/// One parsed compressed-tensors scheme (weights + input activations) of a config group.
struct Scheme {
  ScaleGranularity weight_granularity = ScaleGranularity::PerRow;
  ActivationScheme activation = ActivationScheme::None;
  bool operator==(const Scheme&) const = default;
};

void check_format(const std::string& format, const std::string& where, const std::string& path) {
  if (format != "float-quantized" && format != "naive-quantized")
    fail(path, where + "format '" + format +
                   "' is not supported (float-quantized or naive-quantized with float type)");
}

Scheme parse_group(const std::string& name, const json& g, const std::string& path) {
  const std::string where = "config_groups." + name + ".";
  if (!g.is_object()) fail(path, "config group '" + name + "' is not an object");
  auto targets = g.find("targets");
  if (targets == g.end() || targets->is_null() || (targets->is_array() && targets->empty()))
    fail(path, "config group '" + name + "' has no targets");
  if (auto f = g.find("format"); f != g.end() && !f->is_null())
    check_format(dump(*f), where, path);

  Scheme s;
  auto w = g.find("weights");
  if (w == g.end() || w->is_null())
    fail(path, "config group '" + name + "' has no weights scheme (activation-only "
                                         "quantization is not supported)");
  if (!w->is_object()) fail(path, where + "weights must be an object");
  const std::string ww = where + "weights.";
  check_fp8_args(*w, ww, path);
  const std::string wstrategy = get_string(*w, "strategy", ww, path, "tensor");
  if (wstrategy == "channel")
    s.weight_granularity = ScaleGranularity::PerRow;
  else if (wstrategy == "tensor")
    s.weight_granularity = ScaleGranularity::PerTensor;
  else
    fail(path, ww + "strategy '" + wstrategy +
                   "' is not supported (supported: channel, tensor)");
  if (get_bool(*w, "dynamic", ww, path, false))
    fail(path, ww + "dynamic true is not supported (weights need stored scales)");

  auto a = g.find("input_activations");
  if (a != g.end() && !a->is_null()) {
    if (!a->is_object()) fail(path, where + "input_activations must be an object or null");
    const std::string aw = where + "input_activations.";
    check_fp8_args(*a, aw, path);
    const std::string astrategy = get_string(*a, "strategy", aw, path, "tensor");
    auto dyn = a->find("dynamic");
    if (dyn != a->end() && !dyn->is_boolean())  // e.g. "local" (NVFP4)
      fail(path, aw + "dynamic " + dyn->dump() + " is not supported (true or false)");
    const bool dynamic = dyn != a->end() && dyn->get<bool>();
    if (dynamic && astrategy == "token")
      s.activation = ActivationScheme::DynamicPerToken;
    else if (!dynamic && astrategy == "tensor")
      s.activation = ActivationScheme::StaticPerTensor;
    else
      fail(path, aw + "strategy '" + astrategy + "' with dynamic " +
                     (dynamic ? "true" : "false") +
                     " is not supported (dynamic token or static tensor)");
  }
  if (auto o = g.find("output_activations"); o != g.end() && !o->is_null())
    fail(path, where + "output_activations is not supported");
  return s;
}

KVCacheScheme parse_kv_cache(const json& kv, const std::string& path) {
  const std::string where = "kv_cache_scheme.";
  if (!kv.is_object()) fail(path, "kv_cache_scheme must be an object or null");
  KVCacheScheme k;
  auto nb = kv.find("num_bits");
  if (nb == kv.end() || !nb->is_number_integer())
    fail(path, where + "num_bits missing or not an integer");
  k.num_bits = nb->get<int>();
  if (k.num_bits != 8)
    fail(path, where + "num_bits " + std::to_string(k.num_bits) + " is not supported (only 8)");
  k.type = get_string(kv, "type", where, path, "float");
  if (k.type != "float") fail(path, where + "type '" + k.type + "' is not supported (float)");
  k.strategy = get_string(kv, "strategy", where, path, "tensor");
  if (k.strategy != "tensor" && k.strategy != "attn_head")
    fail(path, where + "strategy '" + k.strategy +
                   "' is not supported (supported: tensor, attn_head)");
  k.dynamic = get_bool(kv, "dynamic", where, path, false);
  k.symmetric = get_bool(kv, "symmetric", where, path, true);
  return k;
}

void parse_compressed_tensors(const json& q, const std::string& path, QuantConfig& c) {
  const std::string format = get_string(q, "format", "", path, "float-quantized");
  check_format(format, "", path);
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty())
    fail(path, "config_groups missing or empty");
  std::optional<Scheme> scheme;
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    const Scheme s = parse_group(it.key(), it.value(), path);
    if (scheme && !(*scheme == s))
      fail(path, "config group '" + it.key() +
                     "' uses a different scheme from the other groups (one scheme per model is "
                     "supported)");
    scheme = s;
    for (std::string& t : get_string_list(it.value(), "targets", "config_groups." + it.key() + ".",
                                          path))
      c.targets.push_back(std::move(t));
  }
  c.weights_fp8 = true;
  c.weight_granularity = scheme->weight_granularity;
  c.activation_scheme = scheme->activation;
  c.ignore = get_string_list(q, "ignore", "", path);
  if (auto kv = q.find("kv_cache_scheme"); kv != q.end() && !kv->is_null())
    c.kv_cache_scheme = parse_kv_cache(*kv, path);
}

void parse_fp8(const json& q, const std::string& path, QuantConfig& c) {
  if (auto b = q.find("weight_block_size"); b != q.end() && !b->is_null())
    fail(path, "weight_block_size " + b->dump() + ": block-wise fp8 not supported");
  const std::string fmt = get_string(q, "fmt", "", path, "e4m3");
  if (fmt != "e4m3") fail(path, "fmt '" + fmt + "' is not supported (e4m3)");
  const std::string act = get_string(q, "activation_scheme", "", path, "dynamic");
  if (act == "dynamic")
    c.activation_scheme = ActivationScheme::DynamicPerToken;
  else if (act == "static")
    c.activation_scheme = ActivationScheme::StaticPerTensor;
  else
    fail(path, "activation_scheme '" + act + "' is not supported (dynamic, static)");
  c.weights_fp8 = true;
  c.weight_granularity = ScaleGranularity::PerTensor;
  c.targets = {"Linear"};
  c.ignore = get_string_list(q, "ignored_layers", "", path);
  for (std::string& m : get_string_list(q, "modules_to_not_convert", "", path))
    c.ignore.push_back(std::move(m));
}

/// Linear modules of LlamaForCausalLM: the attention and MLP projections and lm_head.
bool is_linear_module(const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string last = dot == std::string::npos ? name : name.substr(dot + 1);
  return last == "lm_head" || (last.size() > 5 && last.ends_with("_proj"));
}

/// compressed-tensors / vLLM matching: an exact module name, or "re:<regex>" matched with
/// Python's re.match semantics (anchored at the start of the name, not at the end).
bool matches(const std::string& pattern, const std::string& name) {
  if (pattern.starts_with("re:")) {
    const std::regex re(pattern.substr(3), std::regex::ECMAScript);
    return std::regex_search(name, re, std::regex_constants::match_continuous);
  }
  return pattern == name;
}

}  // namespace

QuantConfig QuantConfig::from_hf_config(const nlohmann::json& config,
                                        const std::string& config_path) {
  QuantConfig c;
  if (!config.is_object()) return c;
  auto q = config.find("quantization_config");
  if (q == config.end() || q->is_null()) return c;
  if (!q->is_object()) fail(config_path, "must be an object");
  auto m = q->find("quant_method");
  if (m == q->end() || !m->is_string()) fail(config_path, "quant_method missing");
  c.quant_method = m->get<std::string>();
  // Regex entries are compiled here so that a bad one is reported as a file error.
  try {
    if (c.quant_method == "compressed-tensors")
      parse_compressed_tensors(*q, config_path, c);
    else if (c.quant_method == "fp8")
      parse_fp8(*q, config_path, c);
    else
      fail(config_path, "unknown quant_method '" + c.quant_method +
                            "' (supported: compressed-tensors, fp8)");
    for (const auto* list : {&c.targets, &c.ignore})
      for (const std::string& p : *list)
        if (p.starts_with("re:")) (void)std::regex(p.substr(3), std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    fail(config_path, std::string("invalid regex in targets/ignore: ") + e.what());
  }
  return c;
}

bool QuantConfig::is_quantized(const std::string& module_name) const {
  if (!weights_fp8) return false;
  // vLLM's Fp8Config quantizes LinearBase layers; lm_head is a ParallelLMHead and stays 16-bit.
  if (quant_method == "fp8" && module_name == "lm_head") return false;
  bool targeted = false;
  for (const std::string& t : targets) {
    if (t == "Linear" ? is_linear_module(module_name) : matches(t, module_name)) {
      targeted = true;
      break;
    }
  }
  if (!targeted) return false;
  for (const std::string& i : ignore)
    if (matches(i, module_name)) return false;
  return true;
}

}  // namespace octet

#include "models/quant_config.h"

#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "models/bounded_regex.h"
#include "models/config_json.h"
#include "models/model_file_error.h"

namespace octet {

/// Targets and ignore entries of a parsed config, ready to match: exact names in hash sets,
/// "re:" entries compiled once each.
struct QuantPatterns {
  struct Regex {
    std::string key;  // the config key it came from, for errors
    std::unique_ptr<BoundedRegex> re;
  };
  struct List {
    bool linear = false;                    // "Linear" (targets only)
    std::unordered_set<std::string> exact;  // module names
    std::vector<const Regex*> regexes;      // in the order given
  };
  std::string path;
  std::unordered_map<std::string, Regex> compiled;  // "re:..." -> its regex (node-stable)
  List targets, ignore;
};

namespace {

using nlohmann::json;

/// Throws ModelFileError(path, "quantization_config: " + problem).
[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw ModelFileError(path, "quantization_config: " + problem);
}

/// A string as itself, anything else briefly (json_brief).
std::string dump(const json& j) {
  return j.is_string() && j.get_ref<const std::string&>().size() <= 60 ? j.get<std::string>()
                                                                          : json_brief(j);
}

/// obj[key] as a string, `def` when absent or null; error when present with another type.
std::string get_string(const json& obj, const std::string& key, const std::string& where,
                       const std::string& path, const std::string& def = "") {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_string()) fail(path, where + key + " must be a string, got " + json_brief(*it));
  return it->get<std::string>();
}

bool get_bool(const json& obj, const std::string& key, const std::string& where,
              const std::string& path, bool def) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_boolean()) fail(path, where + key + " must be true or false, got " + json_brief(*it));
  return it->get<bool>();
}

/// A list of strings (a single string counts as a list of one).
std::vector<std::string> get_string_list(const json& obj, const std::string& key,
                                         const std::string& where, const std::string& path) {
  std::vector<std::string> out;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return out;
  if (it->is_string()) return {it->get<std::string>()};
  if (!it->is_array())
    fail(path, where + key + " must be a list of strings, got " + json_brief(*it));
  for (const json& e : *it) {
    if (!e.is_string()) fail(path, where + key + " entries must be strings, got " + json_brief(e));
    out.push_back(e.get<std::string>());
  }
  return out;
}

/// args["num_bits"]: an integer in [1, 64] (bits of one value).
int64_t num_bits(const json& args, const std::string& where, const std::string& path) {
  auto nb = args.find("num_bits");
  if (nb == args.end() || nb->is_null()) fail(path, where + "num_bits missing");
  return json_int_in_range(*nb, path, "quantization_config: " + where + "num_bits", 1, 64);
}

/// Checks num_bits == 8 and type == "float" of a compressed-tensors quantization args object.
void check_fp8_args(const json& args, const std::string& where, const std::string& path) {
  if (num_bits(args, where, path) != 8)
    fail(path, where + "num_bits " + json_brief(args["num_bits"]) +
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
      fail(path, aw + "dynamic " + json_brief(*dyn) + " is not supported (true or false)");
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
  k.num_bits = int(num_bits(kv, where, path));
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
    fail(path, "weight_block_size " + json_brief(*b) + ": block-wise fp8 not supported");
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

/// Adds `entries` (module names, "re:" regexes, "Linear" when `linear_ok`) to `list`,
/// compiling each regex once. Throws ModelFileError naming `key` for a regex PCRE2 rejects.
void add_patterns(QuantPatterns& p, QuantPatterns::List& list,
                  const std::vector<std::string>& entries, const std::string& key,
                  bool linear_ok) {
  for (const std::string& e : entries) {
    if (linear_ok && e == "Linear") {
      list.linear = true;
    } else if (!e.starts_with("re:")) {
      list.exact.insert(e);
    } else {
      auto it = p.compiled.find(e);
      if (it == p.compiled.end()) {
        if (p.compiled.size() >= QuantConfig::kMaxRegexEntries)
          fail(p.path, key + ": more than " + std::to_string(QuantConfig::kMaxRegexEntries) +
                           " distinct \"re:\" entries");
        try {
          auto re = std::make_unique<BoundedRegex>(std::string_view(e).substr(3));
          it = p.compiled.emplace(e, QuantPatterns::Regex{key, std::move(re)}).first;
        } catch (const RegexLimitError& err) {
          fail(p.path, key + ": " + err.what());
        }
      }
      list.regexes.push_back(&it->second);
    }
  }
}

/// Whether `name` is in `list` (Python re.match for regexes). A regex that hits a match limit
/// is a ModelFileError naming the file and the key, never a silent non-match.
bool in_list(const QuantPatterns& p, const QuantPatterns::List& list, const std::string& name) {
  if (list.linear && is_linear_module(name)) return true;
  if (list.exact.count(name)) return true;
  for (const QuantPatterns::Regex* r : list.regexes) {
    try {
      if (r->re->match_prefix(name)) return true;
    } catch (const RegexLimitError& err) {
      fail(p.path, r->key + ": " + err.what());
    }
  }
  return false;
}

/// Patterns of `c`'s targets and ignore lists, `path` and keys as given, for messages.
std::shared_ptr<const QuantPatterns> compile_patterns(const QuantConfig& c,
                                                      const std::string& path,
                                                      const std::string& targets_key,
                                                      const std::string& ignore_key) {
  auto p = std::make_shared<QuantPatterns>();
  p->path = path;
  add_patterns(*p, p->targets, c.targets, targets_key, /*linear_ok=*/true);
  add_patterns(*p, p->ignore, c.ignore, ignore_key, /*linear_ok=*/false);
  return p;
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
  if (c.quant_method == "compressed-tensors")
    parse_compressed_tensors(*q, config_path, c);
  else if (c.quant_method == "fp8")
    parse_fp8(*q, config_path, c);
  else
    fail(config_path, "unknown quant_method '" + c.quant_method +
                          "' (supported: compressed-tensors, fp8)");
  // Regex entries are compiled here, once, so that a bad one is reported as a file error.
  const bool fp8 = c.quant_method == "fp8";
  c.patterns = compile_patterns(c, config_path, fp8 ? "targets" : "config_groups.*.targets",
                                fp8 ? "ignored_layers/modules_to_not_convert" : "ignore");
  return c;
}

bool QuantConfig::is_quantized(const std::string& module_name) const {
  if (!weights_fp8) return false;
  // vLLM's Fp8Config quantizes LinearBase layers; lm_head is a ParallelLMHead and stays 16-bit.
  if (quant_method == "fp8" && module_name == "lm_head") return false;
  // A QuantConfig built by hand has no compiled patterns: compile its (short) lists now.
  const std::shared_ptr<const QuantPatterns> p =
      patterns ? patterns
               : compile_patterns(*this, "QuantConfig", "targets", "ignore");
  return in_list(*p, p->targets, module_name) && !in_list(*p, p->ignore, module_name);
}

}  // namespace octet

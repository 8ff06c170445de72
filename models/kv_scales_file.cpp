// --kv-scales-path: octet's JSON scales format and vLLM's legacy quantization-param schema
// (formats documented at load_kv_scales_file in kv_scales.h).
#include <cmath>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "config/file_read.h"
#include "models/kv_scales.h"
#include "models/model_file_error.h"

namespace octet {

namespace {

using nlohmann::json;

class FileError {
 public:
  explicit FileError(std::string path) : path_(std::move(path)) {}
  [[noreturn]] void operator()(const std::string& problem) const {
    throw ModelFileError(path_, problem);
  }

 private:
  std::string path_;
};

/// Parses `text`, reporting the first duplicate object key (nlohmann keeps the last silently).
json parse_strict(const std::string& text, const FileError& fail) {
  struct Frame {
    std::set<std::string> keys;
    std::string name;  // the key this object is the value of ("" at the top level)
  };
  std::vector<Frame> stack;
  std::string last_key, duplicate;
  auto cb = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        stack.push_back({{}, last_key});
        last_key.clear();
        break;
      case json::parse_event_t::key:
        last_key = parsed.get<std::string>();
        if (!stack.empty() && !stack.back().keys.insert(last_key).second && duplicate.empty())
          duplicate = "duplicate key \"" + last_key + "\"" +
                      (stack.back().name.empty() ? std::string(" at the top level")
                                                 : " in \"" + stack.back().name + "\"");
        break;
      case json::parse_event_t::object_end:
        if (!stack.empty()) stack.pop_back();
        last_key.clear();
        break;
      default:
        last_key.clear();
        break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, cb);
  } catch (const json::exception& e) {  // parse_error, out_of_range (number overflow)
    fail(std::string("malformed JSON: ") + e.what());
  }
  if (!duplicate.empty()) fail(duplicate);
  if (!j.is_object()) fail("expected a JSON object at the top level");
  return j;
}

void check_keys(const json& obj, const std::set<std::string>& allowed, const std::string& where,
                const FileError& fail) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (allowed.count(it.key())) continue;
    std::string list;
    for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
    fail("unknown key \"" + it.key() + "\"" + where + " (expected " + list + ")");
  }
}

/// A layer index key: "0" or [1-9][0-9]*, < num_layers.
int64_t layer_index(const std::string& key, int64_t num_layers, const std::string& where,
                    const FileError& fail) {
  bool digits = !key.empty() && key.size() <= 18 && (key == "0" || key[0] != '0');
  for (char c : key) digits = digits && c >= '0' && c <= '9';
  if (!digits)
    fail("layer key \"" + key + "\"" + where + " is not a decimal layer index (e.g. \"0\")");
  const int64_t l = std::stoll(key);
  if (l >= num_layers)
    fail("layer " + key + where + ": index out of range (the model has " +
         std::to_string(num_layers) + " layers, 0.." + std::to_string(num_layers - 1) + ")");
  return l;
}

/// One finite, > 0 FP32 scale.
float scale_value(const json& v, const std::string& where, const FileError& fail) {
  if (!v.is_number()) fail(where + ": expected a number, got " + v.dump());
  const double d = v.get<double>();
  const auto f = static_cast<float>(d);
  if (!std::isfinite(d) || !std::isfinite(f))
    fail(where + ": value " + v.dump() + " is not finite as FP32 (scales must be finite and > 0)");
  if (!(f > 0.0f))
    fail(where + ": value " + v.dump() +
         (d > 0.0 ? " rounds to 0 in FP32" : " is not > 0") + " (scales must be finite and > 0)");
  return f;
}

/// A number (per tensor) or an array of 1 or num_kv_heads numbers.
std::vector<float> scale_list(const json& v, int64_t num_kv_heads, const std::string& where,
                              const FileError& fail) {
  if (!v.is_array()) return {scale_value(v, where, fail)};
  const auto n = static_cast<int64_t>(v.size());
  if (n != 1 && n != num_kv_heads)
    fail(where + ": " + std::to_string(n) + " values, expected 1 or num_kv_heads = " +
         std::to_string(num_kv_heads));
  std::vector<float> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(scale_value(v[i], where + "[" + std::to_string(i) + "]", fail));
  return out;
}

std::string optional_string(const json& j, const char* key, const FileError& fail) {
  auto it = j.find(key);
  if (it == j.end()) return "";
  if (!it->is_string()) fail(std::string("\"") + key + "\" must be a string, got " + it->dump());
  return it->get<std::string>();
}

void require_all_layers(const std::vector<bool>& seen, const std::string& where,
                        const FileError& fail) {
  for (size_t l = 0; l < seen.size(); ++l)
    if (!seen[l])
      fail("missing layer " + std::to_string(l) + where + " (every layer 0.." +
           std::to_string(seen.size() - 1) + " needs scales)");
}

/// kv_cache_dtype as written -> the FP8 dtype it names (nullopt for "", an unknown name fails).
std::optional<DType> scales_dtype(const std::string& name, const char* key,
                                  const FileError& fail) {
  if (name.empty()) return std::nullopt;
  if (name == "fp8" || name == "fp8_e4m3" || name == "float8_e4m3fn") return DType::FP8_E4M3;
  if (name == "fp8_e5m2" || name == "float8_e5m2") return DType::FP8_E5M2;
  fail(std::string(key) + " \"" + name + "\" is not an FP8 cache dtype (expected fp8_e4m3, " +
       "fp8, float8_e4m3fn, fp8_e5m2 or float8_e5m2)");
}

LayerScalesFile read_octet(const json& j, int64_t num_layers, int64_t num_kv_heads,
                           const FileError& fail) {
  check_keys(j, {"kv_cache_dtype", "model_type", "layers"}, " at the top level", fail);
  LayerScalesFile out;
  out.format = "octet";
  out.kv_cache_dtype = optional_string(j, "kv_cache_dtype", fail);
  out.dtype = scales_dtype(out.kv_cache_dtype, "kv_cache_dtype", fail);
  optional_string(j, "model_type", fail);
  auto layers = j.find("layers");
  if (layers == j.end()) fail("missing \"layers\" (or \"kv_cache\" for vLLM's legacy schema)");
  if (!layers->is_object()) fail("\"layers\" must be an object {\"0\": {...}, ...}");
  out.layers.resize(static_cast<size_t>(num_layers));
  std::vector<bool> seen(static_cast<size_t>(num_layers), false);
  for (auto it = layers->begin(); it != layers->end(); ++it) {
    const int64_t l = layer_index(it.key(), num_layers, " in \"layers\"", fail);
    const std::string where = "layer " + it.key();
    const json& e = it.value();
    if (!e.is_object())
      fail(where + ": expected {\"k_scale\": ..., \"v_scale\": ...}, got " + e.dump());
    check_keys(e, {"k_scale", "v_scale"}, " in " + where, fail);
    for (const char* key : {"k_scale", "v_scale"})
      if (!e.contains(key)) fail(where + ": missing \"" + key + "\"");
    seen[static_cast<size_t>(l)] = true;
    LayerKVScales& s = out.layers[static_cast<size_t>(l)];
    s.k_scale = scale_list(e["k_scale"], num_kv_heads, where + " k_scale", fail);
    s.v_scale = scale_list(e["v_scale"], num_kv_heads, where + " v_scale", fail);
  }
  require_all_layers(seen, " in \"layers\"", fail);
  return out;
}

LayerScalesFile read_vllm_legacy(const json& j, int64_t num_layers, const FileError& fail) {
  check_keys(j, {"model_type", "kv_cache"}, " at the top level of vLLM's legacy schema", fail);
  optional_string(j, "model_type", fail);
  const json& kv = j["kv_cache"];
  if (!kv.is_object()) fail("\"kv_cache\" must be an object {\"dtype\", \"scaling_factor\"}");
  check_keys(kv, {"dtype", "scaling_factor"}, " in \"kv_cache\"", fail);
  LayerScalesFile out;
  out.format = "vllm-quantization-param";
  out.kv_cache_dtype = optional_string(kv, "dtype", fail);
  if (out.kv_cache_dtype != "float8_e4m3fn")
    fail("kv_cache.dtype \"" + out.kv_cache_dtype +
         "\": vLLM's legacy schema holds float8_e4m3fn scales only");
  out.dtype = DType::FP8_E4M3;
  auto ranks = kv.find("scaling_factor");
  if (ranks == kv.end() || !ranks->is_object())
    fail("kv_cache.scaling_factor missing or not an object {tp_rank: {layer: scale}}");
  if (ranks->size() != 1 || !ranks->contains("0")) {
    std::string keys;
    for (auto it = ranks->begin(); it != ranks->end(); ++it)
      keys += (keys.empty() ? "\"" : ", \"") + it.key() + "\"";
    fail("kv_cache.scaling_factor has " + std::to_string(ranks->size()) +
         " tensor-parallel rank(s) (" + keys +
         "); octet runs one rank: only rank \"0\" may be present");
  }
  const json& layers = (*ranks)["0"];
  if (!layers.is_object()) fail("kv_cache.scaling_factor.\"0\" must be an object {layer: scale}");
  out.layers.resize(static_cast<size_t>(num_layers));
  std::vector<bool> seen(static_cast<size_t>(num_layers), false);
  const std::string in = " in kv_cache.scaling_factor.\"0\"";
  for (auto it = layers.begin(); it != layers.end(); ++it) {
    const int64_t l = layer_index(it.key(), num_layers, in, fail);
    const float s = scale_value(it.value(), "layer " + it.key() + " scaling_factor", fail);
    seen[static_cast<size_t>(l)] = true;
    out.layers[static_cast<size_t>(l)] = LayerKVScales{{s}, {s}};  // one scale for K and V
  }
  require_all_layers(seen, in, fail);
  return out;
}

}  // namespace

LayerScalesFile load_kv_scales_file(const std::string& path, int64_t num_layers,
                                    int64_t num_kv_heads, std::optional<DType> cache_dtype) {
  const FileError fail(path);
  if (num_layers < 1 || num_kv_heads < 1)
    throw std::invalid_argument("load_kv_scales_file: num_layers " + std::to_string(num_layers) +
                                ", num_kv_heads " + std::to_string(num_kv_heads));
  std::string text;
  try {
    text = read_file_bounded(path, kMaxScalesFileBytes);
  } catch (const FileReadError& e) {
    fail("cannot read the KV scales file: " + e.problem());
  }
  const json j = parse_strict(text, fail);
  LayerScalesFile out = j.contains("kv_cache") ? read_vllm_legacy(j, num_layers, fail)
                                               : read_octet(j, num_layers, num_kv_heads, fail);
  if (cache_dtype && out.dtype && *out.dtype != *cache_dtype) {
    const std::string key = out.format == "octet" ? "kv_cache_dtype" : "kv_cache.dtype";
    const char* want = kv_cache_dtype_name(*cache_dtype);
    fail(key + " \"" + out.kv_cache_dtype + "\": these scales were calibrated for an " +
         kv_cache_dtype_name(*out.dtype) + " KV cache, but this cache is " + want +
         " (its range differs by 128x); calibrate for it (octet calibrate --kv-cache-dtype " +
         want + ") or run with --kv-cache-dtype " + kv_cache_dtype_name(*out.dtype));
  }
  return out;
}

}  // namespace octet

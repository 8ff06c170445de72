// KV scales from checkpoint tensors and from a calibration pass (see kv_scales.h).
#include "models/kv_scales.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "kernels/common/dtype.h"
#include "models/checkpoint.h"
#include "models/llama.h"
#include "models/model_file_error.h"
#include "models/quant_config.h"

namespace octet {

namespace {

enum class Role { K, V, KV };

struct Variant {
  const char* suffix;  // after "model.layers.N.self_attn."
  Role role;
};

// The names vLLM's maybe_remap_kv_scale_name / get_cache_scale accept for Llama attention.
constexpr Variant kVariants[] = {
    {"k_scale", Role::K},             {"v_scale", Role::V},
    {"k_proj.k_scale", Role::K},      {"v_proj.v_scale", Role::V},
    {"k_proj.output_scale", Role::K}, {"v_proj.output_scale", Role::V},
    {"attn.k_scale", Role::K},        {"attn.v_scale", Role::V},
    {"kv_scale", Role::KV},
};

struct Match {
  int64_t layer = 0;  // INT64_MAX when the index does not fit
  Role role = Role::K;
};

/// "model.layers.<N>.self_attn.<suffix>" with N decimal (no leading zeros) and a known suffix.
std::optional<Match> match_scale_name(const std::string& name) {
  static const std::string kPrefix = "model.layers.", kMid = ".self_attn.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return std::nullopt;
  size_t i = kPrefix.size(), j = i;
  while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
  if (j == i || (name[i] == '0' && j - i > 1)) return std::nullopt;
  if (name.compare(j, kMid.size(), kMid) != 0) return std::nullopt;
  const std::string suffix = name.substr(j + kMid.size());
  for (const Variant& v : kVariants) {
    if (suffix != v.suffix) continue;
    Match m;
    m.role = v.role;
    m.layer = j - i > 18 ? std::numeric_limits<int64_t>::max() : std::stoll(name.substr(i, j - i));
    return m;
  }
  return std::nullopt;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

std::string values_str(const std::vector<float>& v) {
  std::ostringstream s;
  s << std::setprecision(9);
  if (v.size() == 1) {
    s << v[0];
    return s.str();
  }
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

[[noreturn]] void bad(const TensorView& t, const std::string& problem) {
  throw ModelFileError(t.file, "tensor " + t.name + ": " + problem);
}

/// 1 for a per-tensor shape (rank <= 3, all ones), num_kv_heads for [H], [H, 1] or [H, 1, 1],
/// 0 otherwise.
int64_t scale_count(const std::vector<int64_t>& shape, int64_t num_kv_heads) {
  if (shape.size() > 3) return 0;
  bool ones = true;
  for (int64_t d : shape) ones = ones && d == 1;
  if (ones) return 1;
  for (size_t i = 1; i < shape.size(); ++i)
    if (shape[i] != 1) return 0;
  return shape[0] == num_kv_heads ? num_kv_heads : 0;
}

/// Validates one scale tensor and returns its values (1 or num_kv_heads floats).
std::vector<float> read_scale(const TensorView& t, const QuantConfig& quant, int64_t num_kv_heads) {
  if (t.dtype != TensorDType::F32 && t.dtype != TensorDType::BF16 && t.dtype != TensorDType::F16)
    bad(t, std::string("dtype ") + dtype_name(t.dtype) + ", expected F32, BF16 or F16");
  const int64_t n = scale_count(t.shape, num_kv_heads);
  if (n == 0)
    bad(t, "shape " + shape_str(t.shape) + ", expected [] or [1] (per tensor) or [" +
               std::to_string(num_kv_heads) + "] or [" + std::to_string(num_kv_heads) +
               ", 1, 1] (per KV head, num_kv_heads = " + std::to_string(num_kv_heads) + ")");
  if (quant.kv_cache_scheme) {
    const std::string& strategy = quant.kv_cache_scheme->strategy;
    if (strategy == "tensor" && n > 1)
      bad(t, "shape " + shape_str(t.shape) +
                 " is per KV head, but quantization_config.kv_cache_scheme.strategy is "
                 "\"tensor\" (expected [1])");
    if (strategy == "attn_head" && n == 1 && num_kv_heads > 1)
      bad(t, "shape " + shape_str(t.shape) +
                 " is per tensor, but quantization_config.kv_cache_scheme.strategy is "
                 "\"attn_head\" (expected [" + std::to_string(num_kv_heads) + ", 1, 1])");
  }
  const std::vector<float> v = t.to_f32();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]) || !(v[i] > 0.0f)) {
      std::ostringstream s;
      s << "value " << (std::isnan(v[i]) ? "NaN" : "") << (std::isinf(v[i]) ? "inf" : "");
      if (std::isfinite(v[i])) s << std::setprecision(9) << v[i];
      s << " at index " << i << " (KV cache scales must be finite and > 0)";
      bad(t, s.str());
    }
  }
  return v;
}

struct Found {
  std::vector<float> values;
  const TensorView* tensor = nullptr;
};

void record(std::optional<Found>& slot, const Found& f, const char* what, int64_t layer) {
  if (!slot) {
    slot = f;
    return;
  }
  if (slot->values == f.values) return;  // the same scale written under two names
  bad(*f.tensor, "conflicts with tensor " + slot->tensor->name + " (" + slot->tensor->file +
                     "): layer " + std::to_string(layer) + " " + what + " " +
                     values_str(f.values) + " vs " + values_str(slot->values));
}

}  // namespace

std::vector<std::optional<LayerKVScales>> load_checkpoint_kv_scales(const HFCheckpoint& ckpt,
                                                                    const QuantConfig& quant,
                                                                    int64_t num_layers,
                                                                    int64_t num_kv_heads) {
  if (num_layers < 0 || num_kv_heads < 1)
    throw std::invalid_argument("load_checkpoint_kv_scales: num_layers " +
                                std::to_string(num_layers) + ", num_kv_heads " +
                                std::to_string(num_kv_heads));
  if (quant.kv_cache_scheme && !quant.kv_cache_scheme->symmetric)
    throw ModelFileError(ckpt.dir() + "/config.json",
                         "quantization_config.kv_cache_scheme.symmetric is false: asymmetric "
                         "(zero-point) FP8 KV cache quantization is not supported");

  std::vector<std::optional<Found>> k(static_cast<size_t>(num_layers));
  std::vector<std::optional<Found>> v(static_cast<size_t>(num_layers));
  for (const std::string& name : ckpt.tensor_names()) {  // sorted: deterministic errors
    const std::optional<Match> m = match_scale_name(name);
    if (!m) continue;
    const TensorView& t = *ckpt.find(name);
    if (m->layer >= num_layers)
      bad(t, "layer index out of range (the model has " + std::to_string(num_layers) +
                 " layers)");
    const Found f{read_scale(t, quant, num_kv_heads), &t};
    const auto l = static_cast<size_t>(m->layer);
    if (m->role != Role::V) record(k[l], f, "K scale", m->layer);
    if (m->role != Role::K) record(v[l], f, "V scale", m->layer);
  }

  std::vector<std::optional<LayerKVScales>> out(static_cast<size_t>(num_layers));
  for (size_t l = 0; l < out.size(); ++l) {
    if (k[l] && !v[l])
      bad(*k[l]->tensor, "layer " + std::to_string(l) + " has this K scale but no V scale");
    if (v[l] && !k[l])
      bad(*v[l]->tensor, "layer " + std::to_string(l) + " has this V scale but no K scale");
    if (k[l]) out[l] = LayerKVScales{k[l]->values, v[l]->values};
  }
  return out;
}

std::vector<LayerKVScales> calculate_kv_scales(const DenseKVCache& cache, int64_t num_tokens,
                                               int64_t num_layers, int64_t num_kv_heads,
                                               int64_t head_dim, DType dtype,
                                               bool per_head) {
  if (!dtype_is_fp8(dtype))
    throw std::invalid_argument(std::string("calculate_kv_scales: kv cache dtype ") +
                                (dtype == DType::BF16 ? "bf16" : "fp16") +
                                " is not FP8");
  if (num_layers < 1 || num_kv_heads < 1 || head_dim < 1)
    throw std::invalid_argument("calculate_kv_scales: num_layers, num_kv_heads and head_dim "
                                "must be >= 1");
  if (num_tokens < 1 || num_tokens > cache.max_tokens)
    throw std::invalid_argument("calculate_kv_scales: num_tokens " + std::to_string(num_tokens) +
                                " not in [1, " + std::to_string(cache.max_tokens) + "]");
  const int64_t row = num_kv_heads * head_dim;
  const auto expected = static_cast<size_t>(num_layers * cache.max_tokens * row);
  if (cache.k.size() != expected || cache.v.size() != expected)
    throw std::invalid_argument("calculate_kv_scales: cache holds " +
                                std::to_string(cache.k.size()) + " K and " +
                                std::to_string(cache.v.size()) + " V values, expected " +
                                std::to_string(expected) + " (num_layers x max_tokens x "
                                "num_kv_heads x head_dim)");

  const float range = fp8_max_value(dtype == DType::FP8_E4M3 ? DType::FP8_E4M3
                                                                     : DType::FP8_E5M2) /
                      kCalculatedKVScaleHeadroom;
  auto to_scale = [range](float amax) {
    const float s = amax / range;
    return s >= FLT_MIN ? s : 1.0f;  // all zero (or denormal-small): any scale works
  };
  // amax per head over positions [0, num_tokens) of one layer; x: [max_tokens, H, D].
  auto head_amax = [&](const float* x, int64_t layer, const char* what) {
    std::vector<float> amax(static_cast<size_t>(num_kv_heads), 0.0f);
    for (int64_t t = 0; t < num_tokens; ++t)
      for (int64_t h = 0; h < num_kv_heads; ++h) {
        const float* p = x + t * row + h * head_dim;
        float& m = amax[static_cast<size_t>(h)];
        for (int64_t d = 0; d < head_dim; ++d) {
          if (!std::isfinite(p[d]))
            throw std::runtime_error(std::string("calculate_kv_scales: ") + what + " of layer " +
                                     std::to_string(layer) + ", KV head " + std::to_string(h) +
                                     ", position " + std::to_string(t) + " is not finite");
          m = std::max(m, std::fabs(p[d]));
        }
      }
    return amax;
  };
  auto scales = [&](const std::vector<float>& amax) {
    std::vector<float> s;
    if (per_head) {
      for (float a : amax) s.push_back(to_scale(a));
    } else {
      float a = 0.0f;
      for (float x : amax) a = std::max(a, x);
      s.push_back(to_scale(a));
    }
    return s;
  };

  std::vector<LayerKVScales> out(static_cast<size_t>(num_layers));
  const int64_t layer_stride = cache.max_tokens * row;
  for (int64_t l = 0; l < num_layers; ++l) {
    out[static_cast<size_t>(l)].k_scale = scales(head_amax(cache.k.data() + l * layer_stride, l, "K"));
    out[static_cast<size_t>(l)].v_scale = scales(head_amax(cache.v.data() + l * layer_stride, l, "V"));
  }
  return out;
}

}  // namespace octet

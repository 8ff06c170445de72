#include "bench/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "models/config_json.h"
#include "models/gguf.h"
#include "models/model_config.h"

namespace octet::bench {

namespace {

struct Preset {
  const char* name;
  int64_t hidden, layers, heads, kv_heads, head_dim, inter, vocab;
  bool tied, qkv_bias;
  int64_t max_pos;
};

// From each model's config.json on the Hugging Face hub (meta-llama/Llama-3.1-8B-Instruct,
// Llama-3.1-70B-Instruct, Llama-3.3-70B-Instruct, Qwen/Qwen2.5-7B-Instruct,
// HuggingFaceTB/SmolLM2-135M-Instruct).
constexpr Preset kModels[] = {
    {"llama-3.1-8b", 4096, 32, 32, 8, 128, 14336, 128256, false, false, 131072},
    {"llama-3.1-70b", 8192, 80, 64, 8, 128, 28672, 128256, false, false, 131072},
    {"llama-3.3-70b", 8192, 80, 64, 8, 128, 28672, 128256, false, false, 131072},
    {"qwen2.5-7b", 3584, 28, 28, 4, 128, 18944, 152064, false, true, 32768},
    {"smollm2-135m", 576, 30, 9, 3, 64, 1536, 49152, true, false, 8192},
};

constexpr double kMiB = 1024.0 * 1024.0;

int64_t dtype_bytes(const std::string& dtype) { return dtype == "fp8" ? 1 : 2; }

/// a * b + c, or std::invalid_argument naming `what` when it overflows int64 (inputs >= 0).
int64_t mul_add(int64_t a, int64_t b, int64_t c, const char* what) {
  int64_t p = 0;
  if (__builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(p, c, &p))
    throw std::invalid_argument(std::string(what) + " overflows 64-bit arithmetic");
  return p;
}

ModelShape from_config(const ModelConfig& c, const std::string& name) {
  ModelShape m;
  m.name = name;
  m.hidden_size = c.hidden_size;
  m.num_hidden_layers = c.num_hidden_layers;
  m.num_attention_heads = c.num_attention_heads;
  m.num_key_value_heads = c.num_key_value_heads;
  m.head_dim = c.head_dim;
  m.intermediate_size = c.intermediate_size;
  m.vocab_size = c.vocab_size;
  m.tie_word_embeddings = c.tie_word_embeddings;
  m.qkv_bias = c.qkv_bias;
  m.max_position_embeddings = c.max_position_embeddings;
  m.layer_sliding_window = c.layer_sliding_window;
  return m;
}

}  // namespace

std::optional<ModelShape> model_preset(const std::string& name) {
  for (const Preset& p : kModels) {
    if (name != p.name) continue;
    ModelShape m;
    m.name = p.name;
    m.hidden_size = p.hidden;
    m.num_hidden_layers = p.layers;
    m.num_attention_heads = p.heads;
    m.num_key_value_heads = p.kv_heads;
    m.head_dim = p.head_dim;
    m.intermediate_size = p.inter;
    m.vocab_size = p.vocab;
    m.tie_word_embeddings = p.tied;
    m.qkv_bias = p.qkv_bias;
    m.max_position_embeddings = p.max_pos;
    return m;
  }
  return std::nullopt;
}

std::string model_preset_names() {
  std::string s;
  for (const Preset& p : kModels) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

ModelShape load_model_shape(const std::string& model) {
  if (auto p = model_preset(model)) return *p;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(model, ec))
    throw std::invalid_argument("--model '" + model + "' is neither a preset (" +
                                model_preset_names() + ") nor a file or directory");
  std::string config = model;
  if (fs::is_directory(model, ec)) config = (fs::path(model) / "config.json").string();
  if (fs::path(config).extension() == ".json")  // bounded read; errors name the file (exit 1)
    return from_config(ModelConfig::from_hf_config(read_config_json(config), config), model);
  return from_config(ModelConfig::from_gguf(GGUFFile::open(model)), model);
}

std::optional<DeviceSpec> device_preset(const std::string& name) {
  if (name == "h100-sxm-80gb") return DeviceSpec{name, 81559 * kMiB, 3.35e12};
  if (name == "h200-141gb") return DeviceSpec{name, 143771 * kMiB, 4.8e12};
  if (name == "a100-80gb") return DeviceSpec{name, 81920 * kMiB, 2.039e12};
  if (name == "l40s") return DeviceSpec{name, 46068 * kMiB, 0.864e12};
  if (name == "cpu") return DeviceSpec{name, 0, 0};
  return std::nullopt;
}

ParamCounts count_params(const ModelShape& m) {
  constexpr const char* kWhat = "the model's parameter count";
  auto ma = [&](int64_t a, int64_t b, int64_t c = 0) { return mul_add(a, b, c, kWhat); };
  for (int64_t v : {m.hidden_size, m.num_hidden_layers, m.num_attention_heads,
                    m.num_key_value_heads, m.head_dim, m.intermediate_size, m.vocab_size})
    if (v < 0) throw std::invalid_argument("the model has a negative dimension");
  ParamCounts c;
  const int64_t h = m.hidden_size, ff = m.intermediate_size;
  const int64_t q = ma(m.num_attention_heads, m.head_dim);
  const int64_t kv = ma(m.num_key_value_heads, m.head_dim);
  // q and o: h x q; k and v: h x kv; gate, up, down: h x ff.
  const int64_t per_layer_linear = ma(h, ma(2, q, ma(2, kv)), ma(ma(3, h), ff));
  const int64_t per_layer_out = ma(2, kv, ma(2, h, ma(2, ff, q)));
  const int64_t per_layer_other = ma(2, h, m.qkv_bias ? ma(2, kv, q) : 0);
  c.linear = ma(per_layer_linear, m.num_hidden_layers);
  c.linear_out_channels = ma(per_layer_out, m.num_hidden_layers);
  c.other = ma(per_layer_other, m.num_hidden_layers,
               ma(ma(m.vocab_size, h), m.tie_word_embeddings ? 1 : 2, h /* final norm */));
  ma(1, c.linear, c.other);  // total() fits
  return c;
}

std::vector<PlanRow> make_plan(const PlanInputs& in) {
  const ModelShape& m = in.model;
  if (m.num_hidden_layers <= 0 || m.num_key_value_heads <= 0 || m.head_dim <= 0)
    throw std::invalid_argument("the model has no layers or KV heads");
  if (in.max_model_len <= 0) throw std::invalid_argument("--max-model-len must be positive");
  if (in.batch_size <= 0) throw std::invalid_argument("--batch-size must be positive");
  if (in.tensor_parallel_size <= 0) throw std::invalid_argument("--tensor-parallel-size must be positive");
  if (!(in.device.memory_bytes > 0) || !(in.device.bandwidth_bytes_s > 0))
    throw std::invalid_argument("device '" + in.device.name + "' needs a memory size and a bandwidth");
  if (!(in.gpu_memory_utilization > 0 && in.gpu_memory_utilization <= 1))
    throw std::invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  for (int64_t l : in.skip_layers)
    if (l < 0 || l >= m.num_hidden_layers)
      throw std::invalid_argument("--kv-cache-dtype-skip-layers: layer " + std::to_string(l) +
                                  " is outside the model's " + std::to_string(m.num_hidden_layers));
  const int64_t tp = in.tensor_parallel_size;
  // KV heads per device: split over tp, replicated when tp exceeds the heads.
  const int64_t kv_heads_dev = std::max<int64_t>(1, (m.num_key_value_heads + tp - 1) / tp);
  const ParamCounts pc = count_params(m);
  std::vector<PlanRow> rows;
  for (const char* wd : {"bf16", "fp8"}) {
    for (const char* kd : {"bf16", "fp8"}) {
      PlanRow r;
      r.weight_dtype = wd;
      r.kv_cache_dtype = kd;
      r.selected = in.weight_dtype == wd && in.kv_cache_dtype == kd;
      // Every product checked: sizes come from files and flags.
      constexpr const char* kKv = "the KV cache size (model dimensions x --max-model-len)";
      int64_t per_seq = 0, per_seq_dev = 0, per_seq_full = 0, per_seq_full_dev = 0;
      for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
        const bool skip = std::find(in.skip_layers.begin(), in.skip_layers.end(), l) != in.skip_layers.end();
        const int64_t elem = skip ? 2 : dtype_bytes(kd);
        const int64_t per_token =
            mul_add(2 * elem, mul_add(m.num_key_value_heads, m.head_dim, 0, kKv), 0, kKv);
        const int64_t per_token_dev =
            mul_add(2 * elem, mul_add(kv_heads_dev, m.head_dim, 0, kKv), 0, kKv);
        const int64_t window = l < static_cast<int64_t>(m.layer_sliding_window.size())
                                   ? m.layer_sliding_window[static_cast<size_t>(l)] : 0;
        const int64_t kept = window > 0 ? std::min(window, in.max_model_len) : in.max_model_len;
        r.kv_bytes_per_token = mul_add(1, r.kv_bytes_per_token, per_token, kKv);
        if (window > 0) r.kv_bytes_per_token_window = mul_add(1, r.kv_bytes_per_token_window, per_token, kKv);
        per_seq = mul_add(per_token, kept, per_seq, kKv);
        per_seq_dev = mul_add(per_token_dev, kept, per_seq_dev, kKv);
        per_seq_full = mul_add(per_token, in.max_model_len, per_seq_full, kKv);
        per_seq_full_dev = mul_add(per_token_dev, in.max_model_len, per_seq_full_dev, kKv);
      }
      if (per_seq_dev <= 0) throw std::invalid_argument("the model has no KV cache");
      r.kv_bytes_per_sequence = per_seq;
      r.kv_bytes_per_sequence_per_device = per_seq_dev;
      // FP8 weights: linear weights 1 byte plus one FP32 scale per output channel; embeddings,
      // lm_head, norms and biases stay 16-bit (DESIGN.md, numerics).
      constexpr const char* kW = "the weight size";
      r.weight_bytes =
          std::string(wd) == "fp8"
              ? mul_add(4, pc.linear_out_channels, mul_add(2, pc.other, pc.linear, kW), kW)
              : mul_add(2, pc.total(), 0, kW);
      r.weight_bytes_per_device = r.weight_bytes / tp + (r.weight_bytes % tp != 0);
      const double budget = in.device.memory_bytes * in.gpu_memory_utilization - in.reserved_bytes -
                            static_cast<double>(r.weight_bytes_per_device);
      // Flags bound memory_bytes far below 2^63 (PlanConfig), but a DeviceSpec may come from
      // elsewhere: clamp before the conversion.
      r.kv_budget_bytes_per_device =
          budget > 0 ? static_cast<int64_t>(std::floor(std::min(budget, 0x1p62))) : 0;
      r.sequences_fit = r.kv_budget_bytes_per_device / per_seq_dev;
      r.kv_bytes_per_sequence_full_context = per_seq_full;
      r.sequences_fit_full_context = r.kv_budget_bytes_per_device / per_seq_full_dev;
      r.batch_fits = in.batch_size <= r.sequences_fit;
      r.bytes_per_decode_step =
          mul_add(in.batch_size, per_seq_dev, r.weight_bytes_per_device,
                  "the bytes per decode step (--batch-size x KV per sequence)");
      const double step_s = static_cast<double>(r.bytes_per_decode_step) / in.device.bandwidth_bytes_s;
      r.decode_step_floor_ms = step_s * 1000;
      r.decode_tokens_per_s_floor = static_cast<double>(in.batch_size) / step_s;
      rows.push_back(r);
    }
  }
  return rows;
}

namespace {

std::string gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

}  // namespace

std::string plan_table(const PlanInputs& in, const std::vector<PlanRow>& rows) {
  std::string s;
  char buf[512];
  const ModelShape& m = in.model;
  std::snprintf(buf, sizeof buf,
                "model %s: %lld layers, hidden %lld, %lld heads, %lld KV heads x head_dim %lld, "
                "intermediate %lld, vocab %lld, %.3f B parameters\n",
                m.name.c_str(), (long long)m.num_hidden_layers, (long long)m.hidden_size,
                (long long)m.num_attention_heads, (long long)m.num_key_value_heads,
                (long long)m.head_dim, (long long)m.intermediate_size, (long long)m.vocab_size,
                static_cast<double>(count_params(m).total()) / 1e9);
  s += buf;
  std::snprintf(buf, sizeof buf,
                "device %s: %s, %.3f TB/s; tensor_parallel_size %lld, gpu_memory_utilization "
                "%.2f, reserved %s per device\n",
                in.device.name.c_str(), gib(in.device.memory_bytes).c_str(),
                in.device.bandwidth_bytes_s / 1e12, (long long)in.tensor_parallel_size,
                in.gpu_memory_utilization, gib(in.reserved_bytes).c_str());
  s += buf;
  std::snprintf(buf, sizeof buf, "max_model_len %lld tokens, batch_size %lld%s\n\n",
                (long long)in.max_model_len, (long long)in.batch_size,
                in.skip_layers.empty() ? "" : ", skip layers keep 16-bit KV");
  s += buf;
  std::snprintf(buf, sizeof buf, "%-34s", "weights / kv_cache_dtype");
  s += buf;
  for (const PlanRow& r : rows) {
    std::snprintf(buf, sizeof buf, "%16s", ((r.selected ? "*" : "") + r.weight_dtype + "/" + r.kv_cache_dtype).c_str());
    s += buf;
  }
  s += "\n";
  auto line = [&](const char* label, auto value) {
    std::snprintf(buf, sizeof buf, "%-34s", label);
    s += buf;
    for (const PlanRow& r : rows) {
      std::snprintf(buf, sizeof buf, "%16s", value(r).c_str());
      s += buf;
    }
    s += "\n";
  };
  auto num = [](double v, const char* fmt) {
    char b[64];
    std::snprintf(b, sizeof b, fmt, v);
    return std::string(b);
  };
  line("KV per token (KiB)", [&](const PlanRow& r) { return num(r.kv_bytes_per_token / 1024.0, "%.1f"); });
  const bool any_window = std::any_of(rows.begin(), rows.end(), [](const PlanRow& r) {
    return r.kv_bytes_per_token_window > 0;
  });
  if (any_window)
    line("  in sliding-window layers (KiB)", [&](const PlanRow& r) { return num(r.kv_bytes_per_token_window / 1024.0, "%.1f"); });
  line("KV per sequence (GiB)", [&](const PlanRow& r) { return num(r.kv_bytes_per_sequence / 1073741824.0, "%.3f"); });
  line("KV per sequence per device (GiB)", [&](const PlanRow& r) { return num(r.kv_bytes_per_sequence_per_device / 1073741824.0, "%.3f"); });
  line("weights per device (GiB)", [&](const PlanRow& r) { return num(r.weight_bytes_per_device / 1073741824.0, "%.3f"); });
  line("KV budget per device (GiB)", [&](const PlanRow& r) { return num(r.kv_budget_bytes_per_device / 1073741824.0, "%.3f"); });
  line("sequences that fit", [&](const PlanRow& r) { return std::to_string(r.sequences_fit); });
  const bool hybrid = std::any_of(in.model.layer_sliding_window.begin(),
                                  in.model.layer_sliding_window.end(),
                                  [&](int64_t w) { return w > 0 && w < in.max_model_len; });
  if (hybrid)
    line("  if windows kept all context", [&](const PlanRow& r) {
      return std::to_string(r.sequences_fit_full_context);
    });
  line("batch_size fits", [&](const PlanRow& r) { return std::string(r.batch_fits ? "yes" : "no"); });
  line("bytes read per decode step (GiB)", [&](const PlanRow& r) { return num(r.bytes_per_decode_step / 1073741824.0, "%.3f"); });
  line("decode step floor (ms)", [&](const PlanRow& r) { return num(r.decode_step_floor_ms, "%.3f"); });
  line("decode floor (tokens/s)", [&](const PlanRow& r) { return num(r.decode_tokens_per_s_floor, "%.1f"); });
  s += "(* = --weight-dtype / --kv-cache-dtype; floors: every byte read once at peak bandwidth)\n";
  return s;
}

nlohmann::json plan_json(const PlanInputs& in, const std::vector<PlanRow>& rows) {
  nlohmann::json j;
  const ModelShape& m = in.model;
  j["model"] = {{"name", m.name}, {"hidden_size", m.hidden_size},
                {"num_hidden_layers", m.num_hidden_layers},
                {"num_attention_heads", m.num_attention_heads},
                {"num_key_value_heads", m.num_key_value_heads}, {"head_dim", m.head_dim},
                {"intermediate_size", m.intermediate_size}, {"vocab_size", m.vocab_size},
                {"tie_word_embeddings", m.tie_word_embeddings}, {"num_parameters", count_params(m).total()}};
  j["inputs"] = {{"device", in.device.name}, {"device_memory_bytes", in.device.memory_bytes},
                 {"bandwidth_bytes_per_s", in.device.bandwidth_bytes_s},
                 {"tensor_parallel_size", in.tensor_parallel_size},
                 {"max_model_len", in.max_model_len}, {"batch_size", in.batch_size},
                 {"gpu_memory_utilization", in.gpu_memory_utilization},
                 {"reserved_bytes", in.reserved_bytes}, {"kv_cache_dtype_skip_layers", in.skip_layers},
                 {"weight_dtype", in.weight_dtype}, {"kv_cache_dtype", in.kv_cache_dtype}};
  nlohmann::json plans = nlohmann::json::array();
  for (const PlanRow& r : rows)
    plans.push_back({{"weight_dtype", r.weight_dtype}, {"kv_cache_dtype", r.kv_cache_dtype},
                     {"kv_bytes_per_token", r.kv_bytes_per_token},
                     {"kv_bytes_per_sequence", r.kv_bytes_per_sequence},
                     {"kv_bytes_per_sequence_per_device", r.kv_bytes_per_sequence_per_device},
                     {"kv_bytes_per_sequence_full_context", r.kv_bytes_per_sequence_full_context},
                     {"kv_bytes_per_token_window", r.kv_bytes_per_token_window},
                     {"sequences_fit_full_context", r.sequences_fit_full_context},
                     {"weight_bytes", r.weight_bytes},
                     {"weight_bytes_per_device", r.weight_bytes_per_device},
                     {"kv_budget_bytes_per_device", r.kv_budget_bytes_per_device},
                     {"sequences_fit", r.sequences_fit}, {"batch_fits", r.batch_fits},
                     {"bytes_per_decode_step", r.bytes_per_decode_step},
                     {"decode_step_floor_ms", r.decode_step_floor_ms},
                     {"decode_tokens_per_s_floor", r.decode_tokens_per_s_floor},
                     {"selected", r.selected}});
  j["plans"] = plans;
  return j;
}

}  // namespace octet::bench

#include "models/dummy_weights.h"

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "kernels/common/fp8.h"
#include "models/checkpoint.h"
#include "models/model_file_error.h"
#include "models/model_presets.h"

namespace octet {

// The public entry of LlamaModel's one build path for any WeightSource (declared in llama.h;
// defined here so that the recipe's file stays as it is).
LlamaModel LlamaModel::load(const WeightSource& source, ModelConfig config, QuantConfig quant,
                            const LoadOptions& options) {
  return build(source, std::move(config), std::move(quant), options);
}

namespace {

// splitmix64's finalizer (Steele, Lea, Flood 2014): a counter through it is a good stream.
uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t name_key(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return mix(mix(seed) ^ h);
}

uint64_t row_key(uint64_t key, int64_t row) {
  return mix(key ^ (static_cast<uint64_t>(row) * 0xD1B54A32D192ED03ull));
}

// The standard normal quantile of p, by bisection on erfc (256 values, once).
double normal_quantile(double p) {
  double lo = -10.0, hi = 10.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// Byte -> E4M3 code of the normal quantile (b + 0.5) / 256 scaled so the largest is 448; and
// the standard deviation of the codes' values (uniform over bytes).
struct CodeTable {
  std::array<uint8_t, 256> code{};
  std::array<float, 256> unit{};  // code's value / std: mean 0, variance 1
  double stddev = 0.0;
  CodeTable() {
    const double zmax = normal_quantile(255.5 / 256.0);
    double sum2 = 0.0;
    std::array<float, 256> value{};
    for (int b = 0; b < 256; ++b) {
      const double z = normal_quantile((b + 0.5) / 256.0);
      code[b] = fp8_e4m3_from_float(static_cast<float>(z / zmax * 448.0));
      value[b] = fp8_e4m3_to_float(code[b]);
      sum2 += static_cast<double>(value[b]) * value[b];
    }
    stddev = std::sqrt(sum2 / 256.0);  // the table is symmetric: mean 0
    for (int b = 0; b < 256; ++b) unit[b] = static_cast<float>(value[b] / stddev);
  }
};

const CodeTable& table() {
  static const CodeTable t;
  return t;
}

// n codes of one row into out (byte i of counter word i / 8).
void row_codes(uint64_t key, int64_t n, uint8_t* out) {
  const CodeTable& t = table();
  int64_t i = 0;
  for (uint64_t word = 0; i < n; ++word) {
    uint64_t x = mix(key + word);
    for (int b = 0; b < 8 && i < n; ++b, ++i, x >>= 8) out[i] = t.code[x & 0xFF];
  }
}

// n values ~ N(0, sigma^2) (truncated at the table's 2.9 sigma) of one row into out.
void row_values(uint64_t key, int64_t n, float sigma, float* out) {
  const CodeTable& t = table();
  int64_t i = 0;
  for (uint64_t word = 0; i < n; ++word) {
    uint64_t x = mix(key + word);
    for (int b = 0; b < 8 && i < n; ++b, ++i, x >>= 8) out[i] = t.unit[x & 0xFF] * sigma;
  }
}

enum class Kind { Linear, Embedding, LmHead, Norm, Bias };

struct TensorSpec {
  Kind kind;
  std::vector<int64_t> shape;
};

bool is_config_json(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) &&
         std::filesystem::path(path).filename() == "config.json";
}

}  // namespace

DummyModelSpec find_dummy_model(const std::string& model) {
  DummyModelSpec spec;
  if (std::optional<ModelPreset> p = find_model_preset(model)) {
    spec.config = std::move(p->config);
    spec.label = "preset " + p->name;
    spec.vocab_from_tokenizer = p->vocab_from_tokenizer;
    return spec;
  }
  std::string file;
  if (is_hf_checkpoint_dir(model)) {
    file = model + "/config.json";
    spec.dir = model;
  } else if (is_config_json(model)) {
    file = model;
    spec.dir = std::filesystem::path(model).parent_path().string();
    if (spec.dir.empty()) spec.dir = ".";
  } else {
    std::string names;
    for (const std::string& n : model_preset_names()) names += (names.empty() ? "" : ", ") + n;
    throw std::invalid_argument("--load-format dummy: --model '" + model +
                                "' is neither a preset (" + names +
                                ") nor a directory holding config.json nor a config.json file");
  }
  std::ifstream in(file);
  if (!in) throw ModelFileError(file, "cannot read");
  spec.config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!spec.config.is_object()) throw ModelFileError(file, "not a JSON object");
  spec.label = file;
  return spec;
}

ModelConfig dummy_model_config(const DummyModelSpec& spec, int64_t tokenizer_vocab) {
  nlohmann::json j = spec.config;
  if (spec.vocab_from_tokenizer) j["vocab_size"] = tokenizer_vocab;
  return ModelConfig::from_hf_config(j, spec.label);
}

QuantConfig dummy_quant_config(ScaleGranularity granularity) {
  QuantConfig q;
  q.quant_method = "compressed-tensors";
  q.weights_fp8 = true;
  q.weight_granularity = granularity;
  q.activation_scheme = ActivationScheme::DynamicPerToken;
  q.targets = {"Linear"};
  q.ignore = {"lm_head"};
  return q;
}

struct DummyWeightSource::Impl {
  ModelConfig config;
  uint64_t seed = 0;
  ScaleGranularity granularity = ScaleGranularity::PerRow;
  std::string label;
  std::map<std::string, TensorSpec> tensors;  // HF name -> what it is and its shape
  // raw()'s last weight and last scale (load_fp8_linear holds both views at once).
  mutable std::vector<uint8_t> codes;
  mutable std::vector<float> scales;
  mutable TensorView codes_view, scales_view;

  void add(const std::string& name, Kind kind, std::vector<int64_t> shape) {
    tensors[name] = TensorSpec{kind, std::move(shape)};
  }
  const TensorSpec* find(const std::string& name) const {
    const auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
};

DummyWeightSource::DummyWeightSource(const ModelConfig& c, uint64_t seed,
                                     ScaleGranularity granularity, std::string label)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.config = c;
  m.seed = seed;
  m.granularity = granularity;
  m.label = std::move(label);
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, ffn = c.intermediate_size;
  m.add("model.embed_tokens.weight", Kind::Embedding, {c.vocab_size, h});
  m.add("model.norm.weight", Kind::Norm, {h});
  if (!c.tie_word_embeddings) m.add("lm_head.weight", Kind::LmHead, {c.vocab_size, h});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    m.add(p + "input_layernorm.weight", Kind::Norm, {h});
    m.add(p + "post_attention_layernorm.weight", Kind::Norm, {h});
    const auto linear = [&](const std::string& module, int64_t out, int64_t in, bool bias) {
      m.add(p + module + ".weight", Kind::Linear, {out, in});
      if (bias) m.add(p + module + ".bias", Kind::Bias, {out});
    };
    linear("self_attn.q_proj", q, h, c.qkv_bias);
    linear("self_attn.k_proj", kv, h, c.qkv_bias);
    linear("self_attn.v_proj", kv, h, c.qkv_bias);
    linear("self_attn.o_proj", h, q, c.o_proj_bias);
    linear("mlp.gate_proj", ffn, h, c.mlp_bias);
    linear("mlp.up_proj", ffn, h, c.mlp_bias);
    linear("mlp.down_proj", h, ffn, c.mlp_bias);
  }
}

DummyWeightSource::~DummyWeightSource() = default;

const std::string& DummyWeightSource::path() const { return impl_->label; }

bool DummyWeightSource::has(const std::string& name) const {
  return impl_->find(name) != nullptr;
}

std::vector<float> DummyWeightSource::load_f32(const std::string& name,
                                               const std::vector<int64_t>& shape) const {
  const Impl& m = *impl_;
  const TensorSpec* t = m.find(name);
  if (!t || t->kind == Kind::Linear)
    throw ModelFileError(m.label, "missing tensor " + name);
  if (t->shape != shape)
    throw ModelFileError(m.label, "tensor " + name + " has shape " + shape_str(t->shape) +
                                      ", expected " + shape_str(shape));
  const int64_t rows = t->shape.size() == 2 ? t->shape[0] : 1, cols = t->shape.back();
  std::vector<float> v(static_cast<size_t>(rows * cols));
  if (t->kind == Kind::Norm) {
    std::fill(v.begin(), v.end(), 1.0f);
    return v;
  }
  const float sigma = t->kind == Kind::Embedding ? 1.0f
                      : t->kind == Kind::LmHead
                          ? 1.0f / std::sqrt(static_cast<float>(m.config.hidden_size))
                          : 0.02f;
  const uint64_t key = name_key(m.seed, name);
  for (int64_t r = 0; r < rows; ++r) row_values(row_key(key, r), cols, sigma, v.data() + r * cols);
  return v;
}

const TensorView* DummyWeightSource::raw(const std::string& name) const {
  const Impl& m = *impl_;
  constexpr const char kScale[] = ".weight_scale";
  const bool is_scale = name.size() > sizeof(kScale) - 1 &&
                        name.compare(name.size() - (sizeof(kScale) - 1), std::string::npos,
                                     kScale) == 0;
  const std::string weight = is_scale ? name.substr(0, name.size() - 6) : name;  // "_scale"
  const TensorSpec* t = m.find(weight);
  if (!t || t->kind != Kind::Linear) return nullptr;
  const int64_t out = t->shape[0], in = t->shape[1];
  const uint64_t key = name_key(m.seed, weight);
  if (is_scale) {
    // s[r] = jitter[r] / (sqrt(in) * table std): W[r, :] = code * s[r] ~ N(0, jitter^2 / in).
    const double base = 1.0 / (std::sqrt(static_cast<double>(in)) * table().stddev);
    const uint64_t jitter_key = name_key(m.seed, weight + ".jitter");
    m.scales.assign(m.granularity == ScaleGranularity::PerRow ? static_cast<size_t>(out) : 1, 0);
    for (size_t r = 0; r < m.scales.size(); ++r) {
      const double u = static_cast<double>(mix(jitter_key + r) >> 11) * 0x1.0p-53;  // [0, 1)
      m.scales[r] = static_cast<float>(
          base * (m.granularity == ScaleGranularity::PerRow ? 0.75 + 0.5 * u : 1.0));
    }
    m.scales_view = TensorView{name, TensorDType::F32,
                               {static_cast<int64_t>(m.scales.size()), 1},
                               reinterpret_cast<const uint8_t*>(m.scales.data()),
                               m.scales.size() * sizeof(float), m.label};
    return &m.scales_view;
  }
  m.codes.clear();
  m.codes.shrink_to_fit();  // the previous weight goes before this one is made
  m.codes.resize(static_cast<size_t>(out * in));
  for (int64_t r = 0; r < out; ++r) row_codes(row_key(key, r), in, m.codes.data() + r * in);
  m.codes_view = TensorView{name, TensorDType::F8_E4M3, {out, in}, m.codes.data(),
                            m.codes.size(), m.label};
  return &m.codes_view;
}

LlamaModel load_dummy_model(const ModelConfig& config, int64_t seed, const LoadOptions& options) {
  const uint64_t s = seed < 0 ? kDefaultDummySeed : static_cast<uint64_t>(seed);
  const DummyWeightSource src(config, s, options.weight_granularity, "dummy weights (seed " +
                                                                         std::to_string(s) + ")");
  return LlamaModel::load(src, config, dummy_quant_config(options.weight_granularity), options);
}

}  // namespace octet

#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/ops.h"
#include "models/checkpoint.h"
#include "models/gguf.h"
#include "models/quant_validate.h"
#include "models/weight_source.h"

namespace octet {

namespace {

bool online_fp8(const LoadOptions& o, const QuantConfig& q) {
  return o.quantization != "none" && !q.weights_fp8;
}

// A linear layer stored as FP8 in the checkpoint (compressed-tensors / fp8): codes, scales
// and, for static activations, input_scale; shapes were checked by validate_quantized_tensors.
LinearWeight load_fp8_linear(const WeightSource& src, const QuantConfig& q,
                             const LoadOptions& o, LinearWeight w) {
  const std::string wname = w.name + ".weight";
  const TensorView* t = src.raw(wname);
  const TensorView* s = src.raw(w.name + ".weight_scale");
  if (!t || t->dtype != TensorDType::F8_E4M3 || !s)
    throw ModelFileError(src.path(), "quantized tensor " + wname + " or its weight_scale is "
                                     "missing or not F8_E4M3");
  w.w_fp8.assign(t->data, t->data + t->nbytes);
  for (size_t i = 0; i < w.w_fp8.size(); ++i)
    if ((w.w_fp8[i] & 0x7F) == 0x7F)
      throw ModelFileError(t->file, "tensor " + wname + " holds the E4M3 NaN code 0x" +
                                        (w.w_fp8[i] == 0x7F ? std::string("7F") : "FF") +
                                        " at index " + std::to_string(i));
  w.w_scale = s->to_f32();
  w.w_granularity = static_cast<int64_t>(w.w_scale.size()) == w.out_features
                        ? ScaleGranularity::PerRow
                        : ScaleGranularity::PerTensor;
  w.format = DType::FP8_E4M3;
  if (q.activation_scheme == ActivationScheme::StaticPerTensor) {
    const TensorView* in = src.raw(w.name + ".input_scale");
    if (!in) throw ModelFileError(src.path(), "missing tensor " + w.name + ".input_scale");
    w.static_input = true;
    w.input_scale = in->to_f32().at(0);
  }
  if (q.activation_scheme == ActivationScheme::None || o.quantization == "none") {
    // Weight-only FP8, or FP32 requested: dequantize once (w = q * s) and run FP32.
    w.w_f32.resize(w.w_fp8.size());
    for (int64_t r = 0; r < w.out_features; ++r) {
      const float sc = w.w_scale[w.w_granularity == ScaleGranularity::PerRow ? r : 0];
      for (int64_t c = 0; c < w.in_features; ++c)
        w.w_f32[r * w.in_features + c] = fp8_e4m3_to_float(w.w_fp8[r * w.in_features + c]) * sc;
    }
    w.format = DType::F32;
    w.w_fp8.clear();
    w.w_scale.clear();
    w.static_input = false;
  }
  return w;
}

// `module`.bias [out] into w.bias (FP32 on every path: linear_forward adds it after the GEMM).
void load_bias(const WeightSource& src, const std::string& module, LinearWeight& w) {
  w.bias = src.load_f32(module + ".bias", {w.out_features});
  for (size_t i = 0; i < w.bias.size(); ++i)
    if (!std::isfinite(w.bias[i]))
      throw ModelFileError(src.path(), "tensor " + module + ".bias holds a non-finite value (" +
                                           std::to_string(w.bias[i]) + ") at index " +
                                           std::to_string(i));
}

LinearWeight load_linear(const WeightSource& src, const QuantConfig& q, const LoadOptions& o,
                         const std::string& module, int64_t out, int64_t in,
                         bool bias = false) {
  LinearWeight w;
  w.name = module;
  w.out_features = out;
  w.in_features = in;
  if (bias) load_bias(src, module, w);
  if (q.weights_fp8 && q.is_quantized(module)) return load_fp8_linear(src, q, o, std::move(w));
  {
    const std::vector<float> v = src.load_f32(module + ".weight", {out, in});
    w.w_f32.assign(v.begin(), v.end());
  }
  for (size_t i = 0; i < w.w_f32.size(); ++i)
    if (!std::isfinite(w.w_f32[i]))
      throw ModelFileError(src.path(), "tensor " + module + ".weight holds a non-finite value (" +
                                           std::to_string(w.w_f32[i]) + ") at index " +
                                           std::to_string(i));
  w.format = DType::F32;
  if (online_fp8(o, q))
    quantize_linear_fp8(w, o.weight_granularity, src.arithmetic(module + ".weight"));
  return w;
}

void to_bf16(LinearWeight& w) {
  w.w_bf16.resize(w.w_f32.size());
  for (size_t i = 0; i < w.w_f32.size(); ++i) w.w_bf16[i] = float_to_bf16(w.w_f32[i]);
  w.format = DType::BF16;
  w.w_f32.clear();
  w.w_f32.shrink_to_fit();
}

}  // namespace

LlamaModel LlamaModel::load(const GGUFFile& file, const LoadOptions& options) {
  return build(*make_gguf_weight_source(file), ModelConfig::from_gguf(file), QuantConfig{},
               options);
}

LlamaModel LlamaModel::load(const HFCheckpoint& checkpoint, const LoadOptions& options) {
  const std::string config_path = checkpoint.dir() + "/config.json";
  ModelConfig config = ModelConfig::from_hf_config(checkpoint.config(), config_path);
  QuantConfig quant = QuantConfig::from_hf_config(checkpoint.config(), config_path);
  if (quant.weights_fp8) validate_quantized_tensors(quant, checkpoint, config);
  return build(*make_hf_weight_source(checkpoint), std::move(config), std::move(quant), options);
}

LlamaModel LlamaModel::build(const WeightSource& src, ModelConfig config, QuantConfig quant,
                             const LoadOptions& options) {
  if (options.quantization != "auto" && options.quantization != "fp8" &&
      options.quantization != "none")
    throw std::invalid_argument("quantization must be auto, fp8 or none, got '" +
                                options.quantization + "'");
  LlamaModel m;
  m.config_ = std::move(config);
  m.quant_ = std::move(quant);
  const ModelConfig& c = m.config_;
  const QuantConfig& q = m.quant_;
  const int64_t h = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim,
                kv_dim = c.num_key_value_heads * c.head_dim, ffn = c.intermediate_size;
  LlamaWeights& w = m.weights_;
  w.embed_tokens = src.load_f32("model.embed_tokens.weight", {c.vocab_size, h});
  w.norm = src.load_f32("model.norm.weight", {h});
  if (!c.tie_word_embeddings && !src.has("lm_head.weight"))
    throw ModelFileError(src.path(), "missing tensor lm_head.weight (tie_word_embeddings is "
                                     "false)");
  if (c.tie_word_embeddings) {
    w.lm_head.name = "lm_head";
    w.lm_head.out_features = c.vocab_size;
    w.lm_head.in_features = h;
    w.lm_head.w_f32.assign(w.embed_tokens.begin(), w.embed_tokens.end());
  } else {
    LoadOptions keep = options;
    keep.quantization = "none";  // lm_head stays 16-bit unless the checkpoint quantizes it
    w.lm_head = load_linear(src, q, q.weights_fp8 ? options : keep, "lm_head", c.vocab_size, h);
  }
  // lm_head "stays 16-bit" on the FP8 path; FP32 on the reference path.
  if (options.quantization != "none" && w.lm_head.format == DType::F32) to_bf16(w.lm_head);

  const std::string last = "model.layers." + std::to_string(c.num_hidden_layers - 1) +
                           ".input_layernorm.weight";
  if (!src.has(last))  // checked before allocating per layer: a corrupt count fails fast
    throw ModelFileError(src.path(), "num_hidden_layers is " +
                                         std::to_string(c.num_hidden_layers) +
                                         " but there is no tensor " + last);
  w.layers.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LlamaLayerWeights& l = w.layers[i];
    l.attn_norm = src.load_f32(p + "input_layernorm.weight", {h});
    l.q_proj = load_linear(src, q, options, p + "self_attn.q_proj", q_dim, h, c.qkv_bias);
    l.k_proj = load_linear(src, q, options, p + "self_attn.k_proj", kv_dim, h, c.qkv_bias);
    l.v_proj = load_linear(src, q, options, p + "self_attn.v_proj", kv_dim, h, c.qkv_bias);
    l.o_proj = load_linear(src, q, options, p + "self_attn.o_proj", h, q_dim, c.o_proj_bias);
    l.ffn_norm = src.load_f32(p + "post_attention_layernorm.weight", {h});
    l.gate_proj = load_linear(src, q, options, p + "mlp.gate_proj", ffn, h, c.mlp_bias);
    l.up_proj = load_linear(src, q, options, p + "mlp.up_proj", ffn, h, c.mlp_bias);
    l.down_proj = load_linear(src, q, options, p + "mlp.down_proj", h, ffn, c.mlp_bias);
  }
  m.inv_freq_ = c.rope_inv_freq();
  m.rope_layout_ = src.rope_layout();
  return m;
}

std::string LlamaModel::linear_format() const {
  const LinearWeight& w = weights_.layers.at(0).q_proj;
  if (w.format != DType::FP8_E4M3) return "fp32";
  return std::string("fp8-w8a8-") + (w.static_input ? "static" : "dynamic") +
         (w.w_granularity == ScaleGranularity::PerRow ? "-channel" : "-tensor");
}

int64_t LlamaModel::decode_weight_bytes() const {
  int64_t bytes = weights_.lm_head.weight_bytes();
  for (const LlamaLayerWeights& l : weights_.layers)
    for (const LinearWeight* w : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj,
                                  &l.up_proj, &l.down_proj})
      bytes += w->weight_bytes();
  return bytes;
}

DenseKVCache LlamaModel::new_cache(int64_t max_tokens) const {
  const ModelConfig& c = config_;
  DenseKVCache cache;
  cache.max_tokens = max_tokens;
  const size_t n = static_cast<size_t>(c.num_hidden_layers * max_tokens * c.num_key_value_heads *
                                       c.head_dim);
  cache.k.assign(n, 0.0f);
  cache.v.assign(n, 0.0f);
  return cache;
}

std::vector<float> LlamaModel::forward(const int32_t* tokens, int64_t n, int64_t start_pos,
                                       DenseKVCache& cache, bool all_logits) const {
  const ModelConfig& c = config_;
  if (n <= 0) throw std::invalid_argument("forward: no tokens");
  if (start_pos < 0 || start_pos + n > cache.max_tokens)
    throw std::invalid_argument("forward: positions " + std::to_string(start_pos) + ".." +
                                std::to_string(start_pos + n - 1) + " exceed the cache of " +
                                std::to_string(cache.max_tokens) + " tokens");
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
      throw std::invalid_argument("token id " + std::to_string(tokens[i]) +
                                  " is outside the vocabulary [0, " +
                                  std::to_string(c.vocab_size) + ")");

  const int64_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads,
                q_dim = nh * hd, kv_dim = nkv * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[i] = start_pos + i;
  const AttendFn attend = [&](int64_t layer, const float* q, const float* k, const float* v,
                              float* attn) {
    // k_cache/v_cache of this layer: [max_tokens, nkv, hd]
    float* k_cache = cache.k.data() + layer * cache.max_tokens * kv_dim;
    float* v_cache = cache.v.data() + layer * cache.max_tokens * kv_dim;
    std::copy_n(k, n * kv_dim, k_cache + start_pos * kv_dim);
    std::copy_n(v, n * kv_dim, v_cache + start_pos * kv_dim);
    auto one = [&](int64_t i) {
      const int64_t window = c.layer_sliding_window[layer];
      const int64_t end = start_pos + i + 1;  // causal: positions < end
      const int64_t begin = window > 0 && end > window ? end - window : 0;
      cpu::attention(q + i * q_dim, k_cache + begin * kv_dim, v_cache + begin * kv_dim,
                     attn + i * q_dim, nh, nkv, hd, end - begin, scale);
    };
    if (n == 1) {
      one(0);  // decode: cpu::attention spreads the heads over threads
    } else {
#pragma omp parallel for schedule(dynamic)
      for (int64_t i = 0; i < n; ++i) one(i);
    }
  };
  std::vector<int64_t> rows;
  for (int64_t i = all_logits ? 0 : n - 1; i < n; ++i) rows.push_back(i);
  return run_decoder(tokens, n, positions.data(), attend, rows);
}

std::vector<float> LlamaModel::run_decoder(const int32_t* tokens, int64_t n,
                                           const int64_t* positions, const AttendFn& attend,
                                           const std::vector<int64_t>& rows) const {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads,
                nkv = c.num_key_value_heads, q_dim = nh * hd, kv_dim = nkv * hd,
                ffn = c.intermediate_size;
  LinearScratch scratch;

  // Activations: [n, width] row-major, one row per token.
  std::vector<float> x(n * h), xn(n * h), q(n * q_dim), k(n * kv_dim), v(n * kv_dim),
      attn(n * q_dim), proj(n * h), gate(n * ffn), up(n * ffn);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(weights_.embed_tokens.data() + static_cast<int64_t>(tokens[i]) * h, h,
                x.data() + i * h);

  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LlamaLayerWeights& w = weights_.layers[layer];
    cpu::rms_norm_rows(x.data(), w.attn_norm.data(), xn.data(), n, h, c.rms_norm_eps);
    linear_forward(w.q_proj, xn.data(), n, q.data(), scratch);
    linear_forward(w.k_proj, xn.data(), n, k.data(), scratch);
    linear_forward(w.v_proj, xn.data(), n, v.data(), scratch);
    cpu::rope_rows(q.data(), n, q_dim, nh, hd, c.rotary_dim, positions, inv_freq_.data(),
                   rope_layout_);
    cpu::rope_rows(k.data(), n, kv_dim, nkv, hd, c.rotary_dim, positions, inv_freq_.data(),
                   rope_layout_);
    attend(layer, q.data(), k.data(), v.data(), attn.data());
    linear_forward(w.o_proj, attn.data(), n, proj.data(), scratch);
    for (int64_t j = 0; j < n * h; ++j) x[j] += proj[j];

    cpu::rms_norm_rows(x.data(), w.ffn_norm.data(), xn.data(), n, h, c.rms_norm_eps);
    linear_forward(w.gate_proj, xn.data(), n, gate.data(), scratch);
    linear_forward(w.up_proj, xn.data(), n, up.data(), scratch);
#pragma omp parallel for schedule(static) if (n * ffn >= 32768)
    for (int64_t i = 0; i < n; ++i)  // per row: vector/tail split never depends on the batch
      cpu::silu_mul(gate.data() + i * ffn, up.data() + i * ffn, gate.data() + i * ffn, ffn);
    linear_forward(w.down_proj, gate.data(), n, proj.data(), scratch);
    for (int64_t j = 0; j < n * h; ++j) x[j] += proj[j];
  }

  const int64_t num_rows = static_cast<int64_t>(rows.size());
  std::vector<float> logits(num_rows * c.vocab_size);
  if (num_rows == 0) return logits;
  std::vector<float> last(num_rows * h);
  for (int64_t r = 0; r < num_rows; ++r)
    cpu::rms_norm(x.data() + rows[r] * h, weights_.norm.data(), last.data() + r * h, h,
                  c.rms_norm_eps);
  linear_forward(weights_.lm_head, last.data(), num_rows, logits.data(), scratch);
  return logits;
}

}  // namespace octet

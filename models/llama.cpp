#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "kernels/common/check.h"
#include "kernels/common/fp8.h"
#include "kernels/common/half.h"
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
HostLinearWeight load_fp8_linear(const WeightSource& src, const QuantConfig& q,
                                 const LoadOptions& o, HostLinearWeight w) {
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
void load_bias(const WeightSource& src, const std::string& module, HostLinearWeight& w) {
  w.bias = src.load_f32(module + ".bias", {w.out_features});
  for (size_t i = 0; i < w.bias.size(); ++i)
    if (!std::isfinite(w.bias[i]))
      throw ModelFileError(src.path(), "tensor " + module + ".bias holds a non-finite value (" +
                                           std::to_string(w.bias[i]) + ") at index " +
                                           std::to_string(i));
}

HostLinearWeight load_linear(const WeightSource& src, const QuantConfig& q,
                             const LoadOptions& o, const std::string& module, int64_t out,
                             int64_t in, bool bias = false) {
  HostLinearWeight w;
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

void to_bf16(HostLinearWeight& w) {
  w.w_bf16.resize(w.w_f32.size());
  for (size_t i = 0; i < w.w_f32.size(); ++i) w.w_bf16[i] = float_to_bf16(w.w_f32[i]);
  w.format = DType::BF16;
  w.w_f32.clear();
  w.w_f32.shrink_to_fit();
}

// How a layer is split over tensor-parallel ranks (issue 10 item 5; Megatron-LM's layout,
// models/tensor_parallel.h).
enum class ShardKind {
  QProj,   // column-parallel by query heads
  KVProj,  // column-parallel by KV heads (k_proj, v_proj)
  GateUp,  // column-parallel by intermediate rows (gate_proj, up_proj)
  OProj,   // row-parallel by query-head columns; bias on rank 0 (FP8: on every rank)
  Down,    // row-parallel by intermediate columns; bias on rank 0 (FP8: on every rank)
  LmHead,  // vocab-parallel rows, padded to vocab_shard_size
};

template <class T>
void cut_weight(HostLinearWeight& w, std::vector<T>& data, ShardKind kind,
                const TensorParallelShard& s) {
  HostLinearView<T> v;
  v.weight = data.data();
  v.out_features = w.out_features;
  v.in_features = w.in_features;
  v.scale = w.w_scale.empty() ? nullptr : w.w_scale.data();
  v.num_scales = static_cast<int64_t>(w.w_scale.size());
  v.bias = w.bias.empty() ? nullptr : w.bias.data();
  HostLinearShard<T> r;
  switch (kind) {
    case ShardKind::QProj: r = shard_q_proj(v, s); break;
    case ShardKind::KVProj: r = shard_kv_proj(v, s); break;
    case ShardKind::GateUp: r = shard_gate_up_proj(v, s); break;
    case ShardKind::OProj: r = shard_o_proj(v, s); break;
    case ShardKind::Down: r = shard_down_proj(v, s); break;
    case ShardKind::LmHead: r = shard_lm_head(v, s); break;
  }
  // FP8 row-parallel layers add the bias in linear_w8a8_combine, on every rank.
  if (w.format == DType::FP8_E4M3 && (kind == ShardKind::OProj || kind == ShardKind::Down))
    r.bias = w.bias;
  data = std::move(r.weight);
  w.out_features = r.out_features;
  w.in_features = r.in_features;
  w.w_scale = std::move(r.scale);
  w.bias = std::move(r.bias);
}

// A rank's shard of a host weight, cut before upload. World size 1: the whole weight, as is.
// FP8 row-parallel weights get their k-part count (models/tensor_parallel.h), this rank's
// share of k_groups.
HostLinearWeight shard_for_rank(HostLinearWeight w, ShardKind kind,
                                const TensorParallelShard& shard, int64_t k_groups) {
  if (w.format == DType::FP8_E4M3 && (kind == ShardKind::OProj || kind == ShardKind::Down))
    w.k_groups = k_groups / shard.world_size;
  if (shard.world_size == 1) return w;
  switch (w.format) {
    case DType::F32: cut_weight(w, w.w_f32, kind, shard); break;
    case DType::BF16: cut_weight(w, w.w_bf16, kind, shard); break;
    case DType::FP8_E4M3: cut_weight(w, w.w_fp8, kind, shard); break;
    default: OCTET_CHECK(false, w.name, ": weight format ", dtype_name(w.format));
  }
  return w;
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
  m.backend_ = options.backend ? options.backend
                              : std::shared_ptr<Backend>(make_backend(options.device));
  Backend& be = *m.backend_;
  if (options.rank == 0)
    spdlog::info("device: {} (--device {}), tensor_parallel_size {}", be.describe(),
                 options.backend ? be.name() : options.device, options.world_size);
  m.config_ = std::move(config);
  m.quant_ = std::move(quant);
  const ModelConfig& c = m.config_;
  const QuantConfig& q = m.quant_;
  const int64_t h = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim,
                kv_dim = c.num_key_value_heads * c.head_dim, ffn = c.intermediate_size;
  m.shard_ = make_tensor_parallel_shard(c, options.world_size, options.rank);
  m.k_groups_ = tensor_parallel_k_groups(c);
  // Host tensors are read, cut to this rank's shard, uploaded, then dropped.
  const auto upload = [&](HostLinearWeight w, ShardKind kind) {
    return upload_linear(be, shard_for_rank(std::move(w), kind, m.shard_, m.k_groups_));
  };
  LlamaWeights& w = m.weights_;
  const std::vector<float> embed = src.load_f32("model.embed_tokens.weight", {c.vocab_size, h});
  w.embed_tokens = upload_f32(be, embed);
  // RMSNorm weights as multipliers: HF Gemma stores w for (1 + w) (norm_weight_offset).
  const auto norm = [&](const std::string& name, int64_t size) {
    std::vector<float> v = src.load_f32(name, {size});
    if (c.norm_weight_offset)
      for (float& e : v) e += 1.0f;
    return upload_f32(be, v);
  };
  w.norm = norm("model.norm.weight", h);
  if (!c.tie_word_embeddings && !src.has("lm_head.weight"))
    throw ModelFileError(src.path(), "missing tensor lm_head.weight (tie_word_embeddings is "
                                     "false)");
  HostLinearWeight lm_head;
  if (c.tie_word_embeddings) {
    lm_head.name = "lm_head";
    lm_head.out_features = c.vocab_size;
    lm_head.in_features = h;
    lm_head.w_f32 = embed;
  } else {
    LoadOptions keep = options;
    keep.quantization = "none";  // lm_head stays 16-bit unless the checkpoint quantizes it
    lm_head = load_linear(src, q, q.weights_fp8 ? options : keep, "lm_head", c.vocab_size, h);
  }
  // lm_head "stays 16-bit" on the FP8 path (or E4M3 per channel with --lm-head-dtype fp8);
  // FP32 on the reference path.
  if (options.quantization != "none" && lm_head.format == DType::F32) {
    if (options.lm_head_dtype == "fp8")
      quantize_linear_fp8(lm_head, options.weight_granularity,
                          src.arithmetic(c.tie_word_embeddings ? "model.embed_tokens.weight"
                                                               : "lm_head.weight"));
    else
      to_bf16(lm_head);
  }
  w.lm_head = upload(std::move(lm_head), ShardKind::LmHead);

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
    l.attn_norm = norm(p + "input_layernorm.weight", h);
    // This rank's shard of a layer's linear, on the host.
    const auto host = [&](const std::string& module, int64_t out, int64_t in, bool bias,
                          ShardKind kind) {
      return shard_for_rank(load_linear(src, q, options, p + module, out, in, bias), kind,
                            m.shard_, m.k_groups_);
    };
    const auto lin = [&](const std::string& module, int64_t out, int64_t in, bool bias,
                         ShardKind kind) {
      return upload_linear(be, host(module, out, in, bias, kind));
    };
    {  // q/k/v: one input, stored side by side where the backend runs them as one GEMM
      std::vector<LinearWeight> qkv = upload_linears_merged(
          be, {host("self_attn.q_proj", q_dim, h, c.qkv_bias, ShardKind::QProj),
               host("self_attn.k_proj", kv_dim, h, c.qkv_bias, ShardKind::KVProj),
               host("self_attn.v_proj", kv_dim, h, c.qkv_bias, ShardKind::KVProj)});
      l.q_proj = std::move(qkv[0]);
      l.k_proj = std::move(qkv[1]);
      l.v_proj = std::move(qkv[2]);
    }
    l.o_proj = lin("self_attn.o_proj", h, q_dim, c.o_proj_bias, ShardKind::OProj);
    if (c.qk_norm) {
      l.q_norm = norm(p + "self_attn.q_norm.weight", c.head_dim);
      l.k_norm = norm(p + "self_attn.k_norm.weight", c.head_dim);
    }
    if (c.sandwich_norms) {
      l.post_attn_norm = norm(p + "post_attention_layernorm.weight", h);
      l.ffn_norm = norm(p + "pre_feedforward_layernorm.weight", h);
      l.post_ffn_norm = norm(p + "post_feedforward_layernorm.weight", h);
    } else {
      l.ffn_norm = norm(p + "post_attention_layernorm.weight", h);
    }
    {  // gate/up, as q/k/v
      std::vector<LinearWeight> gate_up = upload_linears_merged(
          be, {host("mlp.gate_proj", ffn, h, c.mlp_bias, ShardKind::GateUp),
               host("mlp.up_proj", ffn, h, c.mlp_bias, ShardKind::GateUp)});
      l.gate_proj = std::move(gate_up[0]);
      l.up_proj = std::move(gate_up[1]);
    }
    l.down_proj = lin("mlp.down_proj", h, ffn, c.mlp_bias, ShardKind::Down);
  }
  m.inv_freq_ = upload_f32(be, c.rope_inv_freq());
  m.local_inv_freq_ = c.rope_local_base_freq == 0.0f ? m.inv_freq_  // shared: one base
                                                     : upload_f32(be, c.rope_local_inv_freq());
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

LlamaActivations LlamaModel::new_activations(int64_t max_tokens, int64_t max_logit_rows) const {
  const TensorParallelShard& s = shard_;
  const int64_t h = config_.hidden_size, q_dim = s.q_dim(), kv_dim = s.kv_dim(),
                ffn = s.intermediate_size;
  Backend& be = *backend_;
  const auto f32 = [&](int64_t rows, int64_t width) { return be.allocate(rows * width * 4); };
  LlamaActivations a;
  a.max_tokens = max_tokens;
  a.max_logit_rows = max_logit_rows;
  a.x = f32(max_tokens, h);
  a.xn = f32(max_tokens, h);
  a.q = f32(max_tokens, q_dim);
  a.k = f32(max_tokens, kv_dim);
  a.v = f32(max_tokens, kv_dim);
  a.attn = f32(max_tokens, q_dim);
  a.proj = f32(max_tokens, h);
  a.gate = f32(max_tokens, ffn);
  a.up = f32(max_tokens, ffn);
  if (config_.qk_norm) {
    a.qn = f32(max_tokens, q_dim);
    a.kn = f32(max_tokens, kv_dim);
  }
  if (config_.sandwich_norms) a.post = f32(max_tokens, h);
  a.qa = be.allocate(std::max(max_tokens, max_logit_rows) * std::max({h, q_dim, ffn}));
  a.a_scale = f32(std::max(max_tokens, max_logit_rows), 1);
  a.last = f32(max_logit_rows, h);
  a.logits = f32(max_logit_rows, s.vocab_shard_size);
  a.sampled = f32(max_logit_rows, 1);  // int32 ids
  a.sample_params = be.allocate(max_logit_rows * static_cast<int64_t>(sizeof(SampleRowParams)));
  a.sample_edits = be.allocate(kMaxSampleEdits * static_cast<int64_t>(sizeof(LogitEdit)));
  if (s.world_size > 1) {
    if (be.exact_k_parts()) {  // FP8 row-parallel k parts, gathered (models/linear.h)
      a.amax = f32(std::max(max_tokens, max_logit_rows), 1);
      a.partials = f32(max_tokens * (k_groups_ / s.world_size), h);
      a.gathered_partials = f32(max_tokens * k_groups_, h);
    } else {  // row-parallel outputs all-reduced in BF16 (models/linear.h)
      a.reduce_bf16 = be.allocate(max_tokens * h * 2);
    }
    a.gathered = f32(s.world_size * max_logit_rows, s.vocab_shard_size);
  }
  return a;
}

void LlamaModel::run_decoder(const ForwardBatchBuffers& device, int64_t n, int64_t num_rows,
                             const PagedAttentionBatch& attn_batch, PagedKVCache& cache,
                             LlamaActivations& act, Communicator& comm) const {
  const ModelConfig& c = config_;
  Backend& be = *backend_;
  // This rank's share (models/tensor_parallel.h): its query/KV heads and MLP rows.
  const int64_t h = c.hidden_size, hd = c.head_dim, nh = shard_.num_heads,
                nkv = shard_.num_kv_heads, ffn = shard_.intermediate_size;
  const float eps = c.rms_norm_eps, softmax_scale = c.attention_scale();
  // Activations: [n, width] row-major, one row per token.
  float *x = act.x.as<float>(), *xn = act.xn.as<float>(), *q = act.q.as<float>(),
        *k = act.k.as<float>(), *v = act.v.as<float>(), *attn = act.attn.as<float>(),
        *proj = act.proj.as<float>(), *gate = act.gate.as<float>(), *up = act.up.as<float>();
  // Column-parallel (input replicated, output this rank's rows): no communication.
  const auto linear = [&](const LinearWeight& w, const float* in, int64_t m, float* out) {
    linear_forward(be, w, in, m, out, act.qa.as<uint8_t>(), act.a_scale.as<float>());
  };
  // Several column-parallel linears of one input (q/k/v, gate/up): one quantization of it and,
  // where the backend can, one kernel (the same outputs as one linear call each).
  // x_quantized: the op that made `in` also left its FP8 codes in act.qa / act.a_scale.
  const auto linears = [&](std::initializer_list<const LinearWeight*> ws, const float* in,
                           int64_t m, std::initializer_list<float*> outs, bool x_quantized) {
    linear_forward_multi(be, ws.begin(), static_cast<int>(ws.size()), in, m, outs.begin(),
                         act.qa.as<uint8_t>(), act.a_scale.as<float>(), x_quantized);
  };
  // Row-parallel (input this rank's columns): partial sums all-reduced over the ranks.
  const auto linear_reduced = [&](const LinearWeight& w, const float* in, int64_t m, float* out,
                                  bool x_quantized) {
    linear_forward_row_parallel(be, comm, w, in, m, out, act.qa.as<uint8_t>(),
                                act.a_scale.as<float>(),
                                {act.amax.as<float>(), act.partials.as<float>(),
                                 act.gathered_partials.as<float>(),
                                 act.reduce_bf16.as<uint16_t>()},
                                x_quantized);
  };
  // An RMSNorm whose output feeds only dynamic FP8 linears quantizes it in the same call.
  const auto norm = [&](float* residual, const float* d, const Buffer& weight, float* out,
                        bool quantize) {
    if (quantize) {
      be.rms_norm_quant_fp8(residual, d, weight.as<float>(), out, n, h, eps,
                            act.qa.as<uint8_t>(), act.a_scale.as<float>());
    } else {
      be.rms_norm(residual, d, weight.as<float>(), out, n, h, eps);
    }
  };
  const int64_t* positions = device.positions.as<const int64_t>();

  be.embedding({weights_.embed_tokens.data(), DType::F32, c.vocab_size, h},
               device.token_ids.as<const int32_t>(), n, x);
  if (c.embedding_multiplier != 1.0f) be.scale(x, n * h, c.embedding_multiplier);
  const float* delta = nullptr;  // the previous layer's MLP output, added to x next
  bool normed = false;  // x already holds that sum and xn its norm (and act.qa its codes)
  const bool gelu = c.hidden_act == "gelu_pytorch_tanh";  // GeGLU, else SwiGLU
  const auto qkv_fp8_of = [&](int64_t layer) {
    const LlamaLayerWeights& l = weights_.layers[layer];
    return fp8_dynamic_inputs({&l.q_proj, &l.k_proj, &l.v_proj});
  };
  // An FP8 o_proj / down_proj at world size 1 runs with the residual RMSNorm after it (Backend::
  // linear_w8a8_add_rms_norm: one row kernel on CUDA); Gemma's sandwich norms come between.
  const auto fused_norm = [&](const LinearWeight& w) {
    return comm.world_size() == 1 && !c.sandwich_norms && w.format == DType::FP8_E4M3;
  };
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LlamaLayerWeights& w = weights_.layers[layer];
    const bool last = layer + 1 == c.num_hidden_layers;
    const bool qkv_fp8 = qkv_fp8_of(layer);
    const bool gate_up_fp8 = fp8_dynamic_inputs({&w.gate_proj, &w.up_proj});
    // down_proj's input codes: this rank's alone unless the row's scale spans the ranks.
    const bool down_fp8 = !gelu && fp8_dynamic_inputs({&w.down_proj}) &&
                          (comm.world_size() == 1 || !be.exact_k_parts());
    // x += the previous layer's MLP output (none before layer 0), then n = rms(x).
    if (!normed) norm(x, delta, w.attn_norm, xn, qkv_fp8);
    linears({&w.q_proj, &w.k_proj, &w.v_proj}, xn, n, {q, k, v}, qkv_fp8);
    // qr, kr: the q and k that RoPE rotates (after the per-head q/k norms when the model has them).
    float *qr = q, *kr = k;
    if (c.qk_norm) {  // per head: rows [n * heads, head_dim]
      qr = act.qn.as<float>();
      kr = act.kn.as<float>();
      be.rms_norm(q, nullptr, w.q_norm.as<float>(), qr, n * nh, hd, eps);
      be.rms_norm(k, nullptr, w.k_norm.as<float>(), kr, n * nkv, hd, eps);
    }
    const bool sliding = c.layer_sliding_window[layer] > 0;
    const float* freq = (sliding ? local_inv_freq_ : inv_freq_).as<float>();
    // The whole batch's K/V of a layer are written before its attention reads them back, so a
    // token's K/V are the cached (possibly FP8) values whether computed now or earlier.
    // Hybrid caches: the layer's KV cache group has its own slots and block tables.
    const KVCacheView kv = cache.layer(layer);
    const int64_t group = cache.layer_group(layer);
    PagedAttentionBatch group_batch = attn_batch;
    group_batch.block_tables += group * attn_batch.num_seqs * attn_batch.max_blocks_per_seq;
    if (group_batch.host_block_tables != nullptr)
      group_batch.host_block_tables +=
          group * attn_batch.num_seqs * attn_batch.max_blocks_per_seq;
    const int64_t* slots = device.slot_mapping.as<const int64_t>() + group * n;
    if (cache.spec(layer).hadamard_rotation) {
      be.rope(qr, kr, n, nh, nkv, hd, c.rotary_dim, positions, freq, rope_layout_);
      // --kv-cache-rotation hadamard: the same orthogonal H for q and k (q.k unchanged), so the
      // cache stores rotated K with its outlier channels spread before quantization.
      be.hadamard_rotate(qr, n * nh, hd);
      be.hadamard_rotate(kr, n * nkv, hd);
      be.write_kv_cache(kv, kr, v, slots, n);
    } else {  // RoPE and the K/V write: one kernel on CUDA
      be.rope_write_kv(qr, kr, v, n, nh, nkv, hd, c.rotary_dim, positions, freq, rope_layout_,
                       kv, slots);
    }
    be.paged_attention(kv, qr, group_batch, nh, c.layer_sliding_window[layer], softmax_scale,
                       attn);
    // Gemma: out = post_norm(out) before each residual add.
    const auto post_norm = [&](const Buffer& weight) -> const float* {
      if (!c.sandwich_norms) return proj;
      be.rms_norm(proj, nullptr, weight.as<float>(), act.post.as<float>(), n, h, eps);
      return act.post.as<float>();
    };
    if (fused_norm(w.o_proj)) {  // x += attn; rms(x)
      linear_forward_add_norm(be, w.o_proj, attn, n, proj, act.qa.as<uint8_t>(),
                              act.a_scale.as<float>(), false, x, w.ffn_norm.as<float>(), xn,
                              eps, gate_up_fp8);
    } else {
      linear_reduced(w.o_proj, attn, n, proj, false);
      norm(x, post_norm(w.post_attn_norm), w.ffn_norm, xn, gate_up_fp8);
    }
    if (gate_up_fp8 && down_fp8) {  // xn's codes in, SwiGLU and its codes for down_proj out
      be.linear_w8a8_silu_quant(act.qa.as<uint8_t>(), act.a_scale.as<float>(),
                                ScaleGranularity::PerRow, n, w.gate_proj.ref(), w.up_proj.ref(),
                                gate, up, act.qa.as<uint8_t>(), act.a_scale.as<float>());
    } else {
      linears({&w.gate_proj, &w.up_proj}, xn, n, {gate, up}, gate_up_fp8);
      if (gelu)
        be.gelu_tanh_mul(gate, up, gate, n, ffn);
      else if (down_fp8)
        be.silu_mul_quant_fp8(gate, up, gate, n, ffn, act.qa.as<uint8_t>(),
                              act.a_scale.as<float>());
      else
        be.silu_mul(gate, up, gate, n, ffn);
    }
    if (fused_norm(w.down_proj)) {  // x += mlp; the next layer's input norm, or the final one
      const Buffer& next = last ? weights_.norm : weights_.layers[layer + 1].attn_norm;
      linear_forward_add_norm(be, w.down_proj, gate, n, proj, act.qa.as<uint8_t>(),
                              act.a_scale.as<float>(), down_fp8, x, next.as<float>(), xn, eps,
                              !last && qkv_fp8_of(layer + 1));
      normed = true;
    } else {
      linear_reduced(w.down_proj, gate, n, proj, down_fp8);
      delta = post_norm(w.post_ffn_norm);
      normed = false;
    }
  }
  if (num_rows == 0) return;
  if (!normed) be.rms_norm(x, delta, weights_.norm.as<float>(), xn, n, h, eps);
  be.gather_rows(xn, h, device.logits_indices.as<const int64_t>(), num_rows, act.last.as<float>());
  linear(weights_.lm_head, act.last.as<float>(), num_rows, act.logits.as<float>());
  // Vocab-parallel lm_head: every rank's [num_rows, vocab_shard_size] logits, rank-major.
  if (comm.world_size() > 1)
    comm.all_gather(act.logits.as<float>(), num_rows * shard_.vocab_shard_size,
                    act.gathered.as<float>());
}

void LlamaModel::read_logits(const LlamaActivations& act, int64_t rows, float* out) const {
  const int64_t vocab = config_.vocab_size;
  if (shard_.world_size == 1) {
    backend_->download(act.logits, 0, out, rows * vocab * 4);
    return;
  }
  const int64_t world = shard_.world_size, vs = shard_.vocab_shard_size;
  std::vector<float> gathered(static_cast<size_t>(world * rows * vs));
  backend_->download(act.gathered, 0, gathered.data(),
                     static_cast<int64_t>(gathered.size() * sizeof(float)));
  assemble_vocab_parallel_logits(gathered.data(), static_cast<int>(world), rows, vocab, vs, out);
}

void LlamaModel::read_logit_rows(const LlamaActivations& act, int64_t first, int64_t rows,
                                 float* out) const {
  OCTET_CHECK(shard_.world_size == 1, "read_logit_rows: vocabulary split over ",
              shard_.world_size, " ranks");
  OCTET_CHECK(first >= 0 && rows >= 0 && first + rows <= act.max_logit_rows,
              "read_logit_rows: rows [", first, ", ", first + rows, ") of ", act.max_logit_rows);
  const int64_t vocab = config_.vocab_size;
  if (rows > 0) backend_->download(act.logits, first * vocab * 4, out, rows * vocab * 4);
}

void LlamaModel::read_sampled(const LlamaActivations& act, int64_t rows,
                              const SampleRowParams* params, const std::vector<LogitEdit>& edits,
                              int32_t* ids) const {
  OCTET_CHECK(shard_.world_size == 1, "read_sampled: vocabulary split over ",
              shard_.world_size, " ranks");
  OCTET_CHECK(rows <= act.max_logit_rows, "read_sampled: ", rows, " rows of ",
              act.max_logit_rows);
  if (rows == 0) return;
  const int64_t n_edits = static_cast<int64_t>(edits.size());
  OCTET_CHECK(n_edits <= kMaxSampleEdits, "read_sampled: ", n_edits, " edits");
  const int64_t bytes = rows * static_cast<int64_t>(sizeof(SampleRowParams));
  backend_->upload(act.sample_params, 0, params, bytes);
  if (n_edits > 0)
    backend_->upload(act.sample_edits, 0, edits.data(),
                     n_edits * static_cast<int64_t>(sizeof(LogitEdit)));
  backend_->sample_rows(act.logits.as<float>(), rows, config_.vocab_size,
                        act.sample_params.as<const SampleRowParams>(),
                        n_edits > 0 ? act.sample_edits.as<LogitEdit>() : nullptr,
                        act.sampled.as<int32_t>());
  backend_->download(act.sampled, 0, ids, rows * 4);
}

void LlamaModel::read_greedy(const LlamaActivations& act, int64_t rows, int32_t* ids) const {
  OCTET_CHECK(shard_.world_size == 1, "read_greedy: vocabulary split over ",
              shard_.world_size, " ranks");
  OCTET_CHECK(rows <= act.max_logit_rows, "read_greedy: ", rows, " rows of ",
              act.max_logit_rows);
  if (rows == 0) return;
  backend_->argmax_rows(act.logits.as<float>(), rows, config_.vocab_size,
                        act.sampled.as<int32_t>());
  backend_->download(act.sampled, 0, ids, rows * 4);
}

SequenceKVCache LlamaModel::new_cache(int64_t max_tokens, bool hadamard_rotation) const {
  const ModelConfig& c = config_;
  constexpr int64_t kBlock = 16;
  std::vector<KVLayerSpec> layers(static_cast<size_t>(c.num_hidden_layers));
  for (KVLayerSpec& l : layers) {
    l.dtype = DType::F32;
    l.hadamard_rotation = hadamard_rotation;
  }
  const int64_t blocks = std::max<int64_t>(1, (max_tokens + kBlock - 1) / kBlock);
  return SequenceKVCache{max_tokens,
                         PagedKVCache(*backend_, blocks, kBlock, shard_.num_kv_heads,
                                      c.head_dim, layers),
                         {}, {}};
}

DenseKVCache SequenceKVCache::download() const {
  // Blocks 0, 1, ... hold positions in order, so a layer's blocks are [max_tokens, kv_dim].
  DenseKVCache d;
  d.max_tokens = max_tokens;
  const int64_t row = cache.num_kv_heads() * cache.head_dim();
  const int64_t layer_bytes = max_tokens * row * 4;
  d.k.resize(static_cast<size_t>(cache.num_layers() * max_tokens * row));
  d.v.resize(d.k.size());
  Backend& be = cache.backend();
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    be.download(cache.k_buffer(l), 0, d.k.data() + l * max_tokens * row, layer_bytes);
    be.download(cache.v_buffer(l), 0, d.v.data() + l * max_tokens * row, layer_bytes);
  }
  return d;
}

std::vector<float> LlamaModel::forward(const int32_t* tokens, int64_t n, int64_t start_pos,
                                       SequenceKVCache& cache, bool all_logits,
                                       Communicator& comm) const {
  if (n <= 0) throw std::invalid_argument("forward: no tokens");
  if (start_pos < 0 || start_pos + n > cache.max_tokens)
    throw std::invalid_argument("forward: positions " + std::to_string(start_pos) + ".." +
                                std::to_string(start_pos + n - 1) + " exceed the cache of " +
                                std::to_string(cache.max_tokens) + " tokens");
  // One sequence whose block table is 0, 1, 2, ...: slot = position.
  ForwardBatch b;
  b.token_ids.assign(tokens, tokens + n);
  for (int64_t i = 0; i < n; ++i) {
    b.positions.push_back(start_pos + i);
    b.slot_mapping.push_back(start_pos + i);
  }
  b.query_start_loc = {0, n};
  b.seq_lens = {start_pos + n};
  b.max_blocks_per_seq = cache.cache.num_blocks();
  for (int64_t i = 0; i < b.max_blocks_per_seq; ++i)
    b.block_tables.push_back(static_cast<int32_t>(i));
  for (int64_t i = all_logits ? 0 : n - 1; i < n; ++i) b.logits_indices.push_back(i);
  return forward(b, cache.cache, cache.act, cache.device, comm);
}

}  // namespace octet

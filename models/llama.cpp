#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "models/gguf.h"

namespace octet {

namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Loads tensor `name` as FP32 after checking its GGUF dims (ne[0] first, i.e. [in, out]).
std::vector<float> load_tensor(const GGUFFile& file, const std::string& name,
                               const std::vector<int64_t>& expected_dims) {
  const GGUFTensorInfo& t = file.tensor(name);
  if (t.dims != expected_dims)
    throw ModelFileError(file.path(), "tensor " + name + " has shape " + dims_str(t.dims) +
                                          ", expected " + dims_str(expected_dims));
  return file.dequantize(t);
}

}  // namespace

LlamaModel LlamaModel::load(const GGUFFile& file) {
  LlamaModel m;
  m.config_ = ModelConfig::from_gguf(file);
  const ModelConfig& c = m.config_;
  const int64_t h = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim,
                kv_dim = c.num_key_value_heads * c.head_dim, ffn = c.intermediate_size;
  LlamaWeights& w = m.weights_;
  w.embed_tokens = load_tensor(file, "token_embd.weight", {h, c.vocab_size});
  w.norm = load_tensor(file, "output_norm.weight", {h});
  if (!c.tie_word_embeddings) w.lm_head = load_tensor(file, "output.weight", {h, c.vocab_size});
  w.layers.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LlamaLayerWeights& l = w.layers[i];
    l.attn_norm = load_tensor(file, p + "attn_norm.weight", {h});
    l.q_proj = load_tensor(file, p + "attn_q.weight", {h, q_dim});
    l.k_proj = load_tensor(file, p + "attn_k.weight", {h, kv_dim});
    l.v_proj = load_tensor(file, p + "attn_v.weight", {h, kv_dim});
    l.o_proj = load_tensor(file, p + "attn_output.weight", {q_dim, h});
    l.ffn_norm = load_tensor(file, p + "ffn_norm.weight", {h});
    l.gate_proj = load_tensor(file, p + "ffn_gate.weight", {h, ffn});
    l.up_proj = load_tensor(file, p + "ffn_up.weight", {h, ffn});
    l.down_proj = load_tensor(file, p + "ffn_down.weight", {ffn, h});
  }
  m.inv_freq_ = c.rope_inv_freq();
  // llama.cpp's converter permutes Q/K rows so that GGUF llama weights rotate adjacent pairs.
  m.rope_layout_ = ref::RopeLayout::AdjacentPairs;
  return m;
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

  const int64_t h = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads,
                nkv = c.num_key_value_heads, q_dim = nh * hd, kv_dim = nkv * hd,
                ffn = c.intermediate_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  std::vector<float> x(n * h), xn(n * h), q(n * q_dim), k(n * kv_dim), v(n * kv_dim),
      attn(n * q_dim), proj(n * h), gate(n * ffn), up(n * ffn);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(weights_.embed_tokens.data() + tokens[i] * h, h, x.data() + i * h);

  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LlamaLayerWeights& w = weights_.layers[layer];
    // k_cache/v_cache of this layer: [max_tokens, nkv, hd]
    float* k_cache = cache.k.data() + layer * cache.max_tokens * kv_dim;
    float* v_cache = cache.v.data() + layer * cache.max_tokens * kv_dim;

    for (int64_t i = 0; i < n; ++i)
      ref::rms_norm(x.data() + i * h, w.attn_norm.data(), xn.data() + i * h, h, c.rms_norm_eps);
    ref::linear(xn.data(), w.q_proj.data(), nullptr, q.data(), n, q_dim, h);
    ref::linear(xn.data(), w.k_proj.data(), nullptr, k.data(), n, kv_dim, h);
    ref::linear(xn.data(), w.v_proj.data(), nullptr, v.data(), n, kv_dim, h);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = start_pos + i;
      ref::rope(q.data() + i * q_dim, nh, hd, c.rotary_dim, pos, inv_freq_.data(), rope_layout_);
      ref::rope(k.data() + i * kv_dim, nkv, hd, c.rotary_dim, pos, inv_freq_.data(),
                rope_layout_);
      std::copy_n(k.data() + i * kv_dim, kv_dim, k_cache + pos * kv_dim);
      std::copy_n(v.data() + i * kv_dim, kv_dim, v_cache + pos * kv_dim);
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t window = c.layer_sliding_window[layer];
      const int64_t end = start_pos + i + 1;  // causal: positions < end
      const int64_t begin = window > 0 && end > window ? end - window : 0;
      ref::attention(q.data() + i * q_dim, k_cache + begin * kv_dim, v_cache + begin * kv_dim,
                     attn.data() + i * q_dim, nh, nkv, hd, end - begin, scale);
    }
    ref::linear(attn.data(), w.o_proj.data(), nullptr, proj.data(), n, h, q_dim);
    for (int64_t j = 0; j < n * h; ++j) x[j] += proj[j];

    for (int64_t i = 0; i < n; ++i)
      ref::rms_norm(x.data() + i * h, w.ffn_norm.data(), xn.data() + i * h, h, c.rms_norm_eps);
    ref::linear(xn.data(), w.gate_proj.data(), nullptr, gate.data(), n, ffn, h);
    ref::linear(xn.data(), w.up_proj.data(), nullptr, up.data(), n, ffn, h);
    ref::silu_mul(gate.data(), up.data(), gate.data(), n * ffn);
    ref::linear(gate.data(), w.down_proj.data(), nullptr, proj.data(), n, h, ffn);
    for (int64_t j = 0; j < n * h; ++j) x[j] += proj[j];
  }

  const int64_t first = all_logits ? 0 : n - 1, rows = n - first;
  for (int64_t i = first; i < n; ++i)
    ref::rms_norm(x.data() + i * h, weights_.norm.data(), xn.data() + i * h, h, c.rms_norm_eps);
  const std::vector<float>& head = weights_.lm_head.empty() ? weights_.embed_tokens
                                                            : weights_.lm_head;
  std::vector<float> logits(rows * c.vocab_size);
  ref::linear(xn.data() + first * h, head.data(), nullptr, logits.data(), rows, c.vocab_size, h);
  return logits;
}

}  // namespace octet

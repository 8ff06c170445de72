// --load-format dummy's weights (models/dummy_weights.h) and presets (models/model_presets.h):
// the preset shapes against the Hugging Face config values, seeded determinism (same seed, same
// bytes; another seed, other bytes), the value distribution the file comment promises (checked
// against its definition: N(0, jitter^2 / in) with jitter ~ U[0.75, 1.25)), tensor-parallel
// shards that are the slices of the whole model, and a finite forward on the tiny preset.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "kernels/common/fp8.h"
#include "models/checkpoint.h"
#include "models/dummy_weights.h"
#include "models/model_presets.h"

namespace octet {
namespace {

ModelConfig preset(const std::string& name, int64_t tokenizer_vocab = 512) {
  const std::optional<ModelPreset> p = find_model_preset(name);
  REQUIRE(p.has_value());
  return dummy_model_config(find_dummy_model(name), tokenizer_vocab);
}

LoadOptions cpu(int rank = 0, int world = 1, const std::string& quantization = "auto") {
  LoadOptions o;
  o.device = "cpu";
  o.rank = rank;
  o.world_size = world;
  o.quantization = quantization;
  return o;
}

std::vector<uint8_t> bytes_of(const LlamaModel& m, const Buffer& b) {
  std::vector<uint8_t> out(static_cast<size_t>(b.bytes()));
  m.backend().download(b, 0, out.data(), b.bytes());
  return out;
}

// A linear's E4M3 codes, row-major [out, in], whatever layout the backend stored them in
// (Rows8x32, kernels/cpu/w8a8.h: blocks of 8 rows, each k part in chunks of 32 codes, element
// l of a chunk at byte 4 (l % 8) + {0, 2, 1, 3}[l / 8] of its row's 32).
std::vector<uint8_t> codes_of(const LlamaModel& m, const LinearWeight& w) {
  const std::vector<uint8_t> raw = bytes_of(m, w.weight);
  if (w.layout == Fp8Layout::RowMajor) return raw;
  const int64_t n = w.out_features, k = w.in_features, g = w.k_groups, kg = k / g;
  const int64_t chunks = (kg + 31) / 32;
  static const int quarter_byte[4] = {0, 2, 1, 3};
  std::vector<uint8_t> out(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t t = 0; t < k; ++t) {
      const int64_t part = t / kg, c = t % kg / 32, l = t % kg % 32;
      out[j * k + t] = raw[((j / 8 * g + part) * chunks + c) * 256 + j % 8 * 32 + 4 * (l % 8) +
                           quarter_byte[l / 8]];
    }
  return out;
}

std::vector<float> floats_of(const LlamaModel& m, const Buffer& b) {
  std::vector<float> out(static_cast<size_t>(b.bytes() / 4));
  m.backend().download(b, 0, out.data(), b.bytes());
  return out;
}

// Rows [begin, begin + n) of a row-major [*, cols] byte matrix.
std::vector<uint8_t> rows(const std::vector<uint8_t>& w, int64_t cols, int64_t begin,
                          int64_t n) {
  return {w.begin() + begin * cols, w.begin() + (begin + n) * cols};
}

}  // namespace

TEST_CASE("dummy presets: Llama 3.1 shapes are the Hugging Face config values", "[dummy]") {
  const ModelConfig c8 = preset("llama-3.1-8b");
  CHECK(c8.hidden_size == 4096);
  CHECK(c8.num_hidden_layers == 32);
  CHECK(c8.num_attention_heads == 32);
  CHECK(c8.num_key_value_heads == 8);
  CHECK(c8.head_dim == 128);
  CHECK(c8.intermediate_size == 14336);
  CHECK(c8.vocab_size == 128256);  // fixed, whatever the tokenizer's
  CHECK(c8.rope_theta == 500000.0f);
  CHECK(c8.max_position_embeddings == 131072);
  CHECK(c8.rope_scaling.type == RopeScaling::Type::Llama3);
  CHECK(c8.rope_scaling.factor == 8.0f);
  CHECK_FALSE(c8.tie_word_embeddings);
  const ModelConfig c70 = preset("llama-3.1-70b");
  CHECK(c70.hidden_size == 8192);
  CHECK(c70.num_hidden_layers == 80);
  CHECK(c70.num_attention_heads == 64);
  CHECK(c70.num_key_value_heads == 8);
  CHECK(c70.head_dim == 128);
  CHECK(c70.intermediate_size == 28672);
  CHECK(c70.vocab_size == 128256);
  CHECK(c70.max_position_embeddings == 131072);
  const ModelConfig tiny = preset("tiny-llama", 512);
  CHECK(tiny.hidden_size == 64);
  CHECK(tiny.num_hidden_layers == 2);
  CHECK(tiny.num_attention_heads == 4);
  CHECK(tiny.num_key_value_heads == 2);
  CHECK(tiny.head_dim == 16);
  CHECK(tiny.vocab_size == 512);  // the tokenizer's
  CHECK(preset("tiny-llama", 32000).vocab_size == 32000);
  CHECK(model_preset_names() == std::vector<std::string>{"llama-3.1-8b", "llama-3.1-70b",
                                                          "llama-3.2-1b", "tiny-llama"});
}

TEST_CASE("dummy presets: Llama 3.2 1B is the Hugging Face config.json", "[dummy]") {
  // meta-llama/Llama-3.2-1B config.json: hidden 2048, 16 layers, 32 heads, 8 KV heads,
  // head_dim 64, intermediate 8192, vocab 128256, rms_norm_eps 1e-5, rope_theta 500000,
  // rope_scaling llama3 factor 32 / low 1 / high 4 / original 8192, 131072 positions, tied
  // embeddings, bos 128000, eos 128001.
  const ModelConfig c = preset("llama-3.2-1b");
  CHECK(c.hidden_size == 2048);
  CHECK(c.num_hidden_layers == 16);
  CHECK(c.num_attention_heads == 32);
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.head_dim == 64);
  CHECK(c.intermediate_size == 8192);
  CHECK(c.vocab_size == 128256);
  CHECK(c.rms_norm_eps == 1e-5f);
  CHECK(c.rope_theta == 500000.0f);
  CHECK(c.rope_scaling.type == RopeScaling::Type::Llama3);
  CHECK(c.rope_scaling.factor == 32.0f);
  CHECK(c.rope_scaling.low_freq_factor == 1.0f);
  CHECK(c.rope_scaling.high_freq_factor == 4.0f);
  CHECK(c.rope_scaling.original_max_position_embeddings == 8192);
  CHECK(c.max_position_embeddings == 131072);
  CHECK(c.tie_word_embeddings);
  CHECK(c.bos_token_id == 128000);
  CHECK(c.eos_token_ids == std::vector<int32_t>{128001});
  // Tied: the embedding is the lm_head, so the weights have no lm_head of their own.
  const DummyWeightSource src(c, 0, ScaleGranularity::PerRow, "t");
  CHECK(src.has("model.embed_tokens.weight"));
  CHECK_FALSE(src.has("lm_head.weight"));
  CHECK(src.has("model.layers.15.mlp.down_proj.weight"));
  CHECK_FALSE(src.has("model.layers.16.input_layernorm.weight"));
  const TensorView* k = src.raw("model.layers.0.self_attn.k_proj.weight");
  REQUIRE(k != nullptr);
  CHECK(k->shape == std::vector<int64_t>{512, 2048});  // 8 KV heads x 64
  const TensorView* q = src.raw("model.layers.0.self_attn.q_proj.weight");
  REQUIRE(q != nullptr);
  CHECK(q->shape == std::vector<int64_t>{2048, 2048});  // 32 heads x 64
  const TensorView* d = src.raw("model.layers.0.mlp.down_proj.weight");
  REQUIRE(d != nullptr);
  CHECK(d->shape == std::vector<int64_t>{2048, 8192});
}

TEST_CASE("dummy presets: the tensors' shapes follow the config", "[dummy]") {
  const ModelConfig c = preset("llama-3.1-8b");
  const DummyWeightSource src(c, 0, ScaleGranularity::PerRow, "t");
  CHECK(src.has("model.embed_tokens.weight"));
  CHECK(src.has("lm_head.weight"));
  CHECK(src.has("model.layers.31.input_layernorm.weight"));
  CHECK_FALSE(src.has("model.layers.32.input_layernorm.weight"));
  const TensorView* k = src.raw("model.layers.0.self_attn.k_proj.weight");
  REQUIRE(k != nullptr);
  CHECK(k->dtype == TensorDType::F8_E4M3);
  CHECK(k->shape == std::vector<int64_t>{1024, 4096});  // 8 KV heads x 128
  CHECK(k->nbytes == 1024u * 4096u);
  const TensorView* ks = src.raw("model.layers.0.self_attn.k_proj.weight_scale");
  REQUIRE(ks != nullptr);
  CHECK(ks->shape == std::vector<int64_t>{1024, 1});
  const TensorView* o = src.raw("model.layers.5.self_attn.o_proj.weight");
  REQUIRE(o != nullptr);
  CHECK(o->shape == std::vector<int64_t>{4096, 4096});
  CHECK(src.raw("model.layers.0.mlp.down_proj.weight_scale")->shape ==
        std::vector<int64_t>{4096, 1});
  CHECK(src.raw("lm_head.weight") == nullptr);  // 16-bit: load_f32
  CHECK(src.load_f32("model.norm.weight", {4096}) == std::vector<float>(4096, 1.0f));
  CHECK_THROWS_AS(src.load_f32("model.norm.weight", {4095}), ModelFileError);
  CHECK_THROWS_AS(src.load_f32("model.layers.99.input_layernorm.weight", {4096}),
                  ModelFileError);
  const DummyWeightSource per_tensor(c, 0, ScaleGranularity::PerTensor, "t");
  CHECK(per_tensor.raw("model.layers.0.self_attn.k_proj.weight_scale")->shape ==
        std::vector<int64_t>{1, 1});
}

TEST_CASE("dummy weights: same seed same bytes, another seed other bytes", "[dummy]") {
  const ModelConfig c = preset("tiny-llama");
  const LlamaModel a = load_dummy_model(c, 7, cpu());
  const LlamaModel b = load_dummy_model(c, 7, cpu());
  const LlamaModel d = load_dummy_model(c, 8, cpu());
  const LlamaLayerWeights &la = a.weights().layers[1], &lb = b.weights().layers[1],
                          &ld = d.weights().layers[1];
  for (auto member : {&LlamaLayerWeights::q_proj, &LlamaLayerWeights::down_proj}) {
    CHECK(bytes_of(a, (la.*member).weight) == bytes_of(b, (lb.*member).weight));
    CHECK(bytes_of(a, (la.*member).scale) == bytes_of(b, (lb.*member).scale));
    CHECK(bytes_of(a, (la.*member).weight) != bytes_of(d, (ld.*member).weight));
  }
  CHECK(bytes_of(a, a.weights().embed_tokens) == bytes_of(b, b.weights().embed_tokens));
  CHECK(bytes_of(a, a.weights().embed_tokens) != bytes_of(d, d.weights().embed_tokens));
  CHECK(bytes_of(a, a.weights().lm_head.weight) == bytes_of(b, b.weights().lm_head.weight));
  // Different tensors of one model are different streams.
  CHECK(bytes_of(a, la.gate_proj.weight) != bytes_of(a, la.up_proj.weight));
  // seed -1 is the documented default seed.
  const LlamaModel def = load_dummy_model(c, -1, cpu());
  const LlamaModel zero = load_dummy_model(c, static_cast<int64_t>(kDefaultDummySeed), cpu());
  CHECK(bytes_of(def, def.weights().layers[0].v_proj.weight) ==
        bytes_of(zero, zero.weights().layers[0].v_proj.weight));
  CHECK(a.linear_format() == "fp8-w8a8-dynamic-channel");
  CHECK(a.weights().lm_head.format == DType::BF16);
}

TEST_CASE("dummy weights: linears are N(0, 1/in) up to the per-channel jitter", "[dummy]") {
  // Var(W[r, c]) = E[jitter^2] / in with jitter ~ U[0.75, 1.25): E[j^2] = 1 + 0.5^2 / 12.
  const ModelConfig c = preset("llama-3.1-8b");
  const DummyWeightSource src(c, 3, ScaleGranularity::PerRow, "t");
  const std::string name = "model.layers.0.self_attn.k_proj";
  const TensorView* w = src.raw(name + ".weight");
  const TensorView* s = src.raw(name + ".weight_scale");
  REQUIRE((w && s));
  const int64_t out = w->shape[0], in = w->shape[1];
  std::vector<float> scale(static_cast<size_t>(out));
  std::memcpy(scale.data(), s->data, static_cast<size_t>(out) * 4);
  double sum = 0, sum2 = 0, amax = 0;
  int64_t nan_codes = 0;
  float smin = scale[0], smax = scale[0];
  for (int64_t r = 0; r < out; ++r) {
    smin = std::min(smin, scale[r]);
    smax = std::max(smax, scale[r]);
    for (int64_t k = 0; k < in; ++k) {
      const uint8_t code = w->data[r * in + k];
      nan_codes += (code & 0x7F) == 0x7F;  // never the NaN code
      const double x = static_cast<double>(fp8_e4m3_to_float(code)) * scale[r];
      sum += x;
      sum2 += x * x;
      amax = std::max(amax, std::abs(static_cast<double>(fp8_e4m3_to_float(code))));
    }
  }
  CHECK(nan_codes == 0);
  const double n = static_cast<double>(out * in);
  const double expected_var = (1.0 + 0.25 / 12.0) / static_cast<double>(in);
  CHECK(std::abs(sum / n) < 0.01 / std::sqrt(static_cast<double>(in)));
  CHECK(sum2 / n == Approx(expected_var).epsilon(0.03));
  CHECK(amax == 448.0);  // the table's largest quantile maps to E4M3's max
  // Scales: jitter in [0.75, 1.25) times one base, so max / min < 1.25 / 0.75.
  CHECK(smax / smin < 1.25f / 0.75f);
  CHECK(smax / smin > 1.5f);  // and they do vary per channel
  // Embeddings ~ N(0, 1); lm_head ~ N(0, 1 / hidden).
  for (auto [tensor, var] : {std::pair{"model.embed_tokens.weight", 1.0},
                             std::pair{"lm_head.weight", 1.0 / 4096}}) {
    const std::vector<float> v = src.load_f32(tensor, {128256, 4096});
    double s2 = 0;
    for (size_t i = 0; i < v.size(); i += 97) s2 += static_cast<double>(v[i]) * v[i];
    CHECK(s2 / static_cast<double>((v.size() + 96) / 97) == Approx(var).epsilon(0.02));
  }
}

TEST_CASE("dummy weights: TP 2 shards have the shard shapes and are slices of TP 1", "[dummy]") {
  const ModelConfig c = preset("tiny-llama");
  const LlamaModel whole = load_dummy_model(c, 5, cpu());
  const LlamaLayerWeights& w = whole.weights().layers[0];
  for (int rank = 0; rank < 2; ++rank) {
    const LlamaModel part = load_dummy_model(c, 5, cpu(rank, 2));
    const TensorParallelShard& s = part.shard();
    const LlamaLayerWeights& p = part.weights().layers[0];
    CHECK(s.num_heads == 2);
    CHECK(s.num_kv_heads == 1);
    CHECK(p.q_proj.out_features == 32);  // 2 of 4 heads x 16
    CHECK(p.q_proj.in_features == 64);
    CHECK(p.k_proj.out_features == 16);  // 1 of 2 KV heads
    CHECK(p.v_proj.out_features == 16);
    CHECK(p.o_proj.out_features == 64);
    CHECK(p.o_proj.in_features == 32);
    CHECK(p.gate_proj.out_features == 64);  // 128 / 2
    CHECK(p.up_proj.out_features == 64);
    CHECK(p.down_proj.out_features == 64);
    CHECK(p.down_proj.in_features == 64);
    CHECK(part.weights().lm_head.out_features == 256);  // 512 / 2
    // Column-parallel shards: this rank's rows of the whole tensor, codes and scales.
    CHECK(codes_of(part, p.q_proj) ==
          rows(codes_of(whole, w.q_proj), 64, s.q_row_begin(), 32));
    CHECK(codes_of(part, p.k_proj) ==
          rows(codes_of(whole, w.k_proj), 64, s.kv_row_begin(), 16));
    CHECK(codes_of(part, p.gate_proj) ==
          rows(codes_of(whole, w.gate_proj), 64, s.intermediate_begin, 64));
    const std::vector<float> ws = floats_of(whole, w.q_proj.scale);
    CHECK(floats_of(part, p.q_proj.scale) ==
          std::vector<float>(ws.begin() + s.q_row_begin(), ws.begin() + s.q_row_begin() + 32));
    // Row-parallel o_proj: columns [32 * rank, 32 * rank + 32) of every row; scales whole.
    const std::vector<uint8_t> wo = codes_of(whole, w.o_proj), po = codes_of(part, p.o_proj);
    std::vector<uint8_t> cols;
    for (int64_t r = 0; r < 64; ++r)
      for (int64_t k = 0; k < 32; ++k) cols.push_back(wo[r * 64 + s.q_row_begin() + k]);
    CHECK(po == cols);
    CHECK(floats_of(part, p.o_proj.scale) == floats_of(whole, w.o_proj.scale));
    // Replicated embedding table.
    CHECK(bytes_of(part, part.weights().embed_tokens) ==
          bytes_of(whole, whole.weights().embed_tokens));
  }
}

TEST_CASE("dummy weights: the tiny preset's forward gives finite, spread logits", "[dummy]") {
  const ModelConfig c = preset("tiny-llama");
  for (const std::string q : {"auto", "none"}) {
    const LlamaModel m = load_dummy_model(c, 1, cpu(0, 1, q));
    CHECK(m.linear_format() == (q == "none" ? "fp32" : "fp8-w8a8-dynamic-channel"));
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back((i * 37 + 1) % 512);
    SequenceKVCache cache = m.new_cache(static_cast<int64_t>(ids.size()));
    const std::vector<float> logits =
        m.forward(ids.data(), static_cast<int64_t>(ids.size()), 0, cache, true);
    REQUIRE(logits.size() == ids.size() * 512);
    double s2 = 0;
    int64_t non_finite = 0;
    for (float x : logits) {
      non_finite += !std::isfinite(x);
      s2 += static_cast<double>(x) * x;
    }
    CHECK(non_finite == 0);
    // rms(x) . lm_head row with lm_head ~ N(0, 1/hidden): logits ~ N(0, 1) (wide margin).
    const double rms = std::sqrt(s2 / static_cast<double>(logits.size()));
    CHECK(rms > 0.3);
    CHECK(rms < 3.0);
    // Positions see different contexts: their logits rows differ.
    CHECK(std::vector<float>(logits.begin(), logits.begin() + 512) !=
          std::vector<float>(logits.begin() + 512 * 39, logits.end()));
  }
}

TEST_CASE("dummy --model: presets, config.json directories and files, clear errors", "[dummy]") {
  CHECK(find_dummy_model("tiny-llama").vocab_from_tokenizer);
  CHECK(find_dummy_model("llama-3.1-8b").label == "preset llama-3.1-8b");
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("octet_dummy_cfg_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "config.json");
    f << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
             "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
             "intermediate_size": 48, "vocab_size": 1000, "tie_word_embeddings": true})";
  }
  for (const std::string& path : {dir.string(), (dir / "config.json").string()}) {
    const DummyModelSpec spec = find_dummy_model(path);
    CHECK(spec.dir == dir.string());
    CHECK_FALSE(spec.vocab_from_tokenizer);
    const ModelConfig c = dummy_model_config(spec, 512);
    CHECK(c.vocab_size == 1000);
    CHECK(c.num_hidden_layers == 3);
    CHECK(c.tie_word_embeddings);
    const LlamaModel m = load_dummy_model(c, 0, cpu());  // tied: lm_head = the embedding
    CHECK(m.weights().lm_head.out_features == 1000);
  }
  try {
    find_dummy_model("llama-9b");
    FAIL("no error");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("llama-9b") && Catch::Contains("llama-3.1-8b") &&
                             Catch::Contains("config.json"));
  }
  {
    std::ofstream f(dir / "config.json");
    f << "[1, 2";
  }
  CHECK_THROWS_AS(find_dummy_model(dir.string()), ModelFileError);
  std::filesystem::remove_all(dir);
}

}  // namespace octet

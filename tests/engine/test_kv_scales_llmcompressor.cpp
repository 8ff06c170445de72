// The FP8 KV cache scales llm-compressor writes for SmolLM2-135M-Instruct
// (scripts/make_llmcompressor_kv_scales.py: kv_cache_scheme strategy tensor and attn_head,
// summarized in tests/models/golden/llmcompressor_smollm2_kv.json) load in octet with
// identical values, through Engine::create (what `octet serve --model DIR` runs):
//  1. (CI) a checkpoint of SmolLM2's KV geometry (30 layers, 9 heads, 3 KV heads, head_dim 64;
//     a 64-wide residual stream, 64-wide MLP and the 512-token tiny_llama tokenizer so it stays
//     small) with llm-compressor's config.json quantization_config verbatim, FP8 weights laid
//     out as llm-compressor's (weight + weight_scale [out, 1]) and exactly the KV scale tensors
//     of the golden file (names, dtypes, shapes, raw bytes); every layer's k_scale / v_scale
//     (per KV head for attn_head) must equal the golden bit for bit.
//  2. (CI) octet's writer (`octet calibrate` to a checkpoint: kv_scale_tensors,
//     kv_cache_scheme_config) writes the same KV tensors and kv_cache_scheme as llm-compressor.
//     That octet's own checkpoints load back with identical values is tested in
//     tests/engine/test_calibrate.cpp ("scales file and checkpoint load back ...").
//  3. (local, skipped when the checkpoints are absent under OCTET_LLMC_DIR) the real
//     llm-compressor directories load through Engine::create with the golden's values, and
//     those equal the bytes of model.safetensors read here by hand; octet's calibrate writer
//     (write_kv_calibrated_checkpoint) given the same float32 source and those scales writes
//     the same model.safetensors byte for byte, which loads back with the same values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/calibrate.h"
#include "engine/engine.h"
#include "engine_test_support.h"
#include "kernels/common/weight_quant.h"
#include "models/checkpoint_writer.h"
#include "tiny_models.h"

using namespace octet;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;

constexpr int64_t kLayers = 30, kHeads = 9, kKVHeads = 3, kHeadDim = 64;
// The small dimensions of the CI checkpoint (SmolLM2: hidden 576, intermediate 1536, vocab
// 49152); none of them enters the KV scale path.
constexpr int64_t kHidden = 64, kInter = 64, kVocab = 512;
const char* const kStrategies[] = {"tensor", "attn_head"};

json golden() {
  std::ifstream f(std::string(OCTET_SOURCE_DIR) +
                  "/tests/models/golden/llmcompressor_smollm2_kv.json");
  REQUIRE(f.good());
  return json::parse(f);
}

/// Reported by CTest as skipped (SKIP_RETURN_CODE 77), never as passed.
[[noreturn]] void skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::exit(77);
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  REQUIRE(hex.size() % 2 == 0);
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

/// FP32 values of raw little-endian F32 / BF16 bytes (BF16 is the top half of an FP32).
std::vector<float> decode(const std::string& dtype, const std::vector<uint8_t>& raw) {
  std::vector<float> out;
  if (dtype == "F32") {
    out.resize(raw.size() / 4);
    std::memcpy(out.data(), raw.data(), out.size() * 4);
  } else if (dtype == "BF16") {
    for (size_t i = 0; i + 1 < raw.size(); i += 2) {
      const uint32_t bits = uint32_t(raw[i]) << 16 | uint32_t(raw[i + 1]) << 24;
      float f;
      std::memcpy(&f, &bits, 4);
      out.push_back(f);
    }
  } else {
    FAIL("golden dtype " << dtype << ": this test decodes F32 and BF16");
  }
  return out;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct GoldenLayer {
  std::vector<float> k, v;  // 1 (tensor) or kKVHeads (attn_head) values
};

/// [kLayers] scales of one golden checkpoint, decoded from the hex bytes; checks that the
/// golden's names are the layers' self_attn.k_scale / v_scale, each once, and that its hex and
/// its decimal values agree.
std::vector<GoldenLayer> golden_layers(const json& ck) {
  std::vector<GoldenLayer> out(kLayers);
  REQUIRE(ck["kv_scales"].size() == size_t(2 * kLayers));
  for (const json& t : ck["kv_scales"]) {
    const std::string name = t["name"];
    INFO(name);
    const std::vector<float> v = decode(t["dtype"], from_hex(t["hex"]));
    const auto dec = t["values"].get<std::vector<double>>();
    REQUIRE(dec.size() == v.size());
    for (size_t i = 0; i < v.size(); ++i) REQUIRE(float(dec[i]) == v[i]);
    int64_t layer = -1;
    char which[16] = {};
    REQUIRE(std::sscanf(name.c_str(), "model.layers.%ld.self_attn.%15s", &layer, which) == 2);
    REQUIRE(name == "model.layers." + std::to_string(layer) + ".self_attn." + which);
    REQUIRE((layer >= 0 && layer < kLayers));
    const std::string w = which;
    if (w != "k_scale" && w != "v_scale") FAIL("unexpected KV scale name " << name);
    std::vector<float>& slot = w == "k_scale" ? out[size_t(layer)].k : out[size_t(layer)].v;
    REQUIRE(slot.empty());
    slot = v;
  }
  return out;
}

/// The scales the engine uses for layer l must be golden's bit for bit: per KV head for
/// attn_head, the one per-tensor value for every head for tensor.
void require_engine_scales(const Engine& e, const std::vector<GoldenLayer>& want,
                           const std::string& strategy) {
  const std::vector<KVLayerInfo>& layers = e.kv_layers();
  REQUIRE(layers.size() == size_t(kLayers));
  for (int64_t l = 0; l < kLayers; ++l) {
    INFO(strategy << " layer " << l);
    const KVLayerInfo& got = layers[size_t(l)];
    CHECK(got.dtype == "fp8_e4m3");
    CHECK(got.scale_source == "checkpoint");
    const GoldenLayer& g = want[size_t(l)];
    REQUIRE(g.k.size() == (strategy == "tensor" ? 1u : size_t(kKVHeads)));
    REQUIRE(g.v.size() == g.k.size());
    REQUIRE(got.k_scale.size() == size_t(kKVHeads));
    REQUIRE(got.v_scale.size() == size_t(kKVHeads));
    for (size_t h = 0; h < size_t(kKVHeads); ++h) {
      INFO("KV head " << h);
      CHECK(bits(got.k_scale[h]) == bits(g.k[g.k.size() == 1 ? 0 : h]));
      CHECK(bits(got.v_scale[h]) == bits(g.v[g.v.size() == 1 ? 0 : h]));
    }
  }
}

EngineArgs fp8_kv_args(const std::string& model) {
  return testing::engine_args(model, {.device = "cpu",
                                      .kv_cache_dtype = "fp8_e4m3",
                                      .kv_cache_memory_bytes = 16 << 20,
                                      .max_model_len = 256});
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TensorDType dtype_of(const std::string& s) {
  if (s == "F32") return TensorDType::F32;
  if (s == "BF16") return TensorDType::BF16;
  if (s == "F16") return TensorDType::F16;
  if (s == "F8_E4M3") return TensorDType::F8_E4M3;
  FAIL("dtype " << s);
  return TensorDType::F32;
}

/// The CI checkpoint (see the top of this file) in dir: llm-compressor's config.json with the
/// small dimensions, tiny_llama's tokenizer, pseudo-random weights quantized per output channel
/// (every other tensor in the dtype llm-compressor wrote it), and the golden KV scale tensors.
void write_smollm2_kv_geometry(const std::string& dir, const json& ck) {
  fs::create_directories(dir);
  json config = ck["config"];
  REQUIRE(config["num_hidden_layers"] == kLayers);
  REQUIRE(config["num_attention_heads"] == kHeads);
  REQUIRE(config["num_key_value_heads"] == kKVHeads);
  REQUIRE(config["head_dim"] == kHeadDim);
  REQUIRE(config["quantization_config"] == ck["quantization_config"]);
  config["hidden_size"] = kHidden;
  config["intermediate_size"] = kInter;
  config["vocab_size"] = kVocab;
  config["max_position_embeddings"] = 256;
  std::ofstream(dir + "/config.json") << config.dump(2);
  const std::string tok = testing::tiny_model_dir("tiny_llama");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    fs::copy_file(tok + "/" + f, dir + "/" + f);

  // llm-compressor's dtypes for layer 0 and the tensors outside the layers.
  std::map<std::string, std::string> dtypes;
  for (const json& t : ck["tensors_layer0_and_outside"]) dtypes[t[0]] = t[1];
  auto dtype = [&](const std::string& name) {
    const std::string key = name.rfind("model.layers.", 0) == 0
                                ? "model.layers.0" + name.substr(name.find('.', 13))
                                : name;
    INFO(name);
    REQUIRE(dtypes.count(key) == 1);
    return dtypes.at(key);
  };
  std::vector<WriterTensor> tensors;
  auto plain = [&](const std::string& name, std::vector<int64_t> shape, const char* rule) {
    REQUIRE(dtype(name) == "F32");
    tensors.push_back({name, TensorDType::F32, shape,
                       f32_bytes(testing::tiny_tensor_values(name, shape, rule, 7)), {}});
  };
  auto linear = [&](const std::string& module, int64_t out, int64_t in) {
    REQUIRE(dtype(module + ".weight") == "F8_E4M3");
    const std::vector<float> w = testing::tiny_tensor_values(module + ".weight", {out, in},
                                                             "linear", 7);
    std::vector<uint8_t> q(static_cast<size_t>(out * in));
    std::vector<float> s(static_cast<size_t>(out));
    quantize_weight_e4m3(w.data(), out, in, ScaleGranularity::PerRow, q.data(), s.data());
    tensors.push_back({module + ".weight", TensorDType::F8_E4M3, {out, in}, q, {}});
    REQUIRE(dtype(module + ".weight_scale") == "F32");
    tensors.push_back({module + ".weight_scale", TensorDType::F32, {out, 1}, f32_bytes(s), {}});
  };
  plain("model.embed_tokens.weight", {kVocab, kHidden}, "embed");
  plain("model.norm.weight", {kHidden}, "norm");
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    plain(p + "input_layernorm.weight", {kHidden}, "norm");
    plain(p + "post_attention_layernorm.weight", {kHidden}, "norm");
    linear(p + "self_attn.q_proj", kHeads * kHeadDim, kHidden);
    linear(p + "self_attn.k_proj", kKVHeads * kHeadDim, kHidden);
    linear(p + "self_attn.v_proj", kKVHeads * kHeadDim, kHidden);
    linear(p + "self_attn.o_proj", kHidden, kHeads * kHeadDim);
    linear(p + "mlp.gate_proj", kInter, kHidden);
    linear(p + "mlp.up_proj", kInter, kHidden);
    linear(p + "mlp.down_proj", kHidden, kInter);
  }
  // Every tensor llm-compressor wrote for layer 0 and outside the layers is here (and the KV
  // scales, below), so the loader sees the same layout.
  size_t layer0_and_outside = 0;
  for (const WriterTensor& t : tensors)
    layer0_and_outside += t.name.rfind("model.layers.", 0) != 0 ||
                          t.name.rfind("model.layers.0.", 0) == 0;
  size_t kv_in_list = 0;
  for (const auto& [name, dt] : dtypes) kv_in_list += is_kv_scale_tensor_name(name);
  REQUIRE(layer0_and_outside + kv_in_list == dtypes.size());

  for (const json& t : ck["kv_scales"])
    tensors.push_back({t["name"], dtype_of(t["dtype"]), t["shape"].get<std::vector<int64_t>>(),
                       from_hex(t["hex"]), {}});
  REQUIRE(int64_t(tensors.size()) == ck["num_tensors"].get<int64_t>());
  write_safetensors(dir + "/model.safetensors", tensors);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("llm-compressor's SmolLM2 KV scales load bit for bit (SmolLM2 KV geometry)",
          "[kv_scales][llmcompressor]") {
  const json g = golden();
  for (const char* strategy : kStrategies) {
    INFO(strategy);
    const json& ck = g["checkpoints"][strategy];
    REQUIRE(ck["kv_cache_scheme"]["strategy"] == strategy);
    REQUIRE(ck["kv_cache_scheme"]["dynamic"] == false);
    const std::vector<GoldenLayer> want = golden_layers(ck);
    testing::TempDir tmp;
    const std::string dir = tmp.file(std::string("smollm2-kv-") + strategy);
    write_smollm2_kv_geometry(dir, ck);
    const auto engine = Engine::create(fp8_kv_args(dir));
    require_engine_scales(*engine, want, strategy);
    // Not every layer's scale the same value: the test tells layers (and heads) apart.
    CHECK(want[0].k != want[kLayers - 1].k);
  }
}

TEST_CASE("octet's checkpoint writer writes llm-compressor's KV tensors and kv_cache_scheme",
          "[kv_scales][llmcompressor]") {
  const json g = golden();
  for (const char* strategy : kStrategies) {
    INFO(strategy);
    const json& ck = g["checkpoints"][strategy];
    const std::vector<GoldenLayer> want = golden_layers(ck);
    // Every key and value, the observer included (llm-compressor 0.14 writes null: the recipe
    // leaves it unset).
    json theirs = ck["kv_cache_scheme"], ours = kv_cache_scheme_config(strategy);
    REQUIRE(theirs.contains("observer"));
    CHECK(theirs["observer"].is_null());
    CHECK(ours == theirs);
    json q = fp8_dynamic_quantization_config({"lm_head"}), want_q = ck["quantization_config"];
    q["kv_cache_scheme"] = ours;
    want_q["kv_cache_scheme"] = theirs;
    CHECK(q == want_q);

    std::vector<LayerKVScales> scales;
    for (const GoldenLayer& l : want) scales.push_back({l.k, l.v});
    const std::vector<WriterTensor> mine = kv_scale_tensors(scales, strategy, kKVHeads);
    std::map<std::string, const WriterTensor*> by_name;
    for (const WriterTensor& t : mine) by_name[t.name] = &t;
    REQUIRE(by_name.size() == ck["kv_scales"].size());
    for (const json& t : ck["kv_scales"]) {
      INFO(t["name"]);
      REQUIRE(by_name.count(t["name"]) == 1);
      const WriterTensor& m = *by_name.at(t["name"]);
      CHECK(dtype_name(m.dtype) == t["dtype"].get<std::string>());
      CHECK(m.shape == t["shape"].get<std::vector<int64_t>>());
      CHECK(m.bytes == from_hex(t["hex"]));
    }
  }
}

TEST_CASE("llm-compressor's real SmolLM2 FP8 KV checkpoints load bit for bit (local)",
          "[kv_scales][llmcompressor][local]") {
  const json g = golden();
  const std::string root = OCTET_LLMC_DIR;
  std::vector<std::string> needed = {root + "/SmolLM2-135M-Instruct-F32/config.json"};
  for (const char* strategy : kStrategies)
    needed.push_back(root + "/" + g["checkpoints"][strategy]["directory"].get<std::string>() +
                     "/model.safetensors");
  for (const std::string& f : needed)
    if (!fs::exists(f))
      skip(f + " not found (make it with scripts/make_llmcompressor_kv_scales.py)");
  for (const char* strategy : kStrategies) {
    INFO(strategy);
    const json& ck = g["checkpoints"][strategy];
    const std::string dir = root + "/" + ck["directory"].get<std::string>();
    const json config = json::parse(read_text(dir + "/config.json"));
    CHECK(config == ck["config"]);
    // The file's own bytes, read here without octet's reader, equal the golden's.
    const std::string st = read_text(dir + "/model.safetensors");
    uint64_t n = 0;
    std::memcpy(&n, st.data(), 8);
    const json header = json::parse(st.substr(8, n));
    for (const json& t : ck["kv_scales"]) {
      INFO(t["name"]);
      const json& h = header.at(t["name"].get<std::string>());
      CHECK(h["dtype"] == t["dtype"]);
      CHECK(h["shape"] == t["shape"]);
      const size_t b = h["data_offsets"][0], e = h["data_offsets"][1];
      const std::string raw = st.substr(8 + n + b, e - b);
      CHECK(std::vector<uint8_t>(raw.begin(), raw.end()) == from_hex(t["hex"]));
    }
    const std::vector<GoldenLayer> want = golden_layers(ck);
    require_engine_scales(*Engine::create(fp8_kv_args(dir)), want, strategy);

    // octet's `octet calibrate --output DIR` writer, given llm-compressor's scales and the same
    // float32 source: model.safetensors byte for byte, config.json key for key.
    const std::string f32_dir = root + "/SmolLM2-135M-Instruct-F32";
    KVCalibration cal;
    cal.strategy = strategy;
    cal.kv_cache_dtype = "fp8_e4m3";
    for (const GoldenLayer& l : want) cal.k_scale.push_back(l.k), cal.v_scale.push_back(l.v);
    testing::TempDir tmp;
    const std::string out = tmp.file("octet-kv");
    write_kv_calibrated_checkpoint(f32_dir, out, cal);
    const json mine = json::parse(read_text(out + "/config.json"));
    CHECK(mine == config);
    const std::string octet_st = read_text(out + "/model.safetensors");
    CHECK(octet_st.size() == st.size());
    CHECK((octet_st == st));  // not the strings themselves in a failure message: 160 MB
    require_engine_scales(*Engine::create(fp8_kv_args(out)), want, strategy);
  }
}

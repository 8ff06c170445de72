// The safetensors / compressed-tensors FP8_DYNAMIC writer: files read back by hand (header
// bytes) and with SafetensorsFile / HFCheckpoint must hold every byte written; the layout and
// config.json keys must equal what llm-compressor wrote for SmolLM2
// (tests/models/golden/llmcompressor_smollm2.json, scripts/make_llmcompressor_checkpoints.py).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_writer.h"  // TempDir
#include "models/checkpoint.h"
#include "models/checkpoint_writer.h"
#include "models/model_config.h"
#include "models/quant_config.h"
#include "models/quant_validate.h"

using namespace octet;
using nlohmann::json;
using octet::testing::TempDir;

namespace {

json golden() {
  std::ifstream f(std::string(OCTET_SOURCE_DIR) +
                  "/tests/models/golden/llmcompressor_smollm2.json");
  REQUIRE(f.good());
  return json::parse(f);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// Deterministic pseudo-random bytes (no dependence on the code under test).
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> b(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : b) {
    x = x * 1664525u + 1013904223u;
    v = uint8_t(x >> 24);
  }
  return b;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

WriterTensor tensor(const std::string& name, TensorDType dtype, std::vector<int64_t> shape,
                    uint32_t seed, int64_t elem_size) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return {name, dtype, shape, pattern(size_t(n * elem_size), seed), {}};
}

/// The header of a safetensors file parsed by hand: (JSON, header length).
std::pair<json, uint64_t> read_header(const std::string& path) {
  const std::string s = read_text(path);
  REQUIRE(s.size() >= 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(s[size_t(i)])) << (8 * i);
  REQUIRE(8 + n <= s.size());
  return {json::parse(s.substr(8, n)), n};
}

/// Names in the order of their data in the file.
std::vector<std::string> data_order(const json& header) {
  std::vector<std::pair<uint64_t, std::string>> v;
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__") v.push_back({it.value()["data_offsets"][0], it.key()});
  std::sort(v.begin(), v.end());
  std::vector<std::string> names;
  for (auto& p : v) names.push_back(p.second);
  return names;
}

void check_same(const TensorView& got, const WriterTensor& want) {
  INFO(want.name);
  CHECK(got.name == want.name);
  CHECK(got.dtype == want.dtype);
  CHECK(got.shape == want.shape);
  REQUIRE(got.nbytes == want.bytes.size());
  CHECK(std::memcmp(got.data, want.bytes.data(), want.bytes.size()) == 0);
}

// A tiny LlamaForCausalLM: 2 layers, hidden 8, 2 heads x head_dim 4, 1 KV head, MLP 12,
// vocab 16, tied embeddings.
const int64_t kH = 8, kQ = 8, kKV = 4, kFF = 12, kVocab = 16, kLayers = 2;

json tiny_config() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
          {"hidden_size", kH}, {"num_hidden_layers", kLayers}, {"num_attention_heads", 2},
          {"num_key_value_heads", 1}, {"head_dim", 4}, {"intermediate_size", kFF},
          {"vocab_size", kVocab}, {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", true},
          {"max_position_embeddings", 64}, {"dtype", "float32"}};
}

/// FP8_DYNAMIC tensors of the tiny model: codes and scales are arbitrary patterns (the writer
/// stores bytes; it does no quantization).
std::vector<WriterTensor> tiny_fp8_tensors() {
  std::vector<WriterTensor> t;
  uint32_t seed = 1;
  t.push_back(tensor("model.embed_tokens.weight", TensorDType::F32, {kVocab, kH}, seed++, 4));
  t.push_back(tensor("model.norm.weight", TensorDType::F32, {kH}, seed++, 4));
  const int64_t shapes[7][2] = {{kQ, kH}, {kKV, kH}, {kKV, kH}, {kH, kQ},
                                {kFF, kH}, {kFF, kH}, {kH, kFF}};
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back(tensor(p + "input_layernorm.weight", TensorDType::F32, {kH}, seed++, 4));
    t.push_back(tensor(p + "post_attention_layernorm.weight", TensorDType::F32, {kH}, seed++, 4));
    const std::vector<std::string> mods = llama_linear_modules(l);
    for (size_t i = 0; i < 7; ++i) {
      t.push_back(tensor(mods[i] + ".weight", TensorDType::F8_E4M3, {shapes[i][0], shapes[i][1]},
                         seed++, 1));
      std::vector<float> s(static_cast<size_t>(shapes[i][0]));
      for (size_t r = 0; r < s.size(); ++r) s[r] = 0.001f * float(r + 1 + 10 * i);
      t.push_back({mods[i] + ".weight_scale", TensorDType::F32, {shapes[i][0], 1}, f32_bytes(s), {}});
    }
  }
  return t;
}

ModelConfig tiny_model_config() {
  ModelConfig m;
  m.architecture = "llama";
  m.hidden_size = kH;
  m.num_hidden_layers = kLayers;
  m.num_attention_heads = 2;
  m.num_key_value_heads = 1;
  m.head_dim = 4;
  m.rotary_dim = 4;
  m.intermediate_size = kFF;
  m.vocab_size = kVocab;
  m.tie_word_embeddings = true;
  return m;
}

}  // namespace

TEST_CASE("write_safetensors round trip, every dtype", "[checkpoint_writer]") {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  std::vector<WriterTensor> ts = {
      tensor("a.f32", TensorDType::F32, {3, 5}, 1, 4),
      tensor("b.f16", TensorDType::F16, {7}, 2, 2),
      tensor("c.bf16", TensorDType::BF16, {2, 3, 2}, 3, 2),
      tensor("d.fp8", TensorDType::F8_E4M3, {4, 9}, 4, 1),
      tensor("e.e5m2", TensorDType::F8_E5M2, {5}, 5, 1),
      tensor("f.i64", TensorDType::I64, {2}, 6, 8),
      tensor("g.scalar", TensorDType::F32, {}, 7, 4),
      tensor("h.u8", TensorDType::U8, {1, 1}, 8, 1),
  };
  write_safetensors(path, ts);

  SECTION("read by hand: aligned header, contiguous offsets, safetensors' order") {
    const auto [header, n] = read_header(path);
    CHECK(n % 8 == 0);
    CHECK(header["__metadata__"] == json{{"format", "pt"}});
    // Dtype size descending, then name: what the safetensors library writes.
    CHECK(data_order(header) == std::vector<std::string>{"f.i64", "a.f32", "g.scalar", "b.f16",
                                                         "c.bf16", "d.fp8", "e.e5m2", "h.u8"});
    uint64_t end = 0;
    for (const std::string& name : data_order(header)) {
      CHECK(header[name]["data_offsets"][0] == end);
      end = header[name]["data_offsets"][1];
    }
    CHECK(8 + n + end == std::filesystem::file_size(path));
  }
  SECTION("read with SafetensorsFile") {
    const SafetensorsFile f = SafetensorsFile::open(path);
    CHECK(f.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
    REQUIRE(f.tensors().size() == ts.size());
    for (const WriterTensor& t : ts) {
      const TensorView* v = f.find(t.name);
      REQUIRE(v != nullptr);
      check_same(*v, t);
    }
  }
}

TEST_CASE("write_safetensors streams produce() and rejects bad input", "[checkpoint_writer]") {
  TempDir dir;
  const std::vector<uint8_t> big = pattern(4 * 6, 9);
  int calls = 0;
  WriterTensor s{"s", TensorDType::F32, {2, 3}, {}, [&] { ++calls; return big; }};
  write_safetensors(dir.file("s.safetensors"), {s});
  CHECK(calls == 1);
  const SafetensorsFile f = SafetensorsFile::open(dir.file("s.safetensors"));
  REQUIRE(f.find("s") != nullptr);
  CHECK(std::memcmp(f.find("s")->data, big.data(), big.size()) == 0);

  WriterTensor wrong{"w", TensorDType::F32, {2, 2}, {}, [&] { return big; }};
  CHECK_THROWS_WITH(write_safetensors(dir.file("w.safetensors"), {wrong}),
                    Catch::Contains("tensor w: produce() returned 24 bytes"));
  CHECK_THROWS_WITH(write_safetensors(dir.file("x.safetensors"),
                                      {tensor("x", TensorDType::F16, {3}, 1, 4)}),
                    Catch::Contains("tensor x has 12 bytes, its dtype and shape need 6"));
  CHECK_THROWS_WITH(write_safetensors(dir.file("d.safetensors"),
                                      {tensor("d", TensorDType::U8, {1}, 1, 1),
                                       tensor("d", TensorDType::U8, {1}, 2, 1)}),
                    Catch::Contains("duplicate tensor d"));
}

TEST_CASE("sharded checkpoint with index", "[checkpoint_writer]") {
  TempDir dir;
  const std::string out = dir.file("ckpt");
  std::vector<WriterTensor> ts;
  for (const char* name : {"t0", "t1", "t2", "t3", "t4"})
    ts.push_back(tensor(name, TensorDType::F32, {10}, uint32_t(ts.size() + 1), 4));
  // 40 bytes each, at most 100 per shard: t0 t1 | t2 t3 | t4.
  const std::vector<std::string> files = write_safetensors_checkpoint(out, ts, 100);
  CHECK(files == std::vector<std::string>{"model-00001-of-00003.safetensors",
                                          "model-00002-of-00003.safetensors",
                                          "model-00003-of-00003.safetensors",
                                          "model.safetensors.index.json"});
  const json index = json::parse(read_text(out + "/model.safetensors.index.json"));
  CHECK(index["metadata"]["total_size"] == 200);
  CHECK(index["weight_map"]["t0"] == "model-00001-of-00003.safetensors");
  CHECK(index["weight_map"]["t3"] == "model-00002-of-00003.safetensors");
  CHECK(index["weight_map"]["t4"] == "model-00003-of-00003.safetensors");

  std::ofstream(out + "/config.json") << tiny_config().dump();
  const HFCheckpoint ck = HFCheckpoint::open(out);
  CHECK(ck.tensor_names() == std::vector<std::string>{"t0", "t1", "t2", "t3", "t4"});
  for (const WriterTensor& t : ts) check_same(ck.tensor(t.name), t);
}

TEST_CASE("safetensors data order equals llm-compressor's file", "[checkpoint_writer]") {
  // Same names and dtypes as llm-compressor's SmolLM2 FP8_DYNAMIC file, tiny shapes (the order
  // depends on dtype and name only).
  const json g = golden()["checkpoints"]["fp8_dynamic"];
  std::vector<WriterTensor> ts;
  for (const json& t : g["tensors"]) {
    const std::string dt = t[1];
    REQUIRE((dt == "F32" || dt == "F8_E4M3"));
    ts.push_back(dt == "F32" ? tensor(t[0], TensorDType::F32, {1}, 1, 4)
                             : tensor(t[0], TensorDType::F8_E4M3, {1}, 1, 1));
  }
  TempDir dir;
  write_safetensors(dir.file("m.safetensors"), ts);
  const auto [header, n] = read_header(dir.file("m.safetensors"));
  CHECK(data_order(header) == g["data_order"].get<std::vector<std::string>>());
  CHECK(header["__metadata__"] == g["safetensors_metadata"]);
}

TEST_CASE("FP8_DYNAMIC checkpoint laid out as llm-compressor's", "[checkpoint_writer]") {
  const json g = golden()["checkpoints"]["fp8_dynamic"];
  TempDir dir;
  const std::string src_tok = dir.file("tokenizer.json"), src_tc = dir.file("tokenizer_config.json");
  std::ofstream(src_tok) << R"({"model": {"type": "BPE"}})";
  std::ofstream(src_tc) << R"({"eos_token": "<|im_end|>"})";
  const json source = tiny_config();
  Fp8DynamicCheckpoint ck;
  ck.source_config = &source;
  ck.tensors = tiny_fp8_tensors();
  ck.copy_files = {src_tok, src_tc};
  const std::string out = dir.file("out");
  write_compressed_tensors_fp8_dynamic(out, ck);

  SECTION("quantization_config and recipe.yaml equal llm-compressor's") {
    CHECK(fp8_dynamic_quantization_config({"lm_head"}) == g["quantization_config"]);
    const json cfg = json::parse(read_text(out + "/config.json"));
    CHECK(cfg["quantization_config"] == g["quantization_config"]);
    json rest = cfg;
    rest.erase("quantization_config");
    CHECK(rest == source);
    CHECK(read_text(out + "/recipe.yaml") == g["recipe_yaml"].get<std::string>());
  }
  SECTION("files: llm-compressor's set, less what the source lacked") {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(out))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"config.json", "model.safetensors", "recipe.yaml",
                                            "tokenizer.json", "tokenizer_config.json"});
    for (const std::string& n : names) {
      const auto& gf = g["files"];
      CHECK(std::find(gf.begin(), gf.end(), n) != gf.end());
    }
    CHECK(read_text(out + "/tokenizer.json") == read_text(src_tok));
    CHECK(read_text(out + "/tokenizer_config.json") == read_text(src_tc));
  }
  SECTION("tensors: every byte back; dtypes and shape kinds as llm-compressor's") {
    const HFCheckpoint ck2 = HFCheckpoint::open(out);
    REQUIRE(ck2.tensor_names().size() == ck.tensors.size());
    for (const WriterTensor& t : ck.tensors) check_same(ck2.tensor(t.name), t);
    // Per linear llm-compressor wrote X.weight F8_E4M3 [out, in] and X.weight_scale F32 [out, 1].
    for (const json& t : g["tensors"]) {
      const std::string name = t[0];
      if (name.ends_with(".weight_scale")) {
        CHECK(t[1] == "F32");
        CHECK(t[2].size() == 2);
        CHECK(t[2][1] == 1);
      }
    }
    // It loads as FP8_DYNAMIC and passes validation.
    const QuantConfig q = QuantConfig::from_hf_config(ck2.config(), out + "/config.json");
    CHECK(q.activation_scheme == ActivationScheme::DynamicPerToken);
    CHECK(q.weight_granularity == ScaleGranularity::PerRow);
    CHECK_NOTHROW(validate_quantized_tensors(q, ck2, tiny_model_config()));
  }
}

TEST_CASE("FP8_DYNAMIC writer refuses inconsistent tensors", "[checkpoint_writer]") {
  TempDir dir;
  const json source = tiny_config();
  auto attempt = [&](std::vector<WriterTensor> ts, std::vector<std::string> ignore) {
    Fp8DynamicCheckpoint ck;
    ck.source_config = &source;
    ck.tensors = std::move(ts);
    ck.ignore = std::move(ignore);
    write_compressed_tensors_fp8_dynamic(dir.file("bad"), ck);
  };
  const std::string q0 = "model.layers.0.self_attn.q_proj";
  auto without = [](std::vector<WriterTensor> ts, const std::string& name) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [&](auto& t) { return t.name == name; }),
             ts.end());
    return ts;
  };
  CHECK_THROWS_WITH(attempt(without(tiny_fp8_tensors(), q0 + ".weight_scale"), {"lm_head"}),
                    Catch::Contains(q0 + ".weight has no " + q0 + ".weight_scale"));
  auto ts = tiny_fp8_tensors();
  for (auto& t : ts)
    if (t.name == q0 + ".weight_scale") t.shape = {1, kQ};
  CHECK_THROWS_WITH(attempt(ts, {"lm_head"}), Catch::Contains(q0 + ".weight_scale must have shape [8, 1]"));
  CHECK_THROWS_WITH(attempt(tiny_fp8_tensors(), {"lm_head", q0}),
                    Catch::Contains(q0 + ".weight is F8_E4M3 but " + q0 + " is in ignore"));
  CHECK_FALSE(std::filesystem::exists(dir.file("bad") + "/config.json"));
}

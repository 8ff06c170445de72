// KV cache scales (models/kv_scales.h):
//  - load_checkpoint_kv_scales on tiny safetensors checkpoints written to a temp dir, one per
//    naming variant, per tensor and per KV head, F32 / BF16 / F16, with exact expected values;
//    every malformed case is a ModelFileError naming the tensor and its file. The llm-compressor
//    layout (model.layers.N.self_attn.k_scale, BF16, shape (1,) for kv_cache_scheme strategy
//    "tensor" and (num_kv_heads, 1, 1) for "attn_head") was read off compressed-tensors 0.19.0's
//    apply_quantization_config on a 2-layer LlamaForCausalLM (torch bf16).
//  - load_kv_scales_file: octet's JSON format and vLLM's legacy quantization-param schema, each
//    error case.
//  - calculate_kv_scales on a hand-made DenseKVCache, expected scales computed by hand.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_writer.h"  // TempDir
#include "models/checkpoint.h"
#include "models/checkpoint_writer.h"
#include "models/kv_scales.h"
#include "models/llama.h"
#include "models/model_file_error.h"
#include "models/quant_config.h"

using namespace octet;
using nlohmann::json;
using octet::testing::TempDir;

namespace {

const int64_t kLayers = 3, kKVHeads = 2;
const std::string P0 = "model.layers.0.self_attn.";
const std::string P1 = "model.layers.1.self_attn.";
const std::string P2 = "model.layers.2.self_attn.";

WriterTensor f32(const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return {name, TensorDType::F32, std::move(shape), std::move(b), {}};
}

/// A 16-bit tensor from raw bits (BF16 or F16), little-endian.
WriterTensor bits16(const std::string& name, TensorDType dtype, std::vector<int64_t> shape,
                    std::vector<uint16_t> v) {
  std::vector<uint8_t> b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return {name, dtype, std::move(shape), std::move(b), {}};
}

json kv_scheme(const std::string& strategy, bool symmetric = true) {
  return {{"num_bits", 8}, {"type", "float"}, {"strategy", strategy},
          {"dynamic", false}, {"symmetric", symmetric}};
}

/// llm-compressor's FP8_DYNAMIC quantization_config plus a kv_cache_scheme (or none).
json quant_config(const json& kv) {
  json w = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"},
            {"dynamic", false}, {"symmetric", true}};
  json a = {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"},
            {"dynamic", true}, {"symmetric", true}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", kv},
          {"config_groups",
           {{"group_0", {{"targets", {"Linear"}}, {"weights", w}, {"input_activations", a}}}}}};
}

/// Writes config.json (+ quantization_config when not null) and model.safetensors holding
/// `scales` and one unrelated tensor; returns the directory.
std::string write_ckpt(const TempDir& tmp, std::vector<WriterTensor> scales, const json& q) {
  static int n = 0;
  const std::string dir = tmp.file("ckpt" + std::to_string(n++));
  std::filesystem::create_directories(dir);
  json cfg = {{"architectures", {"LlamaForCausalLM"}}};
  if (!q.is_null()) cfg["quantization_config"] = q;
  std::ofstream(dir + "/config.json") << cfg.dump();
  scales.push_back(f32("model.norm.weight", {4}, {1, 1, 1, 1}));
  write_safetensors_checkpoint(dir, scales);
  return dir;
}

std::vector<std::optional<LayerKVScales>> load(const std::string& dir) {
  const HFCheckpoint ck = HFCheckpoint::open(dir);
  const QuantConfig qc = QuantConfig::from_hf_config(ck.config(), dir + "/config.json");
  return load_checkpoint_kv_scales(ck, qc, kLayers, kKVHeads);
}

using V = std::vector<float>;

/// load() must throw a ModelFileError whose path is `dir`/`file` and whose message holds every
/// needle.
void expect_ckpt_error(const TempDir& tmp, std::vector<WriterTensor> scales, const json& q,
                       const std::vector<std::string>& needles,
                       const std::string& file = "model.safetensors") {
  const std::string dir = write_ckpt(tmp, std::move(scales), q);
  try {
    load(dir);
    FAIL("no error (expected '" << needles.front() << "')");
  } catch (const ModelFileError& e) {
    INFO(e.what());
    CHECK(e.path() == dir + "/" + file);
    for (const std::string& s : needles) CHECK(std::string(e.what()).find(s) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("kv scales: every checkpoint naming variant, per tensor", "[kv_scales]") {
  TempDir tmp;
  struct Case {
    std::string k, v;  // suffixes after "model.layers.N.self_attn."
  };
  const std::vector<Case> cases = {{"k_scale", "v_scale"},
                                   {"k_proj.k_scale", "v_proj.v_scale"},
                                   {"k_proj.output_scale", "v_proj.output_scale"},
                                   {"attn.k_scale", "attn.v_scale"}};
  for (const Case& c : cases) {
    INFO(c.k);
    // Layer 0: shape [1]; layer 2: shape [] (a 0-d tensor); layer 1: no scales.
    const auto s = load(write_ckpt(tmp,
                                   {f32(P0 + c.k, {1}, {0.0234375f}), f32(P0 + c.v, {1}, {0.5f}),
                                    f32(P2 + c.k, {}, {3.0f}), f32(P2 + c.v, {}, {0.125f})},
                                   nullptr));
    REQUIRE(s.size() == 3);
    REQUIRE(s[0].has_value());
    CHECK(s[0]->k_scale == V{0.0234375f});
    CHECK(s[0]->v_scale == V{0.5f});
    CHECK_FALSE(s[1].has_value());
    REQUIRE(s[2].has_value());
    CHECK(s[2]->k_scale == V{3.0f});
    CHECK(s[2]->v_scale == V{0.125f});
  }
}

TEST_CASE("kv scales: legacy kv_scale is used for K and V", "[kv_scales]") {
  TempDir tmp;
  const auto s = load(write_ckpt(tmp, {f32(P1 + "kv_scale", {1}, {0.0625f})}, nullptr));
  CHECK_FALSE(s[0].has_value());
  REQUIRE(s[1].has_value());
  CHECK(s[1]->k_scale == V{0.0625f});
  CHECK(s[1]->v_scale == V{0.0625f});
  CHECK_FALSE(s[2].has_value());
}

TEST_CASE("kv scales: llm-compressor attn_head layout, BF16 (num_kv_heads, 1, 1)",
          "[kv_scales]") {
  TempDir tmp;
  std::vector<WriterTensor> t;
  // BF16 bits: 0x3C80 = 2^-6 = 0.015625, 0x3D00 = 2^-5, 0x3F40 = 0.75, 0x4040 = 3.0.
  for (const std::string& p : {P0, P1, P2}) {
    t.push_back(bits16(p + "k_scale", TensorDType::BF16, {2, 1, 1}, {0x3C80, 0x3D00}));
    t.push_back(bits16(p + "v_scale", TensorDType::BF16, {2, 1, 1}, {0x3F40, 0x4040}));
  }
  const auto s = load(write_ckpt(tmp, t, quant_config(kv_scheme("attn_head"))));
  for (int l = 0; l < 3; ++l) {
    REQUIRE(s[l].has_value());
    CHECK(s[l]->k_scale == V{0.015625f, 0.03125f});
    CHECK(s[l]->v_scale == V{0.75f, 3.0f});
  }
}

TEST_CASE("kv scales: llm-compressor tensor layout, BF16 (1), F16 and per-head F32 (H)",
          "[kv_scales]") {
  TempDir tmp;
  SECTION("strategy tensor, BF16 [1]") {
    const auto s = load(write_ckpt(tmp,
                                   {bits16(P0 + "k_scale", TensorDType::BF16, {1}, {0x3C80}),
                                    bits16(P0 + "v_scale", TensorDType::BF16, {1}, {0x3F40})},
                                   quant_config(kv_scheme("tensor"))));
    REQUIRE(s[0].has_value());
    CHECK(s[0]->k_scale == V{0.015625f});
    CHECK(s[0]->v_scale == V{0.75f});
  }
  SECTION("F16 (0x2400 = 2^-6, 0x3800 = 0.5), no quantization_config") {
    const auto s = load(write_ckpt(tmp,
                                   {bits16(P2 + "k_scale", TensorDType::F16, {1}, {0x2400}),
                                    bits16(P2 + "v_scale", TensorDType::F16, {1}, {0x3800})},
                                   nullptr));
    REQUIRE(s[2].has_value());
    CHECK(s[2]->k_scale == V{0.015625f});
    CHECK(s[2]->v_scale == V{0.5f});
  }
  SECTION("per head [H] with no kv_cache_scheme; K per tensor, V per head") {
    const auto s = load(write_ckpt(
        tmp, {f32(P1 + "k_scale", {1}, {0.25f}), f32(P1 + "v_scale", {2}, {0.5f, 0.0078125f})},
        nullptr));
    REQUIRE(s[1].has_value());
    CHECK(s[1]->k_scale == V{0.25f});
    CHECK(s[1]->v_scale == V{0.5f, 0.0078125f});
  }
}

TEST_CASE("kv scales: the same scale under two names is accepted", "[kv_scales]") {
  TempDir tmp;
  const auto s = load(write_ckpt(tmp,
                                 {f32(P0 + "k_scale", {1}, {0.25f}),
                                  f32(P0 + "k_proj.output_scale", {}, {0.25f}),
                                  f32(P0 + "kv_scale", {1}, {0.25f}),
                                  f32(P0 + "v_proj.v_scale", {1}, {0.25f})},
                                 nullptr));
  REQUIRE(s[0].has_value());
  CHECK(s[0]->k_scale == V{0.25f});
  CHECK(s[0]->v_scale == V{0.25f});
}

TEST_CASE("kv scales: unrelated *_scale tensors are not KV scales", "[kv_scales]") {
  TempDir tmp;
  const auto s = load(write_ckpt(tmp,
                                 {f32(P0 + "k_proj.weight_scale", {4, 1}, {1, 1, 1, 1}),
                                  f32(P0 + "k_proj.input_scale", {1}, {1}),
                                  f32(P0 + "q_proj.output_scale", {1}, {1}),
                                  f32(P0 + "q_scale", {1}, {1}),
                                  f32("model.layers.00.self_attn.k_scale", {1}, {1})},
                                 nullptr));
  for (const auto& l : s) CHECK_FALSE(l.has_value());
}

TEST_CASE("kv scales: checkpoint errors name the tensor and the problem", "[kv_scales]") {
  TempDir tmp;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const WriterTensor v0 = f32(P0 + "v_scale", {1}, {0.5f});
  SECTION("dtype") {
    expect_ckpt_error(tmp, {{P0 + "k_scale", TensorDType::I32, {1}, {1, 0, 0, 0}, {}}, v0}, nullptr,
                      {"tensor " + P0 + "k_scale", "dtype I32, expected F32, BF16 or F16"});
    expect_ckpt_error(tmp, {{P0 + "k_scale", TensorDType::F8_E4M3, {1}, {0x38}, {}}, v0}, nullptr,
                      {"tensor " + P0 + "k_scale", "dtype F8_E4M3"});
  }
  SECTION("shape") {
    expect_ckpt_error(tmp, {f32(P0 + "k_scale", {3}, {1, 1, 1}), v0}, nullptr,
                      {"tensor " + P0 + "k_scale", "shape [3]", "num_kv_heads = 2"});
    expect_ckpt_error(tmp, {f32(P0 + "k_scale", {2, 2}, {1, 1, 1, 1}), v0}, nullptr,
                      {"tensor " + P0 + "k_scale", "shape [2, 2]"});
    expect_ckpt_error(tmp, {f32(P0 + "k_scale", {1, 2}, {1, 1}), v0}, nullptr,
                      {"tensor " + P0 + "k_scale", "shape [1, 2]"});
    expect_ckpt_error(tmp, {f32(P0 + "k_scale", {1, 1, 1, 1}, {1}), v0}, nullptr,
                      {"tensor " + P0 + "k_scale", "shape [1, 1, 1, 1]"});
  }
  SECTION("values") {
    expect_ckpt_error(tmp, {f32(P0 + "k_scale", {1}, {nan}), v0}, nullptr,
                      {"tensor " + P0 + "k_scale", "value NaN at index 0", "finite and > 0"});
    expect_ckpt_error(tmp, {f32(P0 + "k_scale", {2}, {0.5f, inf}), v0}, nullptr,
                      {"tensor " + P0 + "k_scale", "value inf at index 1"});
    expect_ckpt_error(tmp, {f32(P0 + "k_scale", {1}, {0.0f}), v0}, nullptr,
                      {"tensor " + P0 + "k_scale", "value 0 at index 0"});
    expect_ckpt_error(tmp, {f32(P1 + "kv_scale", {1}, {-0.25f})}, nullptr,
                      {"tensor " + P1 + "kv_scale", "value -0.25 at index 0"});
    expect_ckpt_error(tmp, {bits16(P2 + "v_scale", TensorDType::BF16, {1}, {0x7FC0}),
                            f32(P2 + "k_scale", {1}, {1})},
                      nullptr, {"tensor " + P2 + "v_scale", "value NaN"});
  }
  SECTION("conflicting variants") {
    expect_ckpt_error(
        tmp, {f32(P0 + "k_scale", {1}, {0.25f}), f32(P0 + "k_proj.output_scale", {1}, {0.5f}), v0},
        nullptr,
        {"tensor " + P0 + "k_scale", "conflicts with tensor " + P0 + "k_proj.output_scale",
         "layer 0 K scale 0.25 vs 0.5"});
    expect_ckpt_error(tmp, {f32(P1 + "kv_scale", {1}, {0.25f}), f32(P1 + "v_scale", {1}, {0.125f})},
                      nullptr,
                      {"tensor " + P1 + "v_scale", "conflicts with tensor " + P1 + "kv_scale",
                       "layer 1 V scale 0.125 vs 0.25"});
    expect_ckpt_error(tmp, {f32(P0 + "k_scale", {2}, {0.25f, 0.25f}),
                            f32(P0 + "attn.k_scale", {1}, {0.25f}), v0},
                      nullptr, {"conflicts with tensor", "[0.25, 0.25]"});
  }
  SECTION("K without V and V without K") {
    expect_ckpt_error(tmp, {f32(P2 + "k_proj.k_scale", {1}, {0.25f})}, nullptr,
                      {"tensor " + P2 + "k_proj.k_scale", "layer 2 has this K scale but no V"});
    expect_ckpt_error(tmp, {v0}, nullptr,
                      {"tensor " + P0 + "v_scale", "layer 0 has this V scale but no K"});
  }
  SECTION("layer index >= num_layers") {
    expect_ckpt_error(tmp, {f32("model.layers.3.self_attn.k_scale", {1}, {0.25f})}, nullptr,
                      {"tensor model.layers.3.self_attn.k_scale", "layer index out of range",
                       "3 layers"});
    expect_ckpt_error(
        tmp, {f32("model.layers.99999999999999999999.self_attn.kv_scale", {1}, {0.25f})}, nullptr,
        {"layer index out of range"});
  }
  SECTION("granularity against kv_cache_scheme.strategy") {
    expect_ckpt_error(tmp, {f32(P0 + "k_scale", {2, 1, 1}, {0.25f, 0.5f}), v0},
                      quant_config(kv_scheme("tensor")),
                      {"tensor " + P0 + "k_scale", "per KV head", "strategy is \"tensor\""});
    expect_ckpt_error(tmp, {f32(P0 + "k_scale", {2, 1, 1}, {0.25f, 0.5f}), v0},
                      quant_config(kv_scheme("attn_head")),
                      {"tensor " + P0 + "v_scale", "per tensor", "strategy is \"attn_head\"",
                       "expected [2, 1, 1]"});
  }
  SECTION("asymmetric kv_cache_scheme") {
    expect_ckpt_error(tmp, {f32(P0 + "k_scale", {1}, {0.25f}), v0},
                      quant_config(kv_scheme("tensor", false)),
                      {"kv_cache_scheme.symmetric is false"}, "config.json");
  }
}

TEST_CASE("kv scales: a tensor in the second shard names that shard", "[kv_scales]") {
  TempDir tmp;
  const std::string dir = tmp.file("sharded");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << json{{"architectures", {"LlamaForCausalLM"}}}.dump();
  // 1 shard per tensor: names in order, k_scale (4 bytes) then v_scale (4 bytes).
  write_safetensors_checkpoint(
      dir, {f32(P0 + "k_scale", {1}, {0.25f}), f32(P0 + "v_scale", {1}, {-1.0f})}, 4);
  REQUIRE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
  try {
    load(dir);
    FAIL("no error");
  } catch (const ModelFileError& e) {
    CHECK(e.path() == dir + "/model-00002-of-00002.safetensors");
    CHECK(std::string(e.what()).find("tensor " + P0 + "v_scale: value -1") != std::string::npos);
  }
}

// ---- scales file ----

namespace {

std::string write_text(const TempDir& tmp, const std::string& text) {
  static int n = 0;
  const std::string path = tmp.file("scales" + std::to_string(n++) + ".json");
  std::ofstream(path) << text;
  return path;
}

/// load_kv_scales_file must throw ModelFileError "<path>: ..." (a bad file: exit 1, not the
/// usage error's 2) holding every needle.
void expect_file_error(const TempDir& tmp, const std::string& text,
                       const std::vector<std::string>& needles,
                       std::optional<DType> cache_dtype = std::nullopt) {
  const std::string path = write_text(tmp, text);
  try {
    load_kv_scales_file(path, kLayers, kKVHeads, cache_dtype);
    FAIL("no error (expected '" << needles.front() << "')");
  } catch (const ModelFileError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.rfind(path + ": ", 0) == 0);
    for (const std::string& s : needles) CHECK(what.find(s) != std::string::npos);
  }
}

const std::string kLayer12 =
    R"("1": {"k_scale": 1, "v_scale": 2.5}, "2": {"k_scale": 0.125, "v_scale": 0.25})";

}  // namespace

TEST_CASE("kv scales file: octet format", "[kv_scales]") {
  TempDir tmp;
  const std::string path = write_text(tmp, R"({
    "kv_cache_dtype": "fp8_e4m3", "model_type": "llama",
    "layers": {
      "2": {"k_scale": 0.125, "v_scale": [0.5, 0.0078125]},
      "0": {"v_scale": 0.03125, "k_scale": [0.25]},
      "1": {"k_scale": 1, "v_scale": 2.5}
    }})");
  const LayerScalesFile f = load_kv_scales_file(path, kLayers, kKVHeads);
  CHECK(f.format == "octet");
  CHECK(f.kv_cache_dtype == "fp8_e4m3");
  REQUIRE(f.layers.size() == 3);
  CHECK(f.layers[0].k_scale == V{0.25f});
  CHECK(f.layers[0].v_scale == V{0.03125f});
  CHECK(f.layers[1].k_scale == V{1.0f});
  CHECK(f.layers[1].v_scale == V{2.5f});
  CHECK(f.layers[2].k_scale == V{0.125f});
  CHECK(f.layers[2].v_scale == V{0.5f, 0.0078125f});

  const LayerScalesFile g = load_kv_scales_file(
      write_text(tmp, R"({"layers": {"0": {"k_scale": 0.1, "v_scale": 0.2}, )" + kLayer12 + "}}"),
      kLayers, kKVHeads);
  CHECK(g.kv_cache_dtype.empty());
  CHECK(g.layers[0].k_scale == V{0.1f});  // 0.1 rounded to FP32
  CHECK(g.layers[0].v_scale == V{0.2f});
}

TEST_CASE("kv scales file: vLLM legacy quantization-param schema", "[kv_scales]") {
  TempDir tmp;
  const std::string path = write_text(tmp, R"({"model_type": "llama", "kv_cache": {
      "dtype": "float8_e4m3fn",
      "scaling_factor": {"0": {"0": 0.0625, "1": 0.5, "2": 3}}}})");
  const LayerScalesFile f = load_kv_scales_file(path, kLayers, kKVHeads);
  CHECK(f.format == "vllm-quantization-param");
  CHECK(f.kv_cache_dtype == "float8_e4m3fn");
  REQUIRE(f.layers.size() == 3);
  CHECK(f.layers[0].k_scale == V{0.0625f});
  CHECK(f.layers[0].v_scale == V{0.0625f});
  CHECK(f.layers[1].k_scale == V{0.5f});
  CHECK(f.layers[1].v_scale == V{0.5f});
  CHECK(f.layers[2].k_scale == V{3.0f});
  CHECK(f.layers[2].v_scale == V{3.0f});
}

TEST_CASE("kv scales file: errors name the file, layer and key", "[kv_scales]") {
  TempDir tmp;
  const std::string l0 = R"("0": {"k_scale": 0.5, "v_scale": 0.5}, )";
  auto layers = [&](const std::string& first) {
    return R"({"layers": {)" + first + kLayer12 + "}}";
  };
  SECTION("file and JSON") {
    try {
      load_kv_scales_file(tmp.file("absent.json"), kLayers, kKVHeads);
      FAIL("no error");
    } catch (const ModelFileError& e) {
      CHECK_THAT(e.what(), Catch::StartsWith(tmp.file("absent.json") +
                                             ": cannot read the KV scales file: cannot open"));
    }
    expect_file_error(tmp, R"({"layers": {"0": )", {"malformed JSON"});
    expect_file_error(tmp, R"({"layers": {"0": {"k_scale": NaN, "v_scale": 1}}})",
                      {"malformed JSON"});
    expect_file_error(tmp, "[1, 2]", {"expected a JSON object at the top level"});
    expect_file_error(tmp, layers(l0 + l0), {"duplicate key \"0\" in \"layers\""});
    expect_file_error(tmp, R"({"layers": {"0": {"k_scale": 1, "k_scale": 2, "v_scale": 1}, )" +
                               kLayer12 + "}}",
                      {"duplicate key \"k_scale\" in \"0\""});
    expect_file_error(tmp, R"({"layers": {}, "layers": {}})",
                      {"duplicate key \"layers\" at the top level"});
  }
  SECTION("structure") {
    expect_file_error(tmp, R"({"kv_cache_dtype": "fp8"})", {"missing \"layers\""});
    expect_file_error(tmp, R"({"layers": [1, 2, 3]})", {"\"layers\" must be an object"});
    expect_file_error(tmp, R"({"layers": {}, "scales": 1})",
                      {"unknown key \"scales\" at the top level"});
    expect_file_error(tmp, R"({"kv_cache_dtype": 8, "layers": {}})",
                      {"\"kv_cache_dtype\" must be a string"});
    expect_file_error(tmp, layers(R"("0": 0.5, )"), {"layer 0: expected {\"k_scale\""});
    expect_file_error(tmp, layers(R"("0": {"k_scale": 0.5}, )"),
                      {"layer 0: missing \"v_scale\""});
    expect_file_error(tmp, layers(R"("0": {"k_scale": 0.5, "v_scale": 0.5, "q_scale": 1}, )"),
                      {"unknown key \"q_scale\" in layer 0"});
  }
  SECTION("layers") {
    expect_file_error(tmp, R"({"layers": {)" + kLayer12 + "}}",
                      {"missing layer 0 in \"layers\"", "every layer 0..2"});
    expect_file_error(tmp, layers(l0 + R"("3": {"k_scale": 1, "v_scale": 1}, )"),
                      {"layer 3 in \"layers\": index out of range", "the model has 3 layers"});
    expect_file_error(tmp, layers(R"("00": {"k_scale": 1, "v_scale": 1}, )"),
                      {"layer key \"00\" in \"layers\" is not a decimal layer index"});
    expect_file_error(tmp, layers(R"("-1": {"k_scale": 1, "v_scale": 1}, )"),
                      {"layer key \"-1\""});
    expect_file_error(tmp, layers(R"("layer0": {"k_scale": 1, "v_scale": 1}, )"),
                      {"layer key \"layer0\""});
  }
  SECTION("values") {
    expect_file_error(tmp, layers(R"("0": {"k_scale": [0.5, 0.5, 0.5], "v_scale": 1}, )"),
                      {"layer 0 k_scale: 3 values, expected 1 or num_kv_heads = 2"});
    expect_file_error(tmp, layers(R"("0": {"k_scale": [], "v_scale": 1}, )"),
                      {"layer 0 k_scale: 0 values"});
    expect_file_error(tmp, layers(R"("0": {"k_scale": 1, "v_scale": "0.5"}, )"),
                      {"layer 0 v_scale: expected a number, got \"0.5\""});
    expect_file_error(tmp, layers(R"("0": {"k_scale": 1, "v_scale": [0.5, true]}, )"),
                      {"layer 0 v_scale[1]: expected a number, got true"});
    expect_file_error(tmp, layers(R"("0": {"k_scale": null, "v_scale": 1}, )"),
                      {"layer 0 k_scale: expected a number, got null"});
    expect_file_error(tmp, layers(R"("0": {"k_scale": 0, "v_scale": 1}, )"),
                      {"layer 0 k_scale: value 0 is not > 0"});
    expect_file_error(tmp, layers(R"("0": {"k_scale": 1, "v_scale": [0.5, -0.5]}, )"),
                      {"layer 0 v_scale[1]: value -0.5 is not > 0"});
    expect_file_error(tmp, layers(R"("0": {"k_scale": 1e39, "v_scale": 1}, )"),
                      {"layer 0 k_scale: value", "is not finite as FP32"});
    expect_file_error(tmp, layers(R"("0": {"k_scale": 1e999, "v_scale": 1}, )"),
                      {"malformed JSON", "number overflow"});
    expect_file_error(tmp, layers(R"("0": {"k_scale": 1e-50, "v_scale": 1}, )"),
                      {"layer 0 k_scale: value 1e-50 rounds to 0 in FP32"});
  }
  SECTION("kv_cache_dtype: known FP8 names only, and the cache's") {
    const std::string body = R"("layers": {"0": {"k_scale": 1, "v_scale": 1}, )" + kLayer12 + "}}";
    expect_file_error(tmp, R"({"kv_cache_dtype": "int8", )" + body,
                      {"kv_cache_dtype \"int8\" is not an FP8 cache dtype"});
    // Scales calibrated for E5M2 (range 57344) on an E4M3 cache (448), and the reverse.
    expect_file_error(tmp, R"({"kv_cache_dtype": "fp8_e5m2", )" + body,
                      {"kv_cache_dtype \"fp8_e5m2\"", "calibrated for an fp8_e5m2 KV cache",
                       "this cache is fp8_e4m3", "--kv-cache-dtype fp8_e4m3"},
                      DType::FP8_E4M3);
    expect_file_error(tmp, R"({"kv_cache_dtype": "fp8", )" + body,
                      {"kv_cache_dtype \"fp8\"", "calibrated for an fp8_e4m3 KV cache",
                       "this cache is fp8_e5m2"},
                      DType::FP8_E5M2);
    const std::string e5 = write_text(tmp, R"({"kv_cache_dtype": "fp8_e5m2", )" + body);
    const LayerScalesFile f = load_kv_scales_file(e5, kLayers, kKVHeads, DType::FP8_E5M2);
    CHECK(f.dtype == DType::FP8_E5M2);
    CHECK(load_kv_scales_file(e5, kLayers, kKVHeads).dtype == DType::FP8_E5M2);
    // No dtype recorded: nothing to compare.
    const std::string none = write_text(tmp, "{" + body);
    CHECK_FALSE(load_kv_scales_file(none, kLayers, kKVHeads, DType::FP8_E5M2).dtype);
  }
  SECTION("a device or an oversized file is a bounded read, not an endless one") {
    try {
      load_kv_scales_file("/dev/zero", kLayers, kKVHeads);
      FAIL("no error");
    } catch (const ModelFileError& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("/dev/zero: cannot read the KV scales file") &&
                               Catch::Contains("byte limit"));
    }
  }
  SECTION("vLLM legacy schema") {
    auto legacy = [](const std::string& dtype, const std::string& ranks) {
      return R"({"model_type": "llama", "kv_cache": {"dtype": ")" + dtype +
             R"(", "scaling_factor": )" + ranks + "}}";
    };
    const std::string r0 = R"({"0": {"0": 1, "1": 1, "2": 1}})";
    expect_file_error(tmp, legacy("float8_e5m2", r0),
                      {"kv_cache.dtype \"float8_e5m2\"", "float8_e4m3fn scales only"});
    expect_file_error(tmp, legacy("float8_e4m3fn",
                                  R"({"0": {"0": 1, "1": 1, "2": 1}, "1": {"0": 1, "1": 1, "2": 1}})"),
                      {"2 tensor-parallel rank(s)", "only rank \"0\""});
    expect_file_error(tmp, legacy("float8_e4m3fn", R"({"1": {"0": 1, "1": 1, "2": 1}})"),
                      {"1 tensor-parallel rank(s)", "only rank \"0\""});
    expect_file_error(tmp, legacy("float8_e4m3fn", R"({"0": {"0": 1, "2": 1}})"),
                      {"missing layer 1 in kv_cache.scaling_factor.\"0\""});
    expect_file_error(tmp, legacy("float8_e4m3fn", R"({"0": {"0": 1, "1": 1, "2": 1, "3": 1}})"),
                      {"layer 3 in kv_cache.scaling_factor.\"0\": index out of range"});
    expect_file_error(tmp, legacy("float8_e4m3fn", R"({"0": {"0": 1, "1": 0, "2": 1}})"),
                      {"layer 1 scaling_factor: value 0 is not > 0"});
    expect_file_error(tmp, legacy("float8_e4m3fn", R"({"0": {"0": 1, "1": [1], "2": 1}})"),
                      {"layer 1 scaling_factor: expected a number"});
    expect_file_error(tmp, legacy("float8_e4m3fn", r0),
                      {"kv_cache.dtype \"float8_e4m3fn\"", "this cache is fp8_e5m2"},
                      DType::FP8_E5M2);
    expect_file_error(tmp, R"({"kv_cache": {"scaling_factor": {"0": {}}}})",
                      {"kv_cache.dtype \"\""});
    expect_file_error(tmp, R"({"kv_cache": {"dtype": "float8_e4m3fn"}})",
                      {"kv_cache.scaling_factor missing"});
    expect_file_error(tmp, R"({"kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {"0": {}}},
                               "layers": {}})",
                      {"unknown key \"layers\" at the top level of vLLM's legacy schema"});
  }
}

// ---- calculated scales ----

namespace {

/// Cache with 2 layers, max_tokens 3, 2 KV heads, head_dim 2, all zero.
DenseKVCache small_cache() {
  DenseKVCache c;
  c.max_tokens = 3;
  c.k.assign(2 * 3 * 2 * 2, 0.0f);
  c.v.assign(2 * 3 * 2 * 2, 0.0f);
  return c;
}

/// Element [layer, token, head, d] of a [2, 3, 2, 2] cache.
float& at(std::vector<float>& x, int layer, int token, int head, int d) {
  return x[static_cast<size_t>(((layer * 3 + token) * 2 + head) * 2 + d)];
}

}  // namespace

TEST_CASE("calculate_kv_scales: amax / (fp8_max / 2), per head and per tensor", "[kv_scales]") {
  CHECK(kCalculatedKVScaleHeadroom == 2.0f);
  DenseKVCache c = small_cache();
  // Layer 0 K: head 0 amax 112 (negative value), head 1 amax 448; position 2 (beyond num_tokens
  // = 2) holds 1000, which must not count.
  at(c.k, 0, 0, 0, 1) = -112.0f;
  at(c.k, 0, 0, 0, 0) = 50.0f;
  at(c.k, 0, 1, 1, 0) = 448.0f;
  at(c.k, 0, 1, 1, 1) = -3.0f;
  at(c.k, 0, 2, 0, 0) = 1000.0f;
  // Layer 0 V: head 0 amax 22.4, head 1 all zero.
  at(c.v, 0, 1, 0, 1) = 22.4f;
  // Layer 1 K: all zero. Layer 1 V: head 1 amax 7 (token 0) and 14 (token 1).
  at(c.v, 1, 0, 1, 0) = 7.0f;
  at(c.v, 1, 1, 1, 1) = -14.0f;
  at(c.v, 1, 2, 1, 1) = -1e6f;  // beyond num_tokens

  SECTION("E4M3 per head: amax / 224") {
    const auto s = calculate_kv_scales(c, 2, 2, 2, 2, DType::FP8_E4M3, true);
    REQUIRE(s.size() == 2);
    CHECK(s[0].k_scale == V{0.5f, 2.0f});
    CHECK(s[0].v_scale == V{22.4f / 224.0f, 1.0f});  // all-zero head -> 1.0
    CHECK(s[1].k_scale == V{1.0f, 1.0f});
    CHECK(s[1].v_scale == V{1.0f, 0.0625f});  // head 0 all zero; 14 / 224 = 1/16
  }
  SECTION("E4M3 per tensor") {
    const auto s = calculate_kv_scales(c, 2, 2, 2, 2, DType::FP8_E4M3, false);
    CHECK(s[0].k_scale == V{2.0f});
    CHECK(s[0].v_scale == V{22.4f / 224.0f});
    CHECK(s[1].k_scale == V{1.0f});
    CHECK(s[1].v_scale == V{0.0625f});
  }
  SECTION("E5M2: amax / 28672; all 3 tokens") {
    const auto s = calculate_kv_scales(c, 3, 2, 2, 2, DType::FP8_E5M2, true);
    CHECK(s[0].k_scale == V{1000.0f / 28672.0f, 448.0f / 28672.0f});
    CHECK(s[1].v_scale == V{1.0f, 1e6f / 28672.0f});
  }
  SECTION("1 token") {
    const auto s = calculate_kv_scales(c, 1, 2, 2, 2, DType::FP8_E4M3, true);
    CHECK(s[0].k_scale == V{0.5f, 1.0f});
    CHECK(s[1].v_scale == V{1.0f, 7.0f / 224.0f});
  }
  SECTION("denormal amax counts as zero") {
    DenseKVCache d = small_cache();
    at(d.k, 0, 0, 0, 0) = 1e-38f;  // 1e-38 / 224 is below FLT_MIN
    at(d.k, 0, 0, 1, 0) = 1e-30f;
    const auto s = calculate_kv_scales(d, 1, 2, 2, 2, DType::FP8_E4M3, true);
    CHECK(s[0].k_scale == V{1.0f, 1e-30f / 224.0f});
  }
}

TEST_CASE("calculate_kv_scales: errors", "[kv_scales]") {
  DenseKVCache c = small_cache();
  CHECK_THROWS_AS(calculate_kv_scales(c, 2, 2, 2, 2, DType::BF16, true),
                  std::invalid_argument);
  CHECK_THROWS_AS(calculate_kv_scales(c, 0, 2, 2, 2, DType::FP8_E4M3, true),
                  std::invalid_argument);
  CHECK_THROWS_AS(calculate_kv_scales(c, 4, 2, 2, 2, DType::FP8_E4M3, true),
                  std::invalid_argument);
  CHECK_THROWS_AS(calculate_kv_scales(c, 2, 3, 2, 2, DType::FP8_E4M3, true),
                  std::invalid_argument);
  CHECK_THROWS_AS(calculate_kv_scales(c, 2, 2, 2, 4, DType::FP8_E4M3, true),
                  std::invalid_argument);
  at(c.v, 1, 1, 0, 1) = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(calculate_kv_scales(c, 2, 2, 2, 2, DType::FP8_E4M3, false),
                    "calculate_kv_scales: V of layer 1, KV head 0, position 1 is not finite");
  // The NaN lies beyond num_tokens = 1: not read.
  CHECK_NOTHROW(calculate_kv_scales(c, 1, 2, 2, 2, DType::FP8_E4M3, false));
}

TEST_CASE("kv_calibration_text: a few hundred words of ASCII", "[kv_scales]") {
  const std::string t = kv_calibration_text();
  int words = 0, non_ascii = 0;
  bool in_word = false;
  for (char ch : t) {
    non_ascii += static_cast<unsigned char>(ch) >= 128;
    const bool space = ch == ' ' || ch == '\n';
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  CHECK(non_ascii == 0);
  CHECK(words >= 300);
  CHECK(words <= 800);
  CHECK(t.find("```cpp") != std::string::npos);     // code
  CHECK(t.find("```python") != std::string::npos);
  CHECK(t.find("6.674e-11") != std::string::npos);  // numbers
}

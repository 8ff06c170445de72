// validate_quantized_tensors on small FP8 checkpoints written to a temp dir: valid channel /
// tensor / static ones pass; each malformed one (missing weight_scale, scale shape mismatch,
// NaN / inf / zero / negative scale, missing or bad input_scale, a weight left 16-bit or of
// the wrong shape) is a ModelFileError naming the tensor and the problem.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_writer.h"  // TempDir
#include "models/checkpoint.h"
#include "models/checkpoint_writer.h"
#include "models/model_config.h"
#include "models/model_file_error.h"
#include "models/quant_config.h"
#include "models/quant_validate.h"

using namespace octet;
using nlohmann::json;
using octet::testing::TempDir;

namespace {

// Tiny LlamaForCausalLM: 2 layers, hidden 8, 2 heads x 4, 1 KV head, MLP 12, vocab 16, tied.
const int64_t kH = 8, kQ = 8, kKV = 4, kFF = 12, kVocab = 16, kLayers = 2;
const int64_t kShapes[7][2] = {{kQ, kH}, {kKV, kH}, {kKV, kH}, {kH, kQ},
                               {kFF, kH}, {kFF, kH}, {kH, kFF}};

ModelConfig model() {
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

json quant_config(const std::string& wstrategy, bool static_act) {
  json a = static_act ? json{{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"},
                             {"dynamic", false}, {"symmetric", true}}
                      : json{{"num_bits", 8}, {"type", "float"}, {"strategy", "token"},
                             {"dynamic", true}, {"symmetric", true}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"ignore", {"lm_head"}},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", wstrategy},
                           {"dynamic", false}, {"symmetric", true}}},
              {"input_activations", a}}}}}};
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

WriterTensor f32(const std::string& name, std::vector<int64_t> shape, float value) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return {name, TensorDType::F32, shape, f32_bytes(std::vector<float>(size_t(n), value)), {}};
}

/// Tensors of a valid checkpoint: channel (weight_scale [out, 1]) or tensor ([1]) scales,
/// input_scale [1] when static.
std::vector<WriterTensor> tensors(bool per_channel, bool static_act) {
  std::vector<WriterTensor> t;
  t.push_back(f32("model.embed_tokens.weight", {kVocab, kH}, 0.5f));
  t.push_back(f32("model.norm.weight", {kH}, 1.0f));
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::vector<std::string> mods = llama_linear_modules(l);
    for (size_t i = 0; i < 7; ++i) {
      const int64_t out = kShapes[i][0], in = kShapes[i][1];
      t.push_back({mods[i] + ".weight", TensorDType::F8_E4M3, {out, in},
                   std::vector<uint8_t>(size_t(out * in), 0x38), {}});  // 0x38 = 1.0
      t.push_back(per_channel ? f32(mods[i] + ".weight_scale", {out, 1}, 0.01f)
                              : f32(mods[i] + ".weight_scale", {1}, 0.01f));
      if (static_act) t.push_back(f32(mods[i] + ".input_scale", {1}, 0.02f));
    }
  }
  return t;
}

WriterTensor& find(std::vector<WriterTensor>& ts, const std::string& name) {
  for (WriterTensor& t : ts)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return ts.front();
}

void erase(std::vector<WriterTensor>& ts, const std::string& name) {
  ts.erase(std::remove_if(ts.begin(), ts.end(), [&](auto& t) { return t.name == name; }),
           ts.end());
}

/// Writes config.json + model.safetensors into dir/name and validates it.
void validate(const TempDir& dir, const std::string& name, const json& q,
              const std::vector<WriterTensor>& ts) {
  const std::string out = dir.file(name);
  json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"quantization_config", q}};
  std::filesystem::create_directories(out);
  std::ofstream(out + "/config.json") << cfg.dump();
  write_safetensors_checkpoint(out, ts);
  const HFCheckpoint ck = HFCheckpoint::open(out);
  const QuantConfig qc = QuantConfig::from_hf_config(ck.config(), out + "/config.json");
  validate_quantized_tensors(qc, ck, model());
}

/// validate() must throw a ModelFileError whose message contains every needle.
void expect_error(const TempDir& dir, const json& q, const std::vector<WriterTensor>& ts,
                  const std::vector<std::string>& needles) {
  static int n = 0;
  try {
    validate(dir, "bad" + std::to_string(n++), q, ts);
    FAIL("no error (expected '" << needles.front() << "')");
  } catch (const ModelFileError& e) {
    INFO(e.what());
    CHECK(e.path().find(dir.file("bad")) == 0);  // the checkpoint dir or its safetensors file
    for (const std::string& s : needles) CHECK(std::string(e.what()).find(s) != std::string::npos);
  }
}

const std::string Q = "model.layers.1.self_attn.q_proj";
const std::string D = "model.layers.0.mlp.down_proj";

}  // namespace

TEST_CASE("valid FP8 checkpoints pass", "[quant_validate]") {
  TempDir dir;
  CHECK_NOTHROW(validate(dir, "dyn", quant_config("channel", false), tensors(true, false)));
  CHECK_NOTHROW(validate(dir, "static", quant_config("tensor", true), tensors(false, true)));
  CHECK_NOTHROW(validate(dir, "chan_static", quant_config("channel", true), tensors(true, true)));
  SECTION("[out] channel scales and [] scalar per-tensor scales are accepted") {
    auto ts = tensors(true, true);
    find(ts, D + ".weight_scale").shape = {kH};
    find(ts, D + ".input_scale").shape = {};
    CHECK_NOTHROW(validate(dir, "shapes", quant_config("channel", true), ts));
  }
  SECTION("an ignored module may stay 16-bit") {
    json q = quant_config("channel", false);
    q["ignore"].push_back(D);
    auto ts = tensors(true, false);
    erase(ts, D + ".weight_scale");
    WriterTensor& w = find(ts, D + ".weight");
    w = f32(D + ".weight", {kH, kFF}, 0.25f);
    CHECK_NOTHROW(validate(dir, "ignored", q, ts));
  }
  SECTION("unquantized config: nothing to check") {
    TempDir d2;
    const std::string out = d2.file("plain");
    std::filesystem::create_directories(out);
    std::ofstream(out + "/config.json") << json{{"architectures", {"LlamaForCausalLM"}}}.dump();
    write_safetensors_checkpoint(out, {f32("model.norm.weight", {kH}, 1.0f)});
    const HFCheckpoint ck = HFCheckpoint::open(out);
    CHECK_NOTHROW(validate_quantized_tensors(QuantConfig::from_hf_config(ck.config(), out), ck,
                                             model()));
  }
}

TEST_CASE("malformed FP8 tensors name the tensor", "[quant_validate][errors]") {
  TempDir dir;
  const json chan = quant_config("channel", false), stat = quant_config("tensor", true);
  SECTION("missing weight_scale") {
    auto ts = tensors(true, false);
    erase(ts, Q + ".weight_scale");
    expect_error(dir, chan, ts, {"missing tensor " + Q + ".weight_scale"});
  }
  SECTION("scale shape mismatch") {
    auto ts = tensors(true, false);
    find(ts, Q + ".weight_scale") = f32(Q + ".weight_scale", {kQ - 1, 1}, 0.01f);
    expect_error(dir, chan, ts, {"tensor " + Q + ".weight_scale", "shape [7, 1]", "[8, 1]"});
    ts = tensors(true, false);
    find(ts, Q + ".weight_scale") = f32(Q + ".weight_scale", {1}, 0.01f);  // tensor vs channel
    expect_error(dir, chan, ts, {"tensor " + Q + ".weight_scale", "shape [1]"});
    ts = tensors(false, true);
    find(ts, Q + ".weight_scale") = f32(Q + ".weight_scale", {kQ, 1}, 0.01f);  // channel vs tensor
    expect_error(dir, stat, ts, {"tensor " + Q + ".weight_scale", "shape [8, 1]",
                                 "per-tensor weight scale"});
  }
  SECTION("NaN, inf, zero and negative scales") {
    const float nan = std::numeric_limits<float>::quiet_NaN(),
                inf = std::numeric_limits<float>::infinity();
    const std::vector<std::pair<float, std::string>> cases = {
        {nan, "value NaN at index 3"}, {inf, "value inf at index 3"},
        {-inf, "value inf at index 3"}, {0.0f, "at index 3"}, {-0.01f, "at index 3"}};
    for (const auto& [v, needle] : cases) {
      auto ts = tensors(true, false);
      WriterTensor& s = find(ts, D + ".weight_scale");
      std::memcpy(s.bytes.data() + 3 * 4, &v, 4);
      expect_error(dir, chan, ts, {"tensor " + D + ".weight_scale", needle, "finite and > 0"});
    }
  }
  SECTION("NaN in a BF16 scale") {
    auto ts = tensors(true, false);
    WriterTensor& s = find(ts, D + ".weight_scale");
    s.dtype = TensorDType::BF16;
    s.bytes.assign(size_t(kH) * 2, 0);
    for (size_t i = 0; i < size_t(kH); ++i) s.bytes[2 * i + 1] = 0x3C;  // 0x3C00 = 2^-7
    s.bytes[2 * 5] = 0xC0;
    s.bytes[2 * 5 + 1] = 0x7F;  // 0x7FC0 = NaN
    expect_error(dir, chan, ts, {"tensor " + D + ".weight_scale", "value NaN at index 5"});
  }
  SECTION("missing input_scale for static activations") {
    auto ts = tensors(false, true);
    erase(ts, Q + ".input_scale");
    expect_error(dir, stat, ts, {"missing tensor " + Q + ".input_scale"});
  }
  SECTION("bad input_scale: shape, NaN, zero") {
    auto ts = tensors(false, true);
    find(ts, Q + ".input_scale") = f32(Q + ".input_scale", {2}, 0.02f);
    expect_error(dir, stat, ts, {"tensor " + Q + ".input_scale", "shape [2]"});
    ts = tensors(false, true);
    find(ts, Q + ".input_scale") = f32(Q + ".input_scale", {1}, std::nanf(""));
    expect_error(dir, stat, ts, {"tensor " + Q + ".input_scale", "NaN"});
    ts = tensors(false, true);
    find(ts, Q + ".input_scale") = f32(Q + ".input_scale", {}, 0.0f);
    expect_error(dir, stat, ts, {"tensor " + Q + ".input_scale", "finite and > 0"});
  }
  SECTION("weight not F8_E4M3, or of the wrong shape, or missing") {
    auto ts = tensors(true, false);
    find(ts, D + ".weight") = f32(D + ".weight", {kH, kFF}, 0.1f);
    expect_error(dir, chan, ts, {"tensor " + D + ".weight", "dtype F32, expected F8_E4M3"});
    ts = tensors(true, false);
    find(ts, D + ".weight").shape = {kFF, kH};
    expect_error(dir, chan, ts, {"tensor " + D + ".weight", "shape [12, 8], expected [8, 12]"});
    ts = tensors(true, false);
    erase(ts, D + ".weight");
    expect_error(dir, chan, ts, {"missing tensor " + D + ".weight"});
  }
}

// HFCheckpoint on the SmolLM2 directories made by scripts/make_hf_checkpoint.py (bf16, single
// file and 3 shards): config, tensor set, and tensor values equal to the GGUF's weights as
// dequantized by octet's GGUF reader, un-permuted (Q/K) and rounded to bf16 here (independent of
// the Python script); ModelConfig::from_hf_config == from_gguf; index and directory errors.
#include <catch2/catch.hpp>

#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "models/checkpoint.h"
#include "models/gguf.h"
#include "models/model_config.h"

#ifndef OCTET_HF_SMOLLM2_DIR
#define OCTET_HF_SMOLLM2_DIR "/root/.cache/octet/hf/SmolLM2-135M-Instruct-bf16"
#endif

using namespace octet;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string hf_dir() { return OCTET_HF_SMOLLM2_DIR; }
std::string hf_sharded_dir() { return hf_dir() + "-sharded"; }

void require_dir(const std::string& dir) {
  if (!fs::is_regular_file(dir + "/config.json")) {
    FAIL(dir << " is missing: make it with scripts/make_hf_checkpoint.py "
             << OCTET_SMOLLM2_GGUF << " " << dir << " (see the script's docstring)");
  }
}

std::string smollm2_gguf() {
  const std::string p = OCTET_SMOLLM2_GGUF;
  if (p.empty()) FAIL("OCTET_SMOLLM2_GGUF is empty (see README.md)");
  return p;
}

/// A GGUF weight as HF stores it: [out, in] rows, Q/K rows un-permuted from GGUF's adjacent
/// pairs (row 2i+k of a head) to HF's halves (row k*head_dim/2 + i), rounded to bf16 bits.
std::vector<uint16_t> expected_bf16(const GGUFFile& g, const std::string& name, int64_t n_heads) {
  const GGUFTensorInfo& t = g.tensor(name);
  const std::vector<float> w = g.dequantize(t);
  const int64_t cols = t.dims[0];
  const int64_t rows = t.num_elements() / cols;
  std::vector<uint16_t> out(w.size());
  const int64_t head_dim = n_heads > 0 ? rows / n_heads : 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t src = r;
    if (n_heads > 0) {
      const int64_t h = r / head_dim, j = r % head_dim, half = head_dim / 2;
      src = h * head_dim + (j < half ? 2 * j : 2 * (j - half) + 1);
    }
    for (int64_t c = 0; c < cols; ++c) out[size_t(r * cols + c)] = float_to_bf16(w[size_t(src * cols + c)]);
  }
  return out;
}

std::vector<uint16_t> bits(const TensorView& t) {
  REQUIRE(t.dtype == TensorDType::BF16);
  std::vector<uint16_t> out(size_t(t.num_elements()));
  std::memcpy(out.data(), t.data, out.size() * 2);
  return out;
}

std::string temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / "octet_test_hf" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

/// A tiny safetensors file holding F32 tensors `names`, each [2] = {1, 2}.
void write_small_safetensors(const std::string& path, const std::vector<std::string>& names) {
  json h = json::object();
  std::string data;
  for (const std::string& n : names) {
    h[n] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {data.size(), data.size() + 8}}};
    const float v[2] = {1.0f, 2.0f};
    data.append(reinterpret_cast<const char*>(v), 8);
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((text.size() >> (8 * i)) & 0xFF);
  write_text(path, bytes + text + data);
}

void expect_open_error(const std::string& dir, const std::string& needle) {
  try {
    HFCheckpoint::open(dir);
    FAIL("no error for " << dir << " (expected '" << needle << "')");
  } catch (const ModelFileError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

const char* kTinyConfig = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})";

}  // namespace

TEST_CASE("hf checkpoint: SmolLM2 bf16 directory, config and tensor values", "[hf][checkpoint]") {
  require_dir(hf_dir());
  const HFCheckpoint ckpt = HFCheckpoint::open(hf_dir());
  CHECK(is_hf_checkpoint_dir(hf_dir()));
  CHECK_FALSE(is_hf_checkpoint_dir(smollm2_gguf()));
  CHECK(ckpt.config()["architectures"][0] == "LlamaForCausalLM");
  CHECK(ckpt.config()["hidden_size"] == 576);
  CHECK(ckpt.config()["num_hidden_layers"] == 30);
  CHECK(ckpt.config()["tie_word_embeddings"] == true);
  REQUIRE(ckpt.generation_config());
  CHECK((*ckpt.generation_config())["eos_token_id"] == 2);

  // 30 layers x 9 tensors + embed_tokens + norm; tied, so no lm_head.
  const auto names = ckpt.tensor_names();
  CHECK(names.size() == 272);
  CHECK(std::is_sorted(names.begin(), names.end()));
  CHECK(ckpt.find("lm_head.weight") == nullptr);
  CHECK(ckpt.find("model.layers.29.mlp.down_proj.weight") != nullptr);
  try {
    ckpt.tensor("model.layers.30.mlp.down_proj.weight");
    FAIL("no error for a missing tensor");
  } catch (const ModelFileError& e) {
    CHECK(std::string(e.what()).find("missing tensor model.layers.30.mlp.down_proj.weight") !=
          std::string::npos);
  }

  const GGUFFile g = GGUFFile::open(smollm2_gguf());
  struct Case {
    const char* hf;
    const char* gguf;
    int64_t heads;  // > 0: un-permute Q/K rows with this many heads
    std::vector<int64_t> shape;
  };
  const Case cases[] = {
      {"model.embed_tokens.weight", "token_embd.weight", 0, {49152, 576}},
      {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", 9, {576, 576}},
      {"model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight", 3, {192, 576}},
      {"model.layers.7.self_attn.v_proj.weight", "blk.7.attn_v.weight", 0, {192, 576}},
      {"model.layers.29.self_attn.k_proj.weight", "blk.29.attn_k.weight", 3, {192, 576}},
      {"model.layers.29.mlp.down_proj.weight", "blk.29.ffn_down.weight", 0, {576, 1536}},
      {"model.layers.3.mlp.gate_proj.weight", "blk.3.ffn_gate.weight", 0, {1536, 576}},
      {"model.layers.12.post_attention_layernorm.weight", "blk.12.ffn_norm.weight", 0, {576}},
      {"model.norm.weight", "output_norm.weight", 0, {576}},
  };
  for (const Case& c : cases) {
    INFO(c.hf);
    const TensorView& t = ckpt.tensor(c.hf);
    CHECK(t.shape == c.shape);
    CHECK(bits(t) == expected_bf16(g, c.gguf, c.heads));
  }
  // to_f32 of bf16 is exact: spot-check one value against the bits.
  const TensorView& q = ckpt.tensor("model.layers.0.self_attn.q_proj.weight");
  CHECK(q.to_f32()[12345] == bf16_to_float(expected_bf16(g, "blk.0.attn_q.weight", 9)[12345]));
  // The un-permutation matters: without it layer 0's Q rows differ.
  CHECK(bits(q) != expected_bf16(g, "blk.0.attn_q.weight", 0));
}

TEST_CASE("hf checkpoint: 3-shard SmolLM2 equals the single file", "[hf][checkpoint]") {
  require_dir(hf_dir());
  require_dir(hf_sharded_dir());
  REQUIRE(fs::is_regular_file(hf_sharded_dir() + "/model.safetensors.index.json"));
  REQUIRE(fs::is_regular_file(hf_sharded_dir() + "/model-00003-of-00003.safetensors"));
  const HFCheckpoint one = HFCheckpoint::open(hf_dir());
  const HFCheckpoint three = HFCheckpoint::open(hf_sharded_dir());
  REQUIRE(three.tensor_names() == one.tensor_names());
  std::set<std::string> files;
  for (const std::string& n : one.tensor_names()) {
    const TensorView& a = one.tensor(n);
    const TensorView& b = three.tensor(n);
    files.insert(b.file);
    INFO(n);
    CHECK(a.dtype == b.dtype);
    CHECK(a.shape == b.shape);
    REQUIRE(a.nbytes == b.nbytes);
    CHECK(std::memcmp(a.data, b.data, a.nbytes) == 0);
  }
  CHECK(files.size() == 3);
}

TEST_CASE("hf checkpoint: ModelConfig from config.json equals the GGUF's", "[hf][config]") {
  require_dir(hf_dir());
  const HFCheckpoint ckpt = HFCheckpoint::open(hf_dir());
  const ModelConfig h = ModelConfig::from_hf_config(ckpt.config(), hf_dir() + "/config.json");
  const ModelConfig g = ModelConfig::from_gguf(GGUFFile::open(smollm2_gguf()));
  CHECK(h.architecture == g.architecture);
  CHECK(h.hidden_size == g.hidden_size);
  CHECK(h.num_hidden_layers == g.num_hidden_layers);
  CHECK(h.num_attention_heads == g.num_attention_heads);
  CHECK(h.num_key_value_heads == g.num_key_value_heads);
  CHECK(h.head_dim == g.head_dim);
  CHECK(h.rotary_dim == g.rotary_dim);
  CHECK(h.intermediate_size == g.intermediate_size);
  CHECK(h.vocab_size == g.vocab_size);
  CHECK(h.rms_norm_eps == g.rms_norm_eps);
  CHECK(h.rope_theta == g.rope_theta);
  CHECK(h.rope_scaling.type == g.rope_scaling.type);
  CHECK(h.rope_scaling.factor == g.rope_scaling.factor);
  CHECK(h.tie_word_embeddings == g.tie_word_embeddings);
  CHECK(h.max_position_embeddings == g.max_position_embeddings);
  CHECK(h.layer_sliding_window == g.layer_sliding_window);
  CHECK(h.rope_inv_freq() == g.rope_inv_freq());
  // SmolLM2-135M's known shape (independent of both readers).
  CHECK(h.hidden_size == 576);
  CHECK(h.num_key_value_heads == 3);
  CHECK(h.rope_theta == 100000.0f);
}

TEST_CASE("hf config: keys, defaults, rope scaling and errors", "[hf][config]") {
  json c = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64},
            {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"intermediate_size", 128},
            {"vocab_size", 100}};
  const ModelConfig d = ModelConfig::from_hf_config(c, "cfg.json");
  CHECK(d.num_key_value_heads == 4);
  CHECK(d.head_dim == 16);
  CHECK(d.rotary_dim == 16);
  CHECK(d.rope_theta == 10000.0f);
  CHECK(d.rms_norm_eps == 1e-6f);
  CHECK_FALSE(d.tie_word_embeddings);
  CHECK(d.max_position_embeddings == 2048);
  CHECK(d.layer_sliding_window == std::vector<int64_t>{0, 0});
  CHECK(d.rope_scaling.type == RopeScaling::Type::None);

  json l3 = c;
  l3["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  l3["head_dim"] = 32;
  l3["rope_theta"] = 500000.0;
  const ModelConfig m = ModelConfig::from_hf_config(l3, "cfg.json");
  CHECK(m.head_dim == 32);
  CHECK(m.rope_theta == 500000.0f);
  CHECK(m.rope_scaling.type == RopeScaling::Type::Llama3);
  CHECK(m.rope_scaling.factor == 8.0f);
  CHECK(m.rope_scaling.original_max_position_embeddings == 8192);

  json lin = c;
  lin["model_type"] = "llama";
  lin["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  CHECK(ModelConfig::from_hf_config(lin, "cfg.json").rope_scaling.type == RopeScaling::Type::Linear);
  CHECK(ModelConfig::from_hf_config(lin, "cfg.json").rope_scaling.factor == 2.0f);

  json v5 = c;  // transformers 5 style
  v5["rope_parameters"] = {{"rope_theta", 100000.0}, {"rope_type", "default"}};
  CHECK(ModelConfig::from_hf_config(v5, "cfg.json").rope_theta == 100000.0f);
  CHECK(ModelConfig::from_hf_config(v5, "cfg.json").rope_scaling.type == RopeScaling::Type::None);

  auto expect = [](const json& cfg, const std::string& needle) {
    try {
      ModelConfig::from_hf_config(cfg, "/x/config.json");
      FAIL("no error (expected '" << needle << "')");
    } catch (const ModelFileError& e) {
      INFO(e.what());
      CHECK(e.path() == "/x/config.json");
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  json bad = c;
  bad["architectures"] = {"GemmaForCausalLM"};
  expect(bad, "unsupported architecture 'GemmaForCausalLM'");
  bad = c;
  bad["model_type"] = "gemma";
  expect(bad, "unsupported model_type 'gemma'");
  bad = c;
  bad.erase("architectures");
  expect(bad, "missing model_type and architectures");
  bad = c;
  bad.erase("hidden_size");
  expect(bad, "missing hidden_size");
  bad = c;
  bad["num_key_value_heads"] = 3;
  expect(bad, "not a multiple of num_key_value_heads 3");
  bad = c;
  bad["vocab_size"] = -1;
  expect(bad, "vocab_size must be a positive integer");
  bad = c;
  bad["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect(bad, "unsupported rope_scaling.rope_type 'yarn'");
  bad = c;
  bad["rope_scaling"] = {{"rope_type", "linear"}};
  expect(bad, "missing rope_scaling.factor");
}

TEST_CASE("hf checkpoint: directory and shard index errors", "[hf][checkpoint][errors]") {
  SECTION("index naming a missing shard file") {
    const std::string d = temp_dir("missing_shard");
    write_text(d + "/config.json", kTinyConfig);
    write_small_safetensors(d + "/model-00001-of-00002.safetensors", {"a.weight"});
    write_text(d + "/model.safetensors.index.json",
               R"({"metadata": {}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                   "b.weight": "model-00002-of-00002.safetensors"}})");
    expect_open_error(d, "shard file model-00002-of-00002.safetensors (holding b.weight) does not exist");
    expect_open_error(d, "model.safetensors.index.json");
  }
  SECTION("tensor in the index but not in its shard") {
    const std::string d = temp_dir("absent_tensor");
    write_text(d + "/config.json", kTinyConfig);
    write_small_safetensors(d + "/model-00001-of-00001.safetensors", {"a.weight"});
    write_text(d + "/model.safetensors.index.json",
               R"({"weight_map": {"a.weight": "model-00001-of-00001.safetensors",
                                  "c.weight": "model-00001-of-00001.safetensors"}})");
    expect_open_error(d, "tensor c.weight is listed in shard model-00001-of-00001.safetensors");
  }
  SECTION("the same tensor in two files") {
    const std::string d = temp_dir("duplicate");
    write_text(d + "/config.json", kTinyConfig);
    write_small_safetensors(d + "/one.safetensors", {"a.weight", "b.weight"});
    write_small_safetensors(d + "/two.safetensors", {"b.weight"});
    expect_open_error(d, "tensor b.weight is in both");
  }
  SECTION("several files without an index") {
    const std::string d = temp_dir("no_index");
    write_text(d + "/config.json", kTinyConfig);
    write_small_safetensors(d + "/one.safetensors", {"a.weight"});
    write_small_safetensors(d + "/two.safetensors", {"b.weight", "c.weight"});
    const HFCheckpoint c = HFCheckpoint::open(d);
    CHECK(c.tensor_names() == std::vector<std::string>{"a.weight", "b.weight", "c.weight"});
    CHECK(c.tensor("c.weight").to_f32() == std::vector<float>{1.0f, 2.0f});
    CHECK(c.generation_config() == nullptr);
  }
  SECTION("index without weight_map") {
    const std::string d = temp_dir("bad_index");
    write_text(d + "/config.json", kTinyConfig);
    write_text(d + "/model.safetensors.index.json", R"({"metadata": {}})");
    expect_open_error(d, "missing or empty weight_map");
  }
  SECTION("missing config.json, malformed config.json, no weights") {
    const std::string d = temp_dir("no_config");
    expect_open_error(d, "missing config.json");
    write_text(d + "/config.json", "{not json");
    expect_open_error(d, "config.json: malformed JSON");
    write_text(d + "/config.json", kTinyConfig);
    expect_open_error(d, "no weights");
  }
  SECTION("hostile JSON: deep nesting and a huge index are errors naming the file") {
    const std::string d = temp_dir("hostile_json");
    // 100,000 nested arrays in a value: rejected at depth 64, not parsed into a deep tree.
    write_text(d + "/config.json",
               R"({"a": )" + std::string(100000, '[') + std::string(100000, ']') + "}");
    expect_open_error(d, "config.json: JSON nested deeper than 64 levels");
    write_text(d + "/config.json", kTinyConfig);
    // An index over the 64 MB cap of config/file_read.h: refused before it is read.
    {
      std::ofstream big(d + "/model.safetensors.index.json");
      big << R"({"weight_map": {}, "pad": ")";
    }
    std::filesystem::resize_file(d + "/model.safetensors.index.json", (64u << 20) + 1);
    expect_open_error(d, "model.safetensors.index.json: larger than the 67108864-byte limit");
  }
  SECTION("a malformed shard is reported with its own path") {
    const std::string d = temp_dir("bad_shard");
    write_text(d + "/config.json", kTinyConfig);
    write_text(d + "/model.safetensors", "abc");
    expect_open_error(d, d + "/model.safetensors: file is 3 bytes");
  }
}

// `octet calibrate` (engine/calibrate.h): amax and scales on the tiny HF Llama (4 layers, 2 KV
// heads, head_dim 8), the round trip of both outputs through the loaders and the start-up
// table, and the errors for bad input.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/calibrate.h"
#include "engine/kv_cache_setup.h"
#include "engine/model_loader.h"
#include "models/kv_scales.h"
#include "tiny_models.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

std::string write_text(const testing::TempDir& dir, const std::string& name,
                       const std::string& text) {
  const std::string p = dir.file(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::string long_text() {
  std::string t;
  for (int i = 0; i < 40; ++i)
    t += "The quick brown fox jumps over the lazy dog " + std::to_string(i * 37) + " times. ";
  return t;
}

// The tiny Llama with k_proj and v_proj rows * c and q_proj, o_proj * 1/c (the same function;
// K and V exactly c times larger for a power of two c). Weights are F32 in the tiny model.
std::string scaled_tiny_llama(const testing::TempDir& dir, float c) {
  const std::string src = testing::tiny_model_dir("tiny_llama"), dst = dir.file("scaled");
  fs::create_directories(dst);
  for (const char* f :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(src + "/" + f, dst + "/" + f);
  std::ifstream in(src + "/model.safetensors", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const nlohmann::json header =
      nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(header_len));
  char* data = bytes.data() + 8 + header_len;
  int scaled = 0;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    float m = 1.0f;
    if (name.find("k_proj.weight") != std::string::npos ||
        name.find("v_proj.weight") != std::string::npos)
      m = c;
    if (name.find("q_proj.weight") != std::string::npos ||
        name.find("o_proj.weight") != std::string::npos)
      m = 1.0f / c;
    if (m == 1.0f) continue;
    REQUIRE(info["dtype"] == "F32");
    const size_t b = info["data_offsets"][0], e = info["data_offsets"][1];
    for (size_t off = b; off < e; off += 4) {
      float v;
      std::memcpy(&v, data + off, 4);
      v *= m;
      std::memcpy(data + off, &v, 4);
    }
    ++scaled;
  }
  REQUIRE(scaled == 16);
  std::ofstream(dst + "/model.safetensors", std::ios::binary).write(bytes.data(), bytes.size());
  return dst;
}

CalibrateRun run_for(const std::string& model, const std::string& dataset,
                     const std::string& output, const std::string& strategy) {
  CalibrateRun r;
  r.model = model;
  r.dataset = dataset;
  r.output = output;
  r.options.strategy = strategy;
  r.options.max_seq_len = 64;
  r.options.num_samples = 8;
  return r;
}

std::vector<float> expand(const std::vector<float>& s, size_t n) {
  return s.size() == n ? s : std::vector<float>(n, s.at(0));
}

}  // namespace

TEST_CASE("calibrate: scales are amax * headroom / 448, per head and per tensor", "[calibrate]") {
  testing::TempDir dir;
  const std::string model = testing::tiny_model_dir("tiny_llama");
  const std::string text = write_text(dir, "t.txt", long_text());
  const KVCalibration head =
      run_calibrate(run_for(model, text, dir.file("h.json"), "attn_head"), {});
  const KVCalibration tensor =
      run_calibrate(run_for(model, text, dir.file("t.json"), "tensor"), {});
  REQUIRE(head.k_scale.size() == 4);
  CHECK(head.num_samples == tensor.num_samples);
  CHECK(head.num_samples >= 2);  // the text is longer than one 64-token window
  for (size_t l = 0; l < 4; ++l) {
    REQUIRE(head.k_scale[l].size() == 2);
    REQUIRE(tensor.k_scale[l].size() == 1);
    for (size_t h = 0; h < 2; ++h) {
      CHECK(head.k_amax[l][h] > 0.0f);
      CHECK(head.k_scale[l][h] == head.k_amax[l][h] / (448.0f / 2.0f));
      CHECK(head.v_scale[l][h] == head.v_amax[l][h] / (448.0f / 2.0f));
    }
    CHECK(tensor.k_scale[l][0] == std::max(head.k_scale[l][0], head.k_scale[l][1]));
    CHECK(tensor.v_scale[l][0] == std::max(head.v_scale[l][0], head.v_scale[l][1]));
  }
}

TEST_CASE("calibrate: K/V c times larger give amax c times larger", "[calibrate]") {
  // An independent check of what is measured: scaling k_proj / v_proj by c = 256 (exact in
  // FP32) scales every K (RoPE is linear) and V by exactly 256.
  testing::TempDir dir;
  const std::string text = write_text(dir, "t.txt", long_text());
  const KVCalibration a = run_calibrate(
      run_for(testing::tiny_model_dir("tiny_llama"), text, dir.file("a.json"), "attn_head"), {});
  const KVCalibration b = run_calibrate(
      run_for(scaled_tiny_llama(dir, 256.0f), text, dir.file("b.json"), "attn_head"), {});
  for (size_t l = 0; l < 4; ++l)
    for (size_t h = 0; h < 2; ++h) {
      CHECK(b.k_amax[l][h] == Approx(256.0f * a.k_amax[l][h]).epsilon(1e-5));
      CHECK(b.v_amax[l][h] == Approx(256.0f * a.v_amax[l][h]).epsilon(1e-5));
    }
}

TEST_CASE("calibrate: scales file and checkpoint load back with identical values", "[calibrate]") {
  testing::TempDir dir;
  const std::string model = testing::tiny_model_dir("tiny_llama");
  const std::string text = write_text(dir, "t.txt", long_text());
  for (const std::string strategy : {"tensor", "attn_head"}) {
    INFO(strategy);
    const std::string json = dir.file(strategy + ".json"), ckpt = dir.file(strategy + "_ckpt");
    const KVCalibration cal = run_calibrate(run_for(model, text, json, strategy), {});
    const KVCalibration cal2 = run_calibrate(run_for(model, text, ckpt, strategy), {});
    REQUIRE(cal2.k_scale == cal.k_scale);  // deterministic

    // The scales file, read directly and through the KV cache start-up (its table).
    const LayerScalesFile f = load_kv_scales_file(json, 4, 2);
    CHECK(f.kv_cache_dtype == "fp8_e4m3");
    for (size_t l = 0; l < 4; ++l) {
      CHECK(f.layers[l].k_scale == cal.k_scale[l]);
      CHECK(f.layers[l].v_scale == cal.v_scale[l]);
    }
    const auto base = load_model(model, make_load_options("auto", "channel"));
    CacheConfig cc;
    cc.kv_cache_dtype = "fp8_e4m3";
    cc.num_kv_blocks = 32;
    cc.kv_scales_path = json;
    const KVCacheSetup from_file = setup_kv_cache(cc, 256, *base);
    for (size_t l = 0; l < 4; ++l) {
      CHECK(from_file.layers[l].scale_source == "file");
      CHECK(from_file.layers[l].k_scale == expand(cal.k_scale[l], 2));
      CHECK(from_file.layers[l].v_scale == expand(cal.v_scale[l], 2));
    }
    CHECK(from_file.report.find(" file\n") != std::string::npos);

    // The checkpoint: config, tensor shapes as llm-compressor writes them, values, table.
    const HFCheckpoint h = HFCheckpoint::open(ckpt);
    const auto& q = h.config().at("quantization_config");
    CHECK(q.at("quant_method") == "compressed-tensors");
    CHECK(q.at("kv_cache_scheme").at("strategy") == strategy);
    CHECK(q.at("kv_cache_scheme").at("dynamic") == false);
    const TensorView& k0 = h.tensor("model.layers.0.self_attn.k_scale");
    CHECK(k0.shape ==
          (strategy == "tensor" ? std::vector<int64_t>{1} : std::vector<int64_t>{2, 1, 1}));
    CHECK(h.find("model.layers.0.self_attn.k_proj.weight")->dtype == TensorDType::F8_E4M3);
    const auto loaded = load_model(ckpt, make_load_options("auto", "channel"));
    cc.kv_scales_path.clear();
    const KVCacheSetup from_ckpt = setup_kv_cache(cc, 256, *loaded);
    for (size_t l = 0; l < 4; ++l) {
      CHECK(from_ckpt.layers[l].scale_source == "checkpoint");
      CHECK(from_ckpt.layers[l].k_scale == expand(cal.k_scale[l], 2));
      CHECK(from_ckpt.layers[l].v_scale == expand(cal.v_scale[l], 2));
    }
    CHECK(from_ckpt.report.find(" checkpoint\n") != std::string::npos);
    // fp8_per_token_head ignores them and says so in the table.
    cc.kv_cache_dtype = "fp8_per_token_head";
    const KVCacheSetup dyn = setup_kv_cache(cc, 256, *loaded);
    CHECK(dyn.layers[0].per_token_head);
    CHECK(dyn.layers[0].scale_source == "per-token-head (checkpoint scales not used)");
    CHECK(dyn.report.find("checkpoint scales not used") != std::string::npos);
    cc.kv_cache_dtype = "fp8_e4m3";
  }
}

TEST_CASE("calibrate: datasets (JSONL, ShareGPT, chat) and the default set", "[calibrate]") {
  testing::TempDir dir;
  const std::string model = testing::tiny_model_dir("tiny_llama");
  const std::string jsonl = write_text(
      dir, "d.jsonl",
      "{\"text\": \"hello there, this is a sample\"}\n\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
      "\"content\": \"hello\"}]}\n");
  const auto s = read_calibration_dataset(jsonl);
  REQUIRE(s.size() == 2);
  CHECK(s[0].text == "hello there, this is a sample");
  REQUIRE(s[1].messages.size() == 2);
  CHECK(s[1].messages[1] == std::pair<std::string, std::string>{"assistant", "hello"});
  const std::string sharegpt =
      write_text(dir, "d.json",
                 "[{\"id\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": \"2+2?\"}, "
                 "{\"from\": \"gpt\", \"value\": \"4\"}]}]");
  const auto g = read_calibration_dataset(sharegpt);
  REQUIRE(g.size() == 1);
  CHECK(g[0].messages ==
        std::vector<std::pair<std::string, std::string>>{{"user", "2+2?"}, {"assistant", "4"}});
  // --chat renders through the renderer given; the run then has one sample per record.
  CalibrateRun r = run_for(model, sharegpt, dir.file("c.json"), "tensor");
  r.chat = true;
  int rendered = 0;
  auto make = [&](const ModelTokenizer&) -> ChatRenderer {
    return [&](const std::vector<std::pair<std::string, std::string>>& turns) {
      ++rendered;
      return "<|user|>" + turns.at(0).second + "<|assistant|>" + turns.at(1).second;
    };
  };
  CHECK(run_calibrate(r, make).num_samples == 1);
  CHECK(rendered == 1);
  // The built-in set: text, the special-token probe and two conversations.
  // The text is cut in windows of 256 tokens (the model's context), the rest are one sample each.
  CalibrateRun def = run_for(model, "", dir.file("d.json"), "tensor");
  def.options.max_seq_len = 4096;
  def.options.num_samples = 1000;
  const KVCalibration d = run_calibrate(def, {});
  CHECK(d.num_samples >= 4);
  CHECK(d.num_tokens > 3 * 256);
  def.options.num_samples = 2;  // --num-samples caps
  CHECK(run_calibrate(def, {}).num_samples == 2);
}

TEST_CASE("calibrate: bad input gives clear errors", "[calibrate]") {
  testing::TempDir dir;
  const std::string model = testing::tiny_model_dir("tiny_llama");
  const std::string text = write_text(dir, "t.txt", long_text());
  auto fails = [&](CalibrateRun r, const std::string& what) {
    INFO(what);
    REQUIRE_THROWS_AS(run_calibrate(r, {}), std::invalid_argument);
    try {
      run_calibrate(r, {});
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
  };
  fails(run_for(model, write_text(dir, "e.txt", "  \n"), dir.file("o.json"), "tensor"),
        "empty dataset");
  fails(run_for(model, write_text(dir, "e.jsonl", "{\"text\": \"\"}\n"), dir.file("o.json"),
                "tensor"),
        "empty dataset");
  fails(run_for(model, write_text(dir, "s.txt", "a few words"), dir.file("o.json"), "tensor"),
        "shorter than one sample");
  fails(run_for(model, text, dir.file("o.json"), "channel"), "--strategy channel");
  fails(run_for(model, text, text + "/o.json", "tensor"), "cannot write the output");
  fails(run_for(model, text, dir.file("missing/o.json"), "tensor"), "does not exist");
  fails(run_for(std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf", text, dir.file("ckpt"),
                "tensor"),
        "needs a Hugging Face checkpoint");
  CalibrateRun e5 = run_for(model, text, dir.file("o.json"), "tensor");
  e5.options.kv_cache_dtype = "bf16";
  fails(e5, "calibration is for FP8");
  CHECK(!fs::exists(dir.file("o.json")));  // nothing written by a failed run
}

}  // namespace octet

namespace octet {

TEST_CASE("calibrate: Q amax per layer and query head, after RoPE", "[calibrate]") {
  testing::TempDir dir;
  const std::string model = testing::tiny_model_dir("tiny_llama");
  const std::string text = write_text(dir, "t.txt", long_text());
  CalibrateRun one = run_for(model, text, dir.file("a.json"), "attn_head");
  one.options.num_samples = 1;
  const KVCalibration a = run_calibrate(one, {});
  REQUIRE(a.q_amax.size() == 4);
  for (const auto& l : a.q_amax) {
    REQUIRE(l.size() == 4);  // num_attention_heads
    for (float x : l) CHECK(x > 0.0f);
  }
  // Independent reference for the last layer: the one-sequence forward leaves the last
  // layer's Q (after RoPE) in its activations; amax per head over the sample's 64 tokens.
  const auto loaded = load_model(model, make_load_options("none", "channel"));
  std::vector<int32_t> ids = loaded->tokenizer->encode(long_text(), true, true);
  REQUIRE(ids.size() >= 64);
  ids.resize(64);
  SequenceKVCache seq = loaded->model->new_cache(64);
  (void)loaded->model->forward(ids.data(), 64, 0, seq, false);
  std::vector<float> q(64 * 4 * 8);
  loaded->model->backend().download(seq.act.q, 0, q.data(), static_cast<int64_t>(q.size() * 4));
  for (int h = 0; h < 4; ++h) {
    float m = 0.0f;
    for (int t = 0; t < 64; ++t)
      for (int d = 0; d < 8; ++d) m = std::max(m, std::fabs(q[t * 32 + h * 8 + d]));
    INFO("head " << h);
    CHECK(a.q_amax[3][h] == m);
  }
  // q_proj * 1/256 (exact in FP32, RoPE is linear): every Q 256 times smaller, every layer.
  CalibrateRun scaled = run_for(scaled_tiny_llama(dir, 256.0f), text, dir.file("b.json"),
                                "attn_head");
  scaled.options.num_samples = 1;
  const KVCalibration b = run_calibrate(scaled, {});
  for (size_t l = 0; l < 4; ++l)
    for (size_t h = 0; h < 4; ++h) CHECK(b.q_amax[l][h] == Approx(a.q_amax[l][h] / 256.0f).epsilon(1e-5));
  // The scales file holds K/V scales only (its loader accepts no other key).
  CHECK(load_kv_scales_file(dir.file("a.json"), 4, 2).layers.size() == 4);
}

}  // namespace octet

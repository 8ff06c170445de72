// `octet kv-report` (engine/kv_report.h) on the tiny HF Llama and on a copy that computes the same
// function with K and V 2^16 times larger (k_proj, v_proj * c; q_proj, o_proj / c): the report
// flags every layer as clipping at unit scale, and with calibrated or per-token-head scales the
// KL is the original model's (the scales move by exactly c, so the FP8 codes are the same).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/kv_report.h"
#include "tiny_models.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

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
    const size_t b = info["data_offsets"][0], e = info["data_offsets"][1];
    for (size_t off = b; off < e; off += 4) {
      float v;
      std::memcpy(&v, data + off, 4);
      v *= m;
      std::memcpy(data + off, &v, 4);
    }
  }
  std::ofstream(dst + "/model.safetensors", std::ios::binary).write(bytes.data(), bytes.size());
  return dst;
}

KVReportOptions options(const std::string& model) {
  KVReportOptions o;
  o.model = model;
  o.quantization = "none";  // FP32 weights: the scaled model is exactly the same function
  for (int i = 0; i < 20; ++i)
    o.text += "The cat sat on the mat and looked at " + std::to_string(i * 13) + " birds. ";
  o.max_tokens = 200;
  o.query_stride = 3;
  return o;
}

const KVVariantReport& find(const KVReport& r, const std::string& f, const std::string& s) {
  for (const KVVariantReport& v : r.variants)
    if (v.format == f && v.source == s) return v;
  FAIL("variant " << f << "/" << s << " missing");
  return r.variants.front();
}

}  // namespace

TEST_CASE(
    "kv-report: K/V beyond FP8's range clip at unit scale, calibrated and per-token-head "
    "scales give the original's KL",
    "[kv_report]") {
  testing::TempDir dir;
  const KVReport orig = run_kv_report(options(testing::tiny_model_dir("tiny_llama")));
  const KVReport big = run_kv_report(options(scaled_tiny_llama(dir, 65536.0f)));
  REQUIRE(orig.variants.size() == 8);
  REQUIRE(orig.num_layers == 4);
  for (const std::string f : {"fp8_e4m3", "fp8_e5m2"}) {
    INFO(f);
    // Unit scale: the original fits; the scaled copy clips in every layer and its KL explodes.
    CHECK(find(orig, f, "unit").clipping_layers.empty());
    CHECK(find(big, f, "unit").clipping_layers == std::vector<int64_t>{0, 1, 2, 3});
    CHECK(find(big, f, "unit").heads[0][0].k_clip > 0.01);
    CHECK(find(big, f, "unit").kl > 100 * find(orig, f, "unit").kl);
    CHECK(find(big, f, "unit").greedy_agreement < find(orig, f, "unit").greedy_agreement);
    for (const std::string s : {"tensor", "attn_head", "per_token_head"}) {
      INFO(s);
      const KVVariantReport &a = find(orig, f, s), &b = find(big, f, s);
      CHECK(b.clipping_layers.empty());
      CHECK(b.kl == Approx(a.kl).epsilon(1e-3).margin(1e-9));
      CHECK(b.greedy_agreement == a.greedy_agreement);
      CHECK(b.heads[1][0].k_amax == Approx(65536.0 * a.heads[1][0].k_amax).epsilon(1e-5));
      CHECK(b.heads[1][0].k_scale == Approx(65536.0 * a.heads[1][0].k_scale).epsilon(1e-5));
      CHECK(b.kl < 1e-3);  // an FP8 cache on this model costs little
    }
    // E4M3 keeps one more mantissa bit than E5M2: smaller errors, same scales otherwise.
  }
  CHECK(find(orig, "fp8_e4m3", "per_token_head").heads[2][1].output_rel_error <
        find(orig, "fp8_e5m2", "per_token_head").heads[2][1].output_rel_error);
  CHECK(find(orig, "fp8_e4m3", "tensor").heads[0][0].output_rel_error > 0.0);
}

TEST_CASE("kv-report: --target-kl recommends skip layers that meet it", "[kv_report]") {
  testing::TempDir dir;
  KVReportOptions o = options(scaled_tiny_llama(dir, 65536.0f));
  o.formats = {"fp8_e4m3"};
  o.sources = {"unit", "tensor"};
  o.target_kl = 1e-12;
  o.recommend_for = "fp8_e4m3/unit";
  const KVReport r = run_kv_report(o);
  REQUIRE(r.layer_kl.size() == 4);
  for (double kl : r.layer_kl) CHECK(kl > 1e-6);  // every layer clips
  // Only all four layers in bf16 (no FP8 at all: the exact logits, KL 0) meet 1e-12.
  CHECK(r.skip_layers == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(r.kl_with_skip == 0.0);
  CHECK(r.target_met);
  CHECK(r.skip_layers_flag == "--kv-cache-dtype-skip-layers 0,1,2,3");
  CHECK(kv_report_table(r).find("--kv-cache-dtype-skip-layers 0,1,2,3") != std::string::npos);
  CHECK(kv_report_json(r).find("\"skip_layers\":[0,1,2,3]") != std::string::npos);
  o.recommend_for = "fp8_e5m2/unit";
  REQUIRE_THROWS_AS(run_kv_report(o), std::invalid_argument);
  o.recommend_for = "fp8_e4m3/unit";
  o.target_kl = 0;
  o.long_context_lengths = {1000};  // beyond the tiny model's 256
  REQUIRE_THROWS_AS(run_kv_report(o), std::invalid_argument);
  o.sources = {"channel"};
  REQUIRE_THROWS_AS(run_kv_report(o), std::invalid_argument);
}

TEST_CASE("kv-report: the long-context copy probe", "[kv_report]") {
  // The scaled copy computes the original's function: exact-KV and per-token-head accuracies
  // are the original's (per-token-head scales move by exactly c), at every length.
  testing::TempDir dir;
  KVReportOptions a = options(testing::tiny_model_dir("tiny_llama"));
  a.formats = {"fp8_e4m3"};
  a.sources = {"unit", "per_token_head"};
  a.long_context_lengths = {32, 128, 256};
  KVReportOptions b = a;
  b.model = scaled_tiny_llama(dir, 65536.0f);
  const KVReport ra = run_kv_report(a), rb = run_kv_report(b);
  REQUIRE(ra.long_context.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    INFO("length " << ra.long_context[i].length);
    CHECK(ra.long_context[i].length == a.long_context_lengths[i]);
    REQUIRE(rb.long_context[i].accuracy.size() == 2);
    CHECK(rb.long_context[i].exact_accuracy == Approx(ra.long_context[i].exact_accuracy));
    CHECK(rb.long_context[i].accuracy[1] == Approx(ra.long_context[i].accuracy[1]));
    for (double x : rb.long_context[i].accuracy) CHECK((x >= 0.0 && x <= 1.0));
  }
  CHECK(kv_report_table(rb).find("long-context copy task") != std::string::npos);
  CHECK(kv_report_json(rb).find("\"long_context\":[{") != std::string::npos);
}

TEST_CASE("kv-report: skip companions (--kv-cache-dtype-skip-layers), windows, perplexity",
          "[kv_report]") {
  // tiny_qwen3 is hybrid: layers 1 and 3 attend a window of 8 tokens, 0 and 2 everything.
  KVReportOptions o = options(testing::tiny_model_dir("tiny_qwen3"));
  o.formats = {"fp8_e4m3"};
  o.sources = {"unit", "per_token_head"};
  o.skip_layers = "sliding_window";
  o.long_context_lengths = {64};
  const KVReport r = run_kv_report(o);
  CHECK(r.layer_window == std::vector<int64_t>{0, 8, 0, 8});
  REQUIRE(r.variants.size() == 4);  // unit, unit skip, per_token_head, per_token_head skip
  CHECK(r.perplexity > 1.0);
  for (size_t i = 0; i < 4; ++i) {
    INFO(i);
    const KVVariantReport& v = r.variants[i];
    CHECK(v.perplexity > 1.0);
    if (i % 2 == 0) {
      CHECK(v.skip_layers.empty());
      CHECK(v.heads.size() == 4);
    } else {
      CHECK(v.source == r.variants[i - 1].source);
      CHECK(v.skip_layers == std::vector<int64_t>{1, 3});
      CHECK(v.skip_spec == "sliding_window");
      CHECK(v.heads.empty());
    }
  }
  REQUIRE(r.long_context.size() == 1);
  CHECK(r.long_context[0].accuracy.size() == 4);
  const std::string table = kv_report_table(r);
  CHECK(table.find("layers: global 0,2; sliding window 8: 1,3") != std::string::npos);
  CHECK(table.find("unit skip=sliding_window") != std::string::npos);
  CHECK(table.find("win8") != std::string::npos);
  const std::string json = kv_report_json(r);
  CHECK(json.find("\"layer_window\":[0,8,0,8]") != std::string::npos);
  CHECK(json.find("\"skip_spec\":\"sliding_window\"") != std::string::npos);

  // Every layer skipped: the exact model (KL 0, its perplexity and copy accuracy).
  o.sources = {"unit"};
  o.skip_layers = "0,sliding_window,2";
  const KVReport all = run_kv_report(o);
  REQUIRE(all.variants.size() == 2);
  CHECK(all.variants[1].skip_layers == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(all.variants[1].kl == 0.0);
  CHECK(all.variants[1].greedy_agreement == 1.0);
  CHECK(all.variants[1].perplexity == all.perplexity);
  CHECK(all.long_context[0].accuracy[1] == all.long_context[0].exact_accuracy);

  o.skip_layers = "4";  // beyond the 4 layers
  REQUIRE_THROWS_AS(run_kv_report(o), std::invalid_argument);
  KVReportOptions l = options(testing::tiny_model_dir("tiny_llama"));
  l.formats = {"fp8_e4m3"};
  l.sources = {"unit"};
  l.skip_layers = "sliding_window";  // tiny_llama has no window layer
  REQUIRE_THROWS_AS(run_kv_report(l), std::invalid_argument);
}

}  // namespace octet

// `octet quantize` (quantize_checkpoint) end to end on the bf16 Hugging Face SmolLM2 made by
// the set-up: the written checkpoint validates as compressed-tensors FP8_DYNAMIC, loads, and
// holds exactly the codes and scales octet's online quantization (at load) computes from the
// same bf16 weights; both generate the same greedy tokens.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/quantize.h"
#include "gguf_writer.h"
#include "models/checkpoint.h"
#include "greedy.h"
#include "models/llama.h"

using octet::testing::greedy;
using namespace octet;

namespace {


}  // namespace

TEST_CASE("quantize writes an FP8_DYNAMIC checkpoint equal to online quantization",
          "[quantize][fp8]") {
  testing::TempDir dir;
  const std::string out = dir.file("fp8");
  const QuantizeReport r = quantize_checkpoint({OCTET_HF_SMOLLM2_DIR, out});
  CHECK(r.quantized_linears == 30 * 7);

  // config.json carries llm-compressor's quantization_config.
  std::ifstream in(out + "/config.json");
  const auto config = nlohmann::json::parse(in);
  const auto& qc = config["quantization_config"];
  CHECK(qc["quant_method"] == "compressed-tensors");
  CHECK(qc["format"] == "float-quantized");
  CHECK(qc["ignore"] == std::vector<std::string>{"lm_head"});
  CHECK(std::filesystem::exists(out + "/tokenizer.json"));

  const HFCheckpoint fp8_ckpt = HFCheckpoint::open(out);
  const TensorView& w = fp8_ckpt.tensor("model.layers.0.self_attn.q_proj.weight");
  CHECK(w.dtype == TensorDType::F8_E4M3);
  CHECK(w.shape == std::vector<int64_t>{576, 576});
  const TensorView& s = fp8_ckpt.tensor("model.layers.0.self_attn.q_proj.weight_scale");
  CHECK(s.shape == std::vector<int64_t>{576, 1});
  CHECK(s.dtype == TensorDType::BF16);  // llm-compressor keeps scales in the model's dtype

  const LlamaModel from_ckpt = LlamaModel::load(fp8_ckpt);
  const HFCheckpoint bf16 = HFCheckpoint::open(OCTET_HF_SMOLLM2_DIR);
  const LlamaModel online = LlamaModel::load(bf16);  // default: quantize at load
  CHECK(from_ckpt.linear_format() == "fp8-w8a8-dynamic-channel");
  CHECK(online.linear_format() == "fp8-w8a8-dynamic-channel");

  int64_t codes = 0, same_codes = 0, scales = 0, same_scales = 0;
  for (size_t l = 0; l < online.weights().layers.size(); ++l) {
    const auto& a = online.weights().layers[l];
    const auto& b = from_ckpt.weights().layers[l];
    for (auto [x, y] : {std::pair{&a.q_proj, &b.q_proj}, {&a.k_proj, &b.k_proj},
                        {&a.v_proj, &b.v_proj}, {&a.o_proj, &b.o_proj},
                        {&a.gate_proj, &b.gate_proj}, {&a.up_proj, &b.up_proj},
                        {&a.down_proj, &b.down_proj}}) {
      REQUIRE(x->w_fp8.size() == y->w_fp8.size());
      for (size_t i = 0; i < x->w_fp8.size(); ++i) same_codes += x->w_fp8[i] == y->w_fp8[i];
      codes += static_cast<int64_t>(x->w_fp8.size());
      for (size_t i = 0; i < x->w_scale.size(); ++i) same_scales += x->w_scale[i] == y->w_scale[i];
      scales += static_cast<int64_t>(x->w_scale.size());
    }
  }
  WARN("identical FP8 codes " << same_codes << "/" << codes << ", scales " << same_scales << "/"
                              << scales);
  CHECK(same_codes == codes);
  CHECK(same_scales == scales);
  const std::vector<int32_t> prompt{1, 4093, 198, 1780, 314, 260, 31469, 3161, 47, 2, 198, 1,
                                    520, 9531, 198};
  CHECK(greedy(from_ckpt, prompt, 16) == greedy(online, prompt, 16));
}

TEST_CASE("quantize refuses what it cannot do, naming the problem", "[quantize][errors]") {
  testing::TempDir dir;
  CHECK_THROWS_WITH(quantize_checkpoint({OCTET_SMOLLM2_GGUF, dir.file("a")}),
                    Catch::Contains("Hugging Face checkpoint directory"));
  const std::string out = dir.file("b");
  quantize_checkpoint({OCTET_HF_SMOLLM2_DIR, out});
  CHECK_THROWS_WITH(quantize_checkpoint({OCTET_HF_SMOLLM2_DIR, out}),
                    Catch::Contains("already holds a checkpoint"));
  CHECK_THROWS_WITH(quantize_checkpoint({out, dir.file("c")}), Catch::Contains("already quantized"));
  CHECK_THROWS_WITH(quantize_checkpoint({dir.file("nonexistent"), dir.file("d")}),
                    Catch::Contains("does not exist"));
  const std::string busy = dir.file("busy");
  std::filesystem::create_directories(busy);
  std::ofstream(busy + "/model.safetensors") << "x";
  CHECK_THROWS_WITH(quantize_checkpoint({OCTET_HF_SMOLLM2_DIR, busy}),
                    Catch::Contains("not an empty directory"));
}

TEST_CASE("FP8 weights without a quantization_config are refused, not run unscaled",
          "[quantize][errors]") {
  testing::TempDir dir;
  const std::string out = dir.file("fp8");
  quantize_checkpoint({OCTET_HF_SMOLLM2_DIR, out});
  nlohmann::json original;
  {
    std::ifstream in(out + "/config.json");
    original = nlohmann::json::parse(in);
  }
  for (const bool drop : {true, false}) {
    nlohmann::json config = original;
    if (drop) {
      config.erase("quantization_config");
    } else {
      config["quantization_config"]["ignore"] = {"re:.*"};  // every module unquantized
    }
    std::ofstream(out + "/config.json") << config.dump();
    const HFCheckpoint ckpt = HFCheckpoint::open(out);
    INFO("drop quantization_config: " << drop);
    CHECK_THROWS_WITH(LlamaModel::load(ckpt), Catch::Contains("is F8_E4M3 but config.json's "
                                                              "quantization_config does not "
                                                              "quantize its module"));
  }
}

// QuantConfig::from_hf_config on the quantization_config llm-compressor really wrote
// (tests/models/golden/llmcompressor_smollm2.json, scripts/make_llmcompressor_checkpoints.py),
// on hand-written compressed-tensors and quant_method "fp8" variants, and on each malformed one
// (the error must be a ModelFileError naming config.json and the offending key or value).
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "models/model_file_error.h"
#include "models/quant_config.h"

using namespace octet;
using nlohmann::json;

namespace {

const char* kPath = "/some/model/config.json";

json golden() {
  std::ifstream f(std::string(OCTET_SOURCE_DIR) +
                  "/tests/models/golden/llmcompressor_smollm2.json");
  REQUIRE(f.good());
  return json::parse(f);
}

/// A config.json holding `q` as quantization_config.
json with_q(const json& q) { return {{"architectures", {"LlamaForCausalLM"}}, {"quantization_config", q}}; }

/// Hand-written compressed-tensors FP8 config: one group "group_0", weights channel, dynamic
/// per-token activations, ignore lm_head.
json ct_config() {
  return json::parse(R"({
    "quant_method": "compressed-tensors", "format": "float-quantized",
    "quantization_status": "compressed", "ignore": ["lm_head"], "kv_cache_scheme": null,
    "config_groups": {"group_0": {
      "targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true,
                  "dynamic": false},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                            "symmetric": true, "dynamic": true}}}})");
}

void expect_error(const json& config, const std::string& needle) {
  try {
    QuantConfig::from_hf_config(config, kPath);
    FAIL("no error (expected '" << needle << "')");
  } catch (const ModelFileError& e) {
    INFO(e.what());
    CHECK(e.path() == kPath);
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

const std::string L0 = "model.layers.0.";

}  // namespace

TEST_CASE("llm-compressor FP8_DYNAMIC quantization_config", "[quant_config]") {
  const json g = golden();
  const json& cfg = g["checkpoints"]["fp8_dynamic"]["config"];
  const QuantConfig q = QuantConfig::from_hf_config(cfg, kPath);
  CHECK(q.quant_method == "compressed-tensors");
  CHECK(q.weights_fp8);
  CHECK(q.weight_granularity == ScaleGranularity::PerRow);
  CHECK(q.activation_scheme == ActivationScheme::DynamicPerToken);
  CHECK(q.targets == std::vector<std::string>{"Linear"});
  CHECK(q.ignore == std::vector<std::string>{"lm_head"});
  CHECK_FALSE(q.kv_cache_scheme.has_value());
  for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                        "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
    CHECK(q.is_quantized(L0 + m));
    CHECK(q.is_quantized("model.layers.29." + std::string(m)));
  }
  CHECK_FALSE(q.is_quantized("lm_head"));
  CHECK_FALSE(q.is_quantized("model.embed_tokens"));
  CHECK_FALSE(q.is_quantized("model.norm"));
  CHECK_FALSE(q.is_quantized(L0 + "input_layernorm"));
}

TEST_CASE("llm-compressor static FP8 quantization_config", "[quant_config]") {
  const json g = golden();
  const QuantConfig q =
      QuantConfig::from_hf_config(g["checkpoints"]["fp8_static"]["config"], kPath);
  CHECK(q.quant_method == "compressed-tensors");
  CHECK(q.weights_fp8);
  CHECK(q.weight_granularity == ScaleGranularity::PerTensor);
  CHECK(q.activation_scheme == ActivationScheme::StaticPerTensor);
  CHECK(q.is_quantized(L0 + "mlp.down_proj"));
  CHECK_FALSE(q.is_quantized("lm_head"));
}

TEST_CASE("no quantization_config is unquantized", "[quant_config]") {
  for (const json& c : {json{{"hidden_size", 8}}, json{{"quantization_config", nullptr}}}) {
    const QuantConfig q = QuantConfig::from_hf_config(c, kPath);
    CHECK(q.quant_method == "none");
    CHECK_FALSE(q.weights_fp8);
    CHECK(q.activation_scheme == ActivationScheme::None);
    CHECK_FALSE(q.is_quantized(L0 + "self_attn.q_proj"));
  }
}

TEST_CASE("compressed-tensors variants", "[quant_config]") {
  SECTION("any group key, several groups with the same scheme") {
    json q = ct_config();
    q["config_groups"] = {{"attention", q["config_groups"]["group_0"]},
                          {"FP8_mlp", q["config_groups"]["group_0"]}};
    q["config_groups"]["attention"]["targets"] = {"re:.*self_attn\\..*_proj$"};
    q["config_groups"]["FP8_mlp"]["targets"] = {"re:.*mlp\\..*_proj$"};
    const QuantConfig c = QuantConfig::from_hf_config(with_q(q), kPath);
    CHECK(c.targets.size() == 2);
    CHECK(c.is_quantized(L0 + "self_attn.v_proj"));
    CHECK(c.is_quantized(L0 + "mlp.up_proj"));
    CHECK_FALSE(c.is_quantized("lm_head"));
  }
  SECTION("weight-only: input_activations null") {
    json q = ct_config();
    q["config_groups"]["group_0"]["input_activations"] = nullptr;
    const QuantConfig c = QuantConfig::from_hf_config(with_q(q), kPath);
    CHECK(c.weights_fp8);
    CHECK(c.activation_scheme == ActivationScheme::None);
  }
  SECTION("per-tensor weights, static per-tensor activations, naive-quantized") {
    json q = ct_config();
    q["format"] = "naive-quantized";
    q["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
    q["config_groups"]["group_0"]["input_activations"]["strategy"] = "tensor";
    q["config_groups"]["group_0"]["input_activations"]["dynamic"] = false;
    const QuantConfig c = QuantConfig::from_hf_config(with_q(q), kPath);
    CHECK(c.weight_granularity == ScaleGranularity::PerTensor);
    CHECK(c.activation_scheme == ActivationScheme::StaticPerTensor);
  }
  SECTION("kv_cache_scheme is kept") {
    json q = ct_config();
    q["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "attn_head"},
                            {"dynamic", false}, {"symmetric", true}};
    const QuantConfig c = QuantConfig::from_hf_config(with_q(q), kPath);
    REQUIRE(c.kv_cache_scheme.has_value());
    CHECK(c.kv_cache_scheme->strategy == "attn_head");
    CHECK(c.kv_cache_scheme->num_bits == 8);
    CHECK(c.kv_cache_scheme->type == "float");
    CHECK_FALSE(c.kv_cache_scheme->dynamic);
    q["kv_cache_scheme"]["strategy"] = "tensor";
    CHECK(QuantConfig::from_hf_config(with_q(q), kPath).kv_cache_scheme->strategy == "tensor");
  }
  SECTION("ignore: exact names and re: regexes anchored at the start (Python re.match)") {
    json q = ct_config();
    q["ignore"] = {"lm_head", "model.layers.2.self_attn.q_proj", "re:.*down_proj",
                   "re:model\\.layers\\.1\\."};
    const QuantConfig c = QuantConfig::from_hf_config(with_q(q), kPath);
    CHECK_FALSE(c.is_quantized("model.layers.2.self_attn.q_proj"));
    CHECK(c.is_quantized("model.layers.2.self_attn.k_proj"));
    CHECK(c.is_quantized("model.layers.12.self_attn.q_proj"));
    CHECK_FALSE(c.is_quantized("model.layers.7.mlp.down_proj"));
    CHECK(c.is_quantized("model.layers.7.mlp.up_proj"));
    CHECK_FALSE(c.is_quantized("model.layers.1.mlp.up_proj"));
    CHECK(c.is_quantized("model.layers.11.mlp.up_proj"));  // "1\." does not match "11."
    CHECK_FALSE(c.is_quantized("lm_head"));
  }
  SECTION("lm_head is quantized when not ignored") {
    json q = ct_config();
    q["ignore"] = json::array();
    CHECK(QuantConfig::from_hf_config(with_q(q), kPath).is_quantized("lm_head"));
  }
}

TEST_CASE("quant_method fp8 (HF / vLLM Fp8Config)", "[quant_config]") {
  SECTION("dynamic") {
    const QuantConfig c = QuantConfig::from_hf_config(
        with_q({{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}}), kPath);
    CHECK(c.quant_method == "fp8");
    CHECK(c.weights_fp8);
    CHECK(c.weight_granularity == ScaleGranularity::PerTensor);
    CHECK(c.activation_scheme == ActivationScheme::DynamicPerToken);
    CHECK(c.is_quantized(L0 + "mlp.gate_proj"));
    CHECK_FALSE(c.is_quantized("lm_head"));
  }
  SECTION("static with ignored_layers and modules_to_not_convert") {
    const QuantConfig c = QuantConfig::from_hf_config(
        with_q({{"quant_method", "fp8"},
                {"activation_scheme", "static"},
                {"ignored_layers", {"model.layers.0.mlp.down_proj"}},
                {"modules_to_not_convert", {"model.layers.1.mlp.down_proj"}}}),
        kPath);
    CHECK(c.activation_scheme == ActivationScheme::StaticPerTensor);
    CHECK_FALSE(c.is_quantized("model.layers.0.mlp.down_proj"));
    CHECK_FALSE(c.is_quantized("model.layers.1.mlp.down_proj"));
    CHECK(c.is_quantized("model.layers.2.mlp.down_proj"));
  }
  SECTION("block-wise is refused") {
    expect_error(with_q({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}}),
                 "block-wise fp8 not supported");
  }
  SECTION("unknown activation_scheme") {
    expect_error(with_q({{"quant_method", "fp8"}, {"activation_scheme", "smooth"}}),
                 "activation_scheme 'smooth'");
  }
}

TEST_CASE("malformed quantization_config is a clear error", "[quant_config][errors]") {
  SECTION("unknown quant_method") {
    expect_error(with_q({{"quant_method", "awq"}, {"bits", 4}}), "unknown quant_method 'awq'");
  }
  SECTION("missing quant_method") { expect_error(with_q({{"format", "x"}}), "quant_method"); }
  SECTION("unknown weight strategy") {
    for (const char* s : {"group", "block", "tensor_group", "banana"}) {
      json q = ct_config();
      q["config_groups"]["group_0"]["weights"]["strategy"] = s;
      expect_error(with_q(q), "weights.strategy '" + std::string(s) + "' is not supported");
    }
  }
  SECTION("config group without targets") {
    json q = ct_config();
    q["config_groups"]["group_0"].erase("targets");
    expect_error(with_q(q), "config group 'group_0' has no targets");
    q["config_groups"]["group_0"]["targets"] = json::array();
    expect_error(with_q(q), "config group 'group_0' has no targets");
  }
  SECTION("num_bits 4") {
    json q = ct_config();
    q["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
    expect_error(with_q(q), "config_groups.group_0.weights.num_bits 4 is not supported");
    q = ct_config();
    q["config_groups"]["group_0"]["input_activations"]["num_bits"] = 4;
    expect_error(with_q(q), "input_activations.num_bits 4");
  }
  SECTION("int weights") {
    json q = ct_config();
    q["config_groups"]["group_0"]["weights"]["type"] = "int";
    expect_error(with_q(q), "weights.type 'int'");
  }
  SECTION("unsupported format") {
    json q = ct_config();
    q["format"] = "pack-quantized";
    expect_error(with_q(q), "format 'pack-quantized'");
  }
  SECTION("asymmetric weights") {
    json q = ct_config();
    q["config_groups"]["group_0"]["weights"]["symmetric"] = false;
    expect_error(with_q(q), "weights.symmetric false");
  }
  SECTION("activation strategy and dynamic combinations") {
    json q = ct_config();
    q["config_groups"]["group_0"]["input_activations"]["strategy"] = "tensor";  // dynamic tensor
    expect_error(with_q(q), "input_activations.strategy 'tensor' with dynamic true");
    q["config_groups"]["group_0"]["input_activations"]["dynamic"] = "local";
    expect_error(with_q(q), "input_activations.dynamic \"local\"");
  }
  SECTION("groups with different schemes") {
    json q = ct_config();
    q["config_groups"]["group_1"] = q["config_groups"]["group_0"];
    q["config_groups"]["group_1"]["weights"]["strategy"] = "tensor";
    expect_error(with_q(q), "config group 'group_1' uses a different scheme");
  }
  SECTION("no config_groups") {
    json q = ct_config();
    q.erase("config_groups");
    expect_error(with_q(q), "config_groups missing");
  }
  SECTION("bad kv_cache_scheme strategy") {
    json q = ct_config();
    q["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}};
    expect_error(with_q(q), "kv_cache_scheme.strategy 'channel'");
  }
  SECTION("invalid regex") {
    json q = ct_config();
    q["ignore"] = {"re:model.layers.(0"};
    expect_error(with_q(q), "invalid regex");
  }
}

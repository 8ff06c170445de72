// Hostile quantization_config "re:" entries and values (issue 23, item 2): PCRE2 with nesting
// and match limits instead of std::regex. A pattern nested 20,000 deep used to overflow the
// stack (generate and quantize crashed); "re:(.*.*)*Z" backtracked for ever on model loading.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "models/model_file_error.h"
#include "models/quant_config.h"

using namespace octet;
using nlohmann::json;
using Catch::Contains;
using Catch::StartsWith;

namespace {

const char* kPath = "/m/config.json";

json fp8_config(const json& ignored_layers) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"quantization_config",
           {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"},
            {"ignored_layers", ignored_layers}}}};
}

json ct_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"quantization_config", json::parse(R"({
    "quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
    "config_groups": {"group_0": {
      "targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true,
                  "dynamic": false},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                            "symmetric": true, "dynamic": true}}}})")}};
}

std::string parse_error(const json& config) {
  try {
    QuantConfig::from_hf_config(config, kPath);
  } catch (const ModelFileError& e) {
    CHECK(e.path() == kPath);
    return e.what();
  }
  return "";
}

const std::string kQ = "model.layers.0.self_attn.q_proj";

}  // namespace

TEST_CASE("a regex nested 20,000 deep is a parse error, not a stack overflow",
          "[quant_config][hostile]") {
  const std::string nested = "re:" + std::string(20000, '(') + "a" + std::string(20000, ')');
  const std::string prefix = std::string(kPath) + ": quantization_config: ";
  CHECK_THAT(parse_error(fp8_config({nested})),
             StartsWith(prefix + "ignored_layers/modules_to_not_convert: invalid regex '((((") &&
                 Contains("parentheses are too deeply nested (limit 64)"));
  json ct = ct_config();
  ct["quantization_config"]["ignore"] = {nested};
  CHECK_THAT(parse_error(ct), StartsWith(prefix + "ignore: invalid regex"));
  ct = ct_config();
  ct["quantization_config"]["config_groups"]["group_0"]["targets"] = {nested};
  CHECK_THAT(parse_error(ct), StartsWith(prefix + "config_groups.*.targets: invalid regex"));
}

TEST_CASE("catastrophic backtracking stops at the match limit with an error",
          "[quant_config][hostile]") {
  // The issue's pattern: PCRE2 sees that no module name holds a 'Z' and answers at once.
  const QuantConfig z = QuantConfig::from_hf_config(fp8_config({"re:(.*.*)*Z"}), kPath);
  CHECK(z.is_quantized(kQ));
  // Without a required character nothing short-cuts the backtracking: the match limit stops it,
  // and that is an error naming the file, the key and the pattern, never a silent non-match.
  const std::string evil = "re:(?:.*.*)*(?:X|Y)";
  const QuantConfig q = QuantConfig::from_hf_config(fp8_config({evil}), kPath);
  try {
    (void)q.is_quantized(kQ);
    FAIL("no error");
  } catch (const ModelFileError& e) {
    CHECK(e.path() == kPath);
    CHECK_THAT(std::string(e.what()),
               StartsWith(std::string(kPath) + ": quantization_config: ignored_layers/"
                                               "modules_to_not_convert: regex '(?:.*.*)*(?:X|Y)' "
                                               "on '" + kQ + "'") &&
                   Contains("limit"));
  }
}

TEST_CASE("re: entries keep Python re.match semantics on PCRE2", "[quant_config][hostile]") {
  const QuantConfig q = QuantConfig::from_hf_config(
      fp8_config({"re:.*down_proj", "re:model\\.layers\\.1\\.", "re:self_attn",
                  "re:(?i)MODEL\\.LAYERS\\.2\\.mlp\\.up"}),
      kPath);
  CHECK_FALSE(q.is_quantized("model.layers.0.mlp.down_proj"));     // .* from the start
  CHECK_FALSE(q.is_quantized("model.layers.1.self_attn.k_proj"));  // a prefix match suffices
  CHECK(q.is_quantized("model.layers.0.self_attn.k_proj"));        // anchored at the start
  CHECK_FALSE(q.is_quantized("model.layers.2.mlp.up_proj"));       // Python inline flags
  CHECK(q.is_quantized("model.layers.2.mlp.gate_proj"));
  CHECK_FALSE(q.is_quantized("lm_head"));
  // A QuantConfig built by hand (no compiled patterns) matches the same way.
  QuantConfig h = q;
  h.patterns.reset();
  CHECK_FALSE(h.is_quantized("model.layers.0.mlp.down_proj"));
  CHECK(h.is_quantized("model.layers.0.self_attn.k_proj"));
}

TEST_CASE("too many distinct regexes and oversized integers are errors",
          "[quant_config][hostile]") {
  json many = json::array();
  for (size_t i = 0; i <= QuantConfig::kMaxRegexEntries; ++i)
    many.push_back("re:a" + std::to_string(i));
  CHECK_THAT(parse_error(fp8_config(many)), Contains("more than 1024 distinct \"re:\" entries"));
  // The same pattern many times compiles once and is no error.
  CHECK(parse_error(fp8_config(json::array({"re:a", "re:a", "re:a"}))) == "");
  // num_bits 2^32 + 8 used to pass as 8 (get<int> truncation).
  json ct = ct_config();
  ct["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 4294967304ll}, {"type", "float"}};
  CHECK_THAT(parse_error(ct), Contains("kv_cache_scheme.num_bits: must be an integer in [1, 64]"));
  ct = ct_config();
  ct["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 4294967304ll;
  CHECK_THAT(parse_error(ct), Contains("weights.num_bits: must be an integer in [1, 64]"));
  // A deeply nested value in a message is described, not dumped recursively.
  ct = ct_config();
  ct["quantization_config"]["ignore"] =
      json::parse(std::string(300000, '[') + std::string(300000, ']'));
  CHECK_THAT(parse_error(ct), Contains("ignore entries must be strings, got an array of 1"));
}

// ModelConfig::rope_inv_freq against Hugging Face transformers' ROPE_INIT_FUNCTIONS
// (tests/models/golden/rope_reference.json, scripts/make_rope_reference.py).
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "models/model_config.h"

using octet::ModelConfig;
using octet::RopeScaling;

TEST_CASE("rope inverse frequencies match transformers (default, linear, llama3)", "[config]") {
  std::ifstream in(std::string(OCTET_SOURCE_DIR) + "/tests/models/golden/rope_reference.json");
  REQUIRE(in.good());
  const auto cases = nlohmann::json::parse(in);
  REQUIRE(cases.size() == 3);
  for (const auto& c : cases) {
    INFO("case " << c["name"]);
    ModelConfig cfg;
    cfg.head_dim = cfg.rotary_dim = c["head_dim"];
    cfg.rope_theta = c["rope_theta"];
    if (!c["rope_scaling"].is_null()) {
      const auto& s = c["rope_scaling"];
      cfg.rope_scaling.factor = s["factor"];
      if (s["rope_type"] == "linear") {
        cfg.rope_scaling.type = RopeScaling::Type::Linear;
      } else {
        cfg.rope_scaling.type = RopeScaling::Type::Llama3;
        cfg.rope_scaling.low_freq_factor = s["low_freq_factor"];
        cfg.rope_scaling.high_freq_factor = s["high_freq_factor"];
        cfg.rope_scaling.original_max_position_embeddings =
            s["original_max_position_embeddings"];
      }
    }
    const auto expected = c["inv_freq"].get<std::vector<double>>();
    const std::vector<float> got = cfg.rope_inv_freq();
    REQUIRE(got.size() == expected.size());
    // float32 pow vs torch's float32 pow: a few ulps.
    for (size_t i = 0; i < got.size(); ++i)
      CHECK(std::fabs(got[i] - expected[i]) <= 4e-7 * std::fabs(expected[i]));
  }
}

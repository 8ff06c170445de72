// Perplexity on the standard corpus (the GPL-3 text Debian installs): the FP32 reference
// against transformers' value on the same 2048 token ids
// (tests/models/golden/smollm2_perplexity.json, scripts/make_perplexity_reference.py), and
// FP8 W8A8 within 3% of it with a small KL divergence.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/perplexity.h"

using namespace octet;

TEST_CASE("SmolLM2 perplexity: FP32 matches transformers, FP8 within 3%", "[perplexity][fp8]") {
  std::ifstream in(std::string(OCTET_SOURCE_DIR) +
                   "/tests/models/golden/smollm2_perplexity.json");
  REQUIRE(in.good());
  const auto ref = nlohmann::json::parse(in);
  const auto ids = ref["token_ids"].get<std::vector<int32_t>>();
  REQUIRE(ids.size() == 2048);

  PerplexityOptions o;
  o.model = OCTET_SMOLLM2_GGUF;
  o.quantization = "fp8";
  o.compare = true;
  const PerplexityResult r = compute_perplexity_ids(o, ids);
  WARN("perplexity fp32 " << r.reference_perplexity << " (transformers " << ref["perplexity"]
                          << "), fp8 " << r.perplexity << ", KL " << r.kl_divergence
                          << ", top-1 agreement " << r.top1_agreement);
  CHECK(r.tokens == 2048);
  // FP32 vs FP32: logits agree to ~1e-4, so the mean NLL to ~1e-5 relative.
  CHECK(std::fabs(r.reference_perplexity / ref["perplexity"].get<double>() - 1.0) < 1e-4);
  CHECK(r.perplexity / r.reference_perplexity - 1.0 < 0.03);
  CHECK(r.kl_divergence > 0.0);   // FP8 does change the distributions...
  CHECK(r.kl_divergence < 0.1);   // ...but only slightly (nats per token)
  CHECK(r.top1_agreement > 0.8);
}

TEST_CASE("perplexity rejects bad options", "[perplexity][errors]") {
  PerplexityOptions o;
  o.model = OCTET_SMOLLM2_GGUF;
  CHECK_THROWS_AS(compute_perplexity_ids(o, {1}), std::invalid_argument);
  o.quantization = "int3";
  CHECK_THROWS_WITH(compute_perplexity_ids(o, {1, 2, 3}), Catch::Contains("quantization"));
}

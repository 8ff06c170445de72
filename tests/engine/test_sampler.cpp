// Sampler: greedy ties, temperature and top-p against distributions computed in the test.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "engine/sampler.h"

using namespace octet;

TEST_CASE("greedy picks the largest logit, lowest id on ties", "[sampler]") {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  std::mt19937_64 rng(1);
  CHECK(sample_token(logits.data(), 4, p, rng) == 1);
  CHECK(argmax(logits.data(), 4) == 1);
}

TEST_CASE("temperature sampling follows softmax(logits / T)", "[sampler]") {
  // logits ln(1), ln(2), ln(7) at T=1 -> p = 0.1, 0.2, 0.7; at T=0.5 -> 1:4:49 / 54.
  const std::vector<float> logits{0.0f, std::log(2.0f), std::log(7.0f)};
  for (float t : {1.0f, 0.5f}) {
    SamplingParams p;
    p.temperature = t;
    std::mt19937_64 rng(42);
    std::map<int, int> counts;
    const int n = 200000;
    for (int i = 0; i < n; ++i) counts[sample_token(logits.data(), 3, p, rng)]++;
    const double w0 = 1, w1 = std::pow(2.0, 1 / t), w2 = std::pow(7.0, 1 / t), s = w0 + w1 + w2;
    // 5 standard deviations of a binomial proportion at n = 200000 is < 0.005.
    CHECK(std::fabs(counts[0] / double(n) - w0 / s) < 0.005);
    CHECK(std::fabs(counts[1] / double(n) - w1 / s) < 0.005);
    CHECK(std::fabs(counts[2] / double(n) - w2 / s) < 0.005);
  }
}

TEST_CASE("top_p keeps the smallest nucleus reaching the mass", "[sampler]") {
  const std::vector<float> logits{0.0f, std::log(2.0f), std::log(7.0f)};  // 0.1, 0.2, 0.7
  SamplingParams p;
  p.top_p = 0.8f;  // 0.7 < 0.8 -> keep {2, 1}, renormalised to 7/9 and 2/9
  std::mt19937_64 rng(3);
  std::map<int, int> counts;
  const int n = 100000;
  for (int i = 0; i < n; ++i) counts[sample_token(logits.data(), 3, p, rng)]++;
  CHECK(counts[0] == 0);
  CHECK(std::fabs(counts[1] / double(n) - 2.0 / 9.0) < 0.007);
  p.top_p = 0.5f;  // the top token alone reaches it
  for (int i = 0; i < 1000; ++i) REQUIRE(sample_token(logits.data(), 3, p, rng) == 2);
}

TEST_CASE("the same seed gives the same draws; bad params are rejected", "[sampler]") {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 1.3f);
  SamplingParams p;
  std::mt19937_64 a(9), b(9);
  for (int i = 0; i < 50; ++i)
    REQUIRE(sample_token(logits.data(), 100, p, a) == sample_token(logits.data(), 100, p, b));
  SamplingParams bad;
  bad.top_p = 0.0f;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("top_p"));
  bad = SamplingParams{};
  bad.temperature = NAN;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("temperature"));
  bad = SamplingParams{};
  bad.max_tokens = -1;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("max_tokens"));
}

// Sampler: every logits processor against hand-computed numbers, the filter masks, greedy ties,
// raw logprobs / ranks / top-k order, seeded determinism with one random draw per token, and
// sampling frequencies against the distribution computed here (chi-square, fixed seed).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "engine/sampler.h"

using namespace octet;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const std::vector<int32_t> kNone;

/// logits ln(1), ln(2), ln(3), ln(4): softmax at T = 1 is exactly 0.1, 0.2, 0.3, 0.4.
std::vector<float> tenths() {
  return {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
}

std::vector<float> processed(std::vector<float> l, const SamplingParams& p,
                             const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& output,
                             const std::vector<int32_t>& eos) {
  apply_logits_processors(l.data(), static_cast<int64_t>(l.size()), p, prompt, output, eos);
  return l;
}

void check_probs(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("token " << i);
    if (want[i] == 0.0)
      CHECK(got[i] == 0.0);
    else
      CHECK(got[i] == Approx(want[i]).epsilon(1e-6));
  }
}

int32_t draw(const std::vector<float>& l, const SamplingParams& p, std::mt19937_64& rng) {
  return sample(l.data(), static_cast<int64_t>(l.size()), p, kNone, kNone, kNone, rng).token_id;
}

}  // namespace

TEST_CASE("penalties give vLLM's numbers on a 5-token vocabulary", "[sampler]") {
  const std::vector<float> l{2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  const std::vector<int32_t> prompt{0, 1};
  const std::vector<int32_t> output{1, 3, 3, 2};  // counts: 1 -> 1, 2 -> 1, 3 -> 2
  SamplingParams p;
  SECTION("repetition: prompt and output tokens, once each, l > 0 ? l / r : l * r") {
    p.repetition_penalty = 2.0f;
    CHECK(processed(l, p, prompt, output, kNone) ==
          std::vector<float>{1.0f, -2.0f, 0.25f, 1.5f, -2.0f});
  }
  SECTION("frequency: output tokens only, times their count") {
    p.frequency_penalty = 0.5f;
    CHECK(processed(l, p, prompt, output, kNone) ==
          std::vector<float>{2.0f, -1.5f, 0.0f, 2.0f, -2.0f});
  }
  SECTION("presence: output tokens only, once") {
    p.presence_penalty = 0.25f;
    CHECK(processed(l, p, prompt, output, kNone) ==
          std::vector<float>{2.0f, -1.25f, 0.25f, 2.75f, -2.0f});
    p.presence_penalty = -0.5f;  // negative values encourage repeats
    CHECK(processed(l, p, prompt, output, kNone) ==
          std::vector<float>{2.0f, -0.5f, 1.0f, 3.5f, -2.0f});
  }
  SECTION("all three: repetition first, then frequency and presence") {
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    // 1: -1 * 2 - 0.5 - 0.25; 2: 0.5 / 2 - 0.5 - 0.25; 3: 3 / 2 - 1.0 - 0.25.
    CHECK(processed(l, p, prompt, output, kNone) ==
          std::vector<float>{1.0f, -2.75f, -0.5f, 0.25f, -2.0f});
  }
  SECTION("logit_bias is added before the repetition penalty") {
    p.logit_bias = {{4, 5.0f}, {0, 1.0f}};
    CHECK(processed(l, p, prompt, output, kNone) ==
          std::vector<float>{3.0f, -1.0f, 0.5f, 3.0f, 3.0f});
    p.repetition_penalty = 2.0f;  // token 0: (2 + 1) / 2, not 2 / 2 + 1
    CHECK(processed(l, p, prompt, output, kNone) ==
          std::vector<float>{1.5f, -2.0f, 0.25f, 1.5f, 3.0f});
  }
  SECTION("no processor: the logits are untouched and reported so") {
    std::vector<float> copy = l;
    CHECK_FALSE(apply_logits_processors(copy.data(), 5, p, prompt, output, kNone));
    CHECK(copy == l);
  }
  SECTION("ids outside the vocabulary are errors") {
    p.logit_bias = {{5, 1.0f}};
    std::vector<float> copy = l;
    CHECK_THROWS_AS(apply_logits_processors(copy.data(), 5, p, prompt, output, kNone),
                    std::invalid_argument);
    CHECK_THROWS_WITH(validate_token_ids(p, 5), Catch::Contains("logit_bias"));
    p = SamplingParams{};
    p.repetition_penalty = 1.5f;
    CHECK_THROWS_AS(apply_logits_processors(copy.data(), 5, p, {0, 7}, output, kNone),
                    std::out_of_range);
    // A failed call leaves no state behind: the next one gives the plain result.
    CHECK(processed(l, p, {}, {3}, kNone) == std::vector<float>{2.0f, -1.0f, 0.5f, 2.0f, -2.0f});
    p.stop_token_ids = {9};
    CHECK_THROWS_WITH(validate_token_ids(p, 5), Catch::Contains("stop_token_ids"));
    CHECK_NOTHROW(validate_token_ids(p, 10));
    // Logprob counts: up to the whole vocabulary.
    p = SamplingParams{};
    p.logprobs = 10;
    p.prompt_logprobs = 10;
    CHECK_NOTHROW(validate_token_ids(p, 10));
    for (int64_t* k : {&p.logprobs, &p.prompt_logprobs}) {
      *k = 11;
      try {
        validate_token_ids(p, 10);
        FAIL("a count of 11 passed a vocabulary of 10");
      } catch (const RequestError& e) {
        CHECK(e.param() == (k == &p.logprobs ? "logprobs" : "prompt_logprobs"));
        CHECK_THAT(e.what(), Catch::Contains("11") && Catch::Contains("10"));
      }
      *k = 10;
    }
  }
}

TEST_CASE("min_tokens masks EOS and stop_token_ids until enough tokens exist", "[sampler]") {
  const std::vector<float> l{2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  const std::vector<int32_t> eos{3};
  SamplingParams p;
  p.min_tokens = 3;
  p.stop_token_ids = {0};
  CHECK(processed(l, p, {1}, {1, 2}, eos) == std::vector<float>{-kInf, -1.0f, 0.5f, -kInf, -2.0f});
  p.ignore_eos = true;  // vLLM masks the EOS ids regardless
  CHECK(processed(l, p, {1}, {1, 2}, eos)[3] == -kInf);
  CHECK(processed(l, p, {1}, {1, 2, 2}, eos) == l);  // 3 tokens: no longer masked
  // Greedy then picks the best allowed token; the raw logprob is still reported.
  p.temperature = 0.0f;
  p.logprobs = 1;
  std::mt19937_64 rng(1);
  const SampleResult r = sample(l.data(), 5, p, {}, {4}, eos, rng);
  CHECK(r.token_id == 2);
  CHECK(r.rank == 3);
  // Every token masked: an error, not a made-up token.
  const std::vector<float> two{1.0f, 2.0f};
  p.stop_token_ids = {0};
  const SampleResult masked = sample(two.data(), 2, p, {}, {}, {1}, rng);
  CHECK(masked.token_id == -1);
  CHECK_THAT(masked.error, Catch::Contains("-inf"));
}

TEST_CASE("greedy picks the largest processed logit, lowest id on ties, no random draw",
          "[sampler]") {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  std::mt19937_64 rng(1), untouched(1);
  CHECK(draw(logits, p, rng) == 1);
  CHECK(argmax(logits.data(), 4) == 1);
  p.temperature = 0.9e-5f;  // below vLLM's epsilon: still greedy
  CHECK(draw(logits, p, rng) == 1);
  p.repetition_penalty = 1.5f;  // 2 / 1.5 for token 1 (in the output): token 3 wins
  CHECK(sample(logits.data(), 4, p, {}, {1}, kNone, rng).token_id == 3);
  p.repetition_penalty = 1.0f;
  p.logit_bias = {{2, 3.5f}};  // -1 + 3.5 = 2.5
  CHECK(draw(logits, p, rng) == 2);
  CHECK(rng == untouched);
}

TEST_CASE("top_k, top_p and min_p keep the hand-computed sets", "[sampler]") {
  const std::vector<float> l = tenths();  // p = 0.1, 0.2, 0.3, 0.4
  SamplingParams p;
  check_probs(sampling_probs(l.data(), 4, p), {0.1, 0.2, 0.3, 0.4});
  SECTION("top_k") {
    p.top_k = 2;
    check_probs(sampling_probs(l.data(), 4, p), {0, 0, 3.0 / 7, 4.0 / 7});
    p.top_k = 4;
    check_probs(sampling_probs(l.data(), 4, p), {0.1, 0.2, 0.3, 0.4});
    p.top_k = -1;
    check_probs(sampling_probs(l.data(), 4, p), {0.1, 0.2, 0.3, 0.4});
    // Ties at the k-th logit are all kept (vLLM's threshold mask).
    const std::vector<float> tie{1.0f, 2.0f, 2.0f, 0.0f};
    p.top_k = 1;
    check_probs(sampling_probs(tie.data(), 4, p), {0, 0.5, 0.5, 0});
  }
  SECTION("top_p: the most likely tokens while the mass before each is < top_p") {
    p.top_p = 0.65f;  // 0.4 (before: 0), 0.3 (before: 0.4); 0.2 has 0.7 before it
    check_probs(sampling_probs(l.data(), 4, p), {0, 0, 3.0 / 7, 4.0 / 7});
    p.top_p = 0.75f;
    check_probs(sampling_probs(l.data(), 4, p), {0, 2.0 / 9, 3.0 / 9, 4.0 / 9});
    p.top_p = 0.35f;  // the top token alone
    check_probs(sampling_probs(l.data(), 4, p), {0, 0, 0, 1});
    // Exact boundary: a token whose mass before is exactly top_p is dropped; equal
    // probabilities enter the nucleus by id.
    const std::vector<float> flat{0.0f, 0.0f, 0.0f, 0.0f};
    p.top_p = 0.5f;
    check_probs(sampling_probs(flat.data(), 4, p), {0.5, 0.5, 0, 0});
    p.top_p = 0.75f;
    check_probs(sampling_probs(flat.data(), 4, p), {1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
  }
  SECTION("min_p: p < min_p * p_max is dropped, after temperature") {
    p.min_p = 0.6f;  // threshold 0.24
    check_probs(sampling_probs(l.data(), 4, p), {0, 0, 3.0 / 7, 4.0 / 7});
    p.min_p = 0.3f;  // threshold 0.12
    check_probs(sampling_probs(l.data(), 4, p), {0, 2.0 / 9, 3.0 / 9, 4.0 / 9});
    p.temperature = 0.5f;  // p ~ 1, 4, 9, 16: threshold 0.3 * 16 = 4.8
    check_probs(sampling_probs(l.data(), 4, p), {0, 0, 9.0 / 25, 16.0 / 25});
  }
  SECTION("top_p is measured over the min_p / top_k survivors (vLLM's order)") {
    p.min_p = 0.45f;  // keeps 0.2, 0.3, 0.4 -> 2/9, 3/9, 4/9
    p.top_p = 0.75f;  // 4/9, then 3/9 (4/9 before); 2/9 has 7/9 > 0.75 before it
    check_probs(sampling_probs(l.data(), 4, p), {0, 0, 3.0 / 7, 4.0 / 7});
    p.min_p = 0.0f;
    p.top_k = 3;
    check_probs(sampling_probs(l.data(), 4, p), {0, 0, 3.0 / 7, 4.0 / 7});
  }
  SECTION("masked (-inf) tokens never survive") {
    const std::vector<float> masked{-kInf, 0.0f, -kInf, 0.0f};
    check_probs(sampling_probs(masked.data(), 4, p), {0, 0.5, 0, 0.5});
    const std::vector<float> none{-kInf, -kInf};
    CHECK_THROWS_AS(sampling_probs(none.data(), 2, p), std::runtime_error);
  }
  SECTION("a large vocabulary takes the partial-selection path of top_p") {
    // 1000 tokens with p_i ~ 0.99^i: the nucleus is the first n tokens with the mass before
    // the n-th below top_p. 0.9 -> ~230 tokens (2 selection chunks), 0.99 -> ~460 (3).
    std::vector<float> big(1000);
    for (int i = 0; i < 1000; ++i) big[i] = static_cast<float>(i * std::log(0.99));
    for (float top_p : {0.9f, 0.99f}) {
      p.top_p = top_p;
      const std::vector<double> probs = sampling_probs(big.data(), 1000, p);
      double total = 0.0, before = 0.0;
      int expected_n = 0;
      for (int i = 0; i < 1000; ++i) total += std::pow(0.99, i);
      for (int i = 0; i < 1000 && before < top_p * total; ++i, ++expected_n)
        before += std::pow(0.99, i);
      int n = 0;
      for (double q : probs) n += q > 0;
      INFO("top_p " << top_p);
      CHECK(n == expected_n);
      CHECK(expected_n > 64);
      CHECK(probs[0] == Approx(1.0 / before).epsilon(1e-5));
      CHECK(probs[expected_n - 1] > 0);
      CHECK(probs[expected_n] == 0);
    }
  }
}

TEST_CASE("logprobs are the raw log-softmax with ranks and an ordered top-k", "[sampler]") {
  const std::vector<float> l = tenths();
  const SampleResult r = logprobs_for(l.data(), 4, 1, 3);
  CHECK(r.token_id == 1);
  CHECK(r.logprob == Approx(std::log(0.2)).epsilon(1e-6));
  CHECK(r.rank == 3);
  REQUIRE(r.top_logprobs.size() == 3);
  const int32_t ids[] = {3, 2, 1};
  const double probs[] = {0.4, 0.3, 0.2};
  for (int i = 0; i < 3; ++i) {
    CHECK(r.top_logprobs[i].token_id == ids[i]);
    CHECK(r.top_logprobs[i].logprob == Approx(std::log(probs[i])).epsilon(1e-6));
    CHECK(r.top_logprobs[i].rank == i + 1);
  }
  // Ties: lower id first, in the rank and in the list.
  const std::vector<float> tie{1.0f, 3.0f, 3.0f, 0.0f, 3.0f};
  const SampleResult t = logprobs_for(tie.data(), 5, 2, 5);
  CHECK(t.rank == 2);
  std::vector<int32_t> order;
  for (const TokenLogprob& x : t.top_logprobs) order.push_back(x.token_id);
  CHECK(order == std::vector<int32_t>{1, 2, 4, 0, 3});
  // log-softmax of {1, 3, 3, 0, 3} by hand: lse = ln(e + 3 e^3 + 1).
  const double lse = std::log(std::exp(1.0) + 3 * std::exp(3.0) + 1.0);
  CHECK(t.logprob == Approx(3.0 - lse).epsilon(1e-6));
  CHECK(t.top_logprobs[3].logprob == Approx(1.0 - lse).epsilon(1e-6));
  CHECK(logprobs_for(tie.data(), 5, 3, 0).top_logprobs.empty());
  CHECK(logprobs_for(tie.data(), 5, 3, 0).rank == 5);
  CHECK(logprobs_for(tie.data(), 5, 0, 99).top_logprobs.size() == 5);
  CHECK_THAT(logprobs_for(tie.data(), 5, 5, 1).error, Catch::Contains("outside the vocabulary"));
  // Large logits: no overflow (max subtracted first).
  const std::vector<float> big{1000.0f, 1000.0f};
  CHECK(logprobs_for(big.data(), 2, 0, 0).logprob == Approx(-std::log(2.0)).epsilon(1e-6));
}

TEST_CASE("top logprobs of any k up to the whole vocabulary", "[sampler]") {
  // 3000 logits with many ties (one decimal), every tenth token masked by a grammar bitmask:
  // the list is the k most likely unmasked tokens by logit descending then id ascending (a
  // plain sort here), below and above the sampler's inline-list size, up to the whole
  // vocabulary.
  const int64_t vocab = 3000;
  std::mt19937_64 rng(11);
  std::vector<float> l(static_cast<size_t>(vocab));
  for (float& x : l) x = std::round(static_cast<float>(rng() % 200) - 100.0f) / 10.0f;
  std::vector<int32_t> mask(static_cast<size_t>((vocab + 31) / 32), -1);
  std::vector<int32_t> order;
  for (int32_t i = 0; i < vocab; ++i) {
    if (i % 10 == 0) {
      mask[static_cast<size_t>(i / 32)] &= ~(int32_t{1} << (i % 32));
      continue;
    }
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  const double mx = l[static_cast<size_t>(order[0])];
  double sum = 0.0;
  for (int32_t i : order) sum += std::exp(static_cast<double>(l[static_cast<size_t>(i)]) - mx);
  const double lse = mx + std::log(sum);  // over the unmasked tokens only
  for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{32}, int64_t{33}, int64_t{500},
                    int64_t{2699}, int64_t{2700}, vocab}) {
    INFO("k " << k);
    SamplingParams p;
    p.temperature = 0.0f;
    p.logprobs = k;
    std::mt19937_64 unused(0);
    const SampleResult r = sample(l.data(), vocab, p, kNone, kNone, kNone, unused, mask.data());
    REQUIRE(r.ok());
    CHECK(r.token_id == order[0]);
    CHECK(r.rank == 1);
    const size_t want = static_cast<size_t>(std::min<int64_t>(k, 2700));
    REQUIRE(r.top_logprobs.size() == want);
    for (size_t i = 0; i < want; ++i) {
      INFO("entry " << i);
      CHECK(r.top_logprobs[i].token_id == order[i]);
      CHECK(r.top_logprobs[i].rank == static_cast<int64_t>(i) + 1);
      CHECK(r.top_logprobs[i].logprob ==
            Approx(static_cast<double>(l[static_cast<size_t>(order[i])]) - lse).margin(1e-5));
    }
  }
  // Without a mask, k beyond the vocabulary lists it all.
  CHECK(logprobs_for(l.data(), vocab, 1, vocab + 5).top_logprobs.size() ==
        static_cast<size_t>(vocab));
  // Worst case for a kept-sorted list: ascending logits, every one a new maximum.
  std::vector<float> up(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) up[static_cast<size_t>(i)] = static_cast<float>(i) * 1e-3f;
  const SampleResult u = logprobs_for(up.data(), vocab, 0, vocab);
  REQUIRE(u.top_logprobs.size() == static_cast<size_t>(vocab));
  CHECK(u.top_logprobs.front().token_id == vocab - 1);
  CHECK(u.top_logprobs.back().token_id == 0);
  CHECK(u.rank == vocab);
  CHECK(u.top_logprobs.back().logprob == u.logprob);
}

TEST_CASE("sample() reports raw logprobs, not the processed ones", "[sampler]") {
  const std::vector<float> l = tenths();
  SamplingParams p;
  p.temperature = 0.3f;
  p.top_k = 1;
  p.logit_bias = {{0, 9.0f}};  // the bias makes the least likely raw token the only top-1
  p.logprobs = 2;
  std::mt19937_64 rng(5);
  const SampleResult r = sample(l.data(), 4, p, {}, {}, {}, rng);
  CHECK(r.token_id == 0);
  CHECK(r.logprob == Approx(std::log(0.1)).epsilon(1e-6));
  CHECK(r.rank == 4);
  REQUIRE(r.top_logprobs.size() == 2);
  CHECK(r.top_logprobs[0].token_id == 3);
  CHECK(r.top_logprobs[1].token_id == 2);
  p.logprobs = -1;  // none requested: left empty
  const SampleResult none = sample(l.data(), 4, p, {}, {}, {}, rng);
  CHECK(none.token_id == 0);
  CHECK(none.logprob == 0.0f);
  CHECK(none.rank == 0);
  CHECK(none.top_logprobs.empty());
}

TEST_CASE("seeded sampling: same seed same tokens, one draw per token", "[sampler]") {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 1.3f) * 3.0f;
  SamplingParams p;
  p.temperature = 0.8f;
  std::mt19937_64 a(9), b(9), c(10);
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    const int32_t x = draw(logits, p, a);
    REQUIRE(x == draw(logits, p, b));
    differ += x != draw(logits, p, c);
  }
  CHECK(differ > 50);

  // Each non-greedy token takes exactly one rng() output, whatever the filters.
  for (auto set : {0, 1, 2, 3}) {
    SamplingParams q;
    if (set == 1) q.top_k = 5;
    if (set == 2) q.top_p = 0.3f;
    if (set == 3) q.min_p = 0.5f, q.repetition_penalty = 1.3f;
    std::mt19937_64 rng(77), ref(77);
    for (int i = 0; i < 25; ++i)
      sample(logits.data(), 100, q, {1, 2}, {3}, {0}, rng);
    ref.discard(25);
    CHECK(rng == ref);
  }

  // Different filters that leave the same set draw the same token from the same seed.
  const std::vector<float> l = tenths();  // {2, 3} survive each of these
  SamplingParams k2, p65, m6;
  k2.top_k = 2;
  p65.top_p = 0.65f;
  m6.min_p = 0.6f;
  std::map<int32_t, int> seen;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    std::mt19937_64 r1(seed), r2(seed), r3(seed), r4(seed);
    const int32_t t = draw(l, k2, r1);
    REQUIRE(t == draw(l, p65, r2));
    REQUIRE(t == draw(l, m6, r3));
    // The draw is the inverse CDF of u = top 53 bits of one rng() over ids ascending.
    const double u = uniform_from(r4);
    REQUIRE(t == (u < 3.0 / 7.0 ? 2 : 3));
    seen[t]++;
  }
  CHECK(seen.size() == 2);
}

TEST_CASE("temperature sampling frequencies pass a chi-square test", "[sampler]") {
  // Fixed seed, so the statistic is deterministic; the bound is the 0.1% critical value.
  const std::vector<float> logits{1.0f, 0.0f, -0.5f, 2.0f, 0.3f, -1.0f};
  const int n = 60000;
  struct Case {
    float temperature, top_p, min_p;
    int64_t top_k;
    double chi2_bound;  // chi-square 0.999 quantile for (survivors - 1) degrees of freedom
  };
  for (const Case& c : {Case{1.0f, 1.0f, 0.0f, 0, 20.52}, Case{0.5f, 1.0f, 0.0f, 0, 20.52},
                        Case{2.0f, 1.0f, 0.0f, 4, 16.27}, Case{1.0f, 0.8f, 0.0f, 0, 13.82},
                        Case{0.7f, 1.0f, 0.08f, 0, 13.82}}) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.top_k = c.top_k;
    // Reference distribution by hand: exp(l / T), then the filters as documented.
    std::vector<double> w(6);
    for (int i = 0; i < 6; ++i) w[i] = std::exp(logits[i] / c.temperature);
    const double wmax = *std::max_element(w.begin(), w.end());
    for (double& x : w) x = x < c.min_p * wmax ? 0.0 : x;
    std::vector<int> order{3, 0, 4, 1, 2, 5};  // logits descending
    for (size_t j = (c.top_k > 0 ? c.top_k : 6); j < 6; ++j) w[order[j]] = 0;
    double total = 0.0;
    for (double x : w) total += x;
    double before = 0.0;
    for (int idx : order) {
      if (before >= c.top_p * total) w[idx] = 0;
      before += w[idx];
    }
    total = 0.0;
    int survivors = 0;
    for (double x : w) total += x, survivors += x > 0;
    std::mt19937_64 rng(2024);
    std::vector<int> counts(6, 0);
    for (int i = 0; i < n; ++i) counts[draw(logits, p, rng)]++;
    double chi2 = 0.0;
    for (int i = 0; i < 6; ++i) {
      INFO("T " << c.temperature << " token " << i);
      if (w[i] == 0) {
        CHECK(counts[i] == 0);
        continue;
      }
      const double e = n * w[i] / total;
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    INFO("T " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p << " min_p "
              << c.min_p << " survivors " << survivors << " chi2 " << chi2);
    CHECK(survivors >= 3);
    CHECK(chi2 < c.chi2_bound);
  }
}

TEST_CASE("SamplingParams::validate names the bad field", "[sampler]") {
  const auto expect = [](auto set, const char* field) {
    SamplingParams p;
    set(p);
    INFO(field);
    CHECK_THROWS_WITH(p.validate(), Catch::Contains(field));
  };
  CHECK_NOTHROW(SamplingParams{}.validate());
  expect([](SamplingParams& p) { p.temperature = NAN; }, "temperature");
  expect([](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  expect([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  expect([](SamplingParams& p) { p.top_p = 1.01f; }, "top_p");
  expect([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  expect([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  expect([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
  expect([](SamplingParams& p) { p.frequency_penalty = -2.5f; }, "frequency_penalty");
  expect([](SamplingParams& p) { p.frequency_penalty = NAN; }, "frequency_penalty");
  expect([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  // The 1e-40 (logits / 1e-40 overflow to inf), and the bounds [0.01, 100].
  expect([](SamplingParams& p) { p.repetition_penalty = 1e-40f; }, "repetition_penalty");
  expect([](SamplingParams& p) { p.repetition_penalty = 0.0099f; }, "repetition_penalty");
  expect([](SamplingParams& p) { p.repetition_penalty = 100.5f; }, "repetition_penalty");
  expect([](SamplingParams& p) { p.repetition_penalty = NAN; }, "repetition_penalty");
  expect([](SamplingParams& p) { p.logit_bias = {{3, 100.5f}}; }, "logit_bias");
  expect([](SamplingParams& p) { p.logit_bias = {{3, -1e30f}}; }, "logit_bias");
  expect([](SamplingParams& p) { p.top_k = int64_t{1} << 31; }, "top_k");
  expect([](SamplingParams& p) { p.min_p = NAN; }, "min_p");
  expect([](SamplingParams& p) { p.temperature = INFINITY; }, "temperature");
  expect([](SamplingParams& p) { p.logit_bias = {{3, INFINITY}}; }, "logit_bias");
  expect([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias");
  expect([](SamplingParams& p) { p.max_tokens = -1; }, "max_tokens");
  expect([](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens");
  expect([](SamplingParams& p) { p.min_tokens = 17; }, "min_tokens");  // > max_tokens 16
  expect([](SamplingParams& p) { p.stop_token_ids = {-3}; }, "stop_token_ids");
  expect([](SamplingParams& p) { p.stop = {"ok", ""}; }, "stop");
  expect([](SamplingParams& p) { p.logprobs = -2; }, "logprobs");
  expect([](SamplingParams& p) { p.prompt_logprobs = -2; }, "prompt_logprobs");
  // Caps on the per-token work a request adds (issue 9, F1): one over each bound fails.
  expect([](SamplingParams& p) { p.stop.assign(kMaxStopStrings + 1, "x"); }, "stop");
  expect([](SamplingParams& p) { p.stop = {std::string(kMaxStopStringBytes + 1, 'x')}; },
         "stop");
  expect([](SamplingParams& p) { p.stop_token_ids.assign(kMaxStopTokenIds + 1, 2); },
         "stop_token_ids");
  expect([](SamplingParams& p) {
    for (size_t i = 0; i <= kMaxLogitBiasEntries; ++i)
      p.logit_bias.emplace_back(static_cast<int32_t>(i), 1.0f);
  }, "logit_bias");
  SamplingParams ok;
  ok.repetition_penalty = 0.01f;
  CHECK_NOTHROW(ok.validate());
  ok.repetition_penalty = 100.0f;
  ok.logit_bias = {{0, -100.0f}, {1, 100.0f}};
  ok.top_k = 2147483647;
  CHECK_NOTHROW(ok.validate());
  ok.top_k = -1;
  ok.min_p = 1.0f;
  ok.presence_penalty = -2.0f;
  ok.logprobs = 151936;  // any count: the vocabulary bounds it (validate_token_ids)
  ok.prompt_logprobs = 151936;
  ok.min_tokens = 16;
  CHECK_NOTHROW(ok.validate());
  ok.stop.assign(kMaxStopStrings, std::string(kMaxStopStringBytes, 'x'));
  ok.stop_token_ids.assign(kMaxStopTokenIds, 2);
  CHECK_NOTHROW(ok.validate());
}

/// CPU time of this thread (not wall time: the build machines are shared).
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

TEST_CASE("sampler cost on a 49152-token vocabulary", "[.][bench]") {
  // Prints CPU microseconds per call; not a timed test (run: test_sampler "[bench]").
  const int64_t vocab = 49152;
  std::vector<float> logits(vocab);
  std::mt19937_64 gen(1);
  std::normal_distribution<float> nd(0.0f, 2.5f);
  for (float& x : logits) x = nd(gen);
  logits[123] = 15.0f;
  std::vector<int32_t> prompt(512), output(128);
  for (auto& id : prompt) id = static_cast<int32_t>(gen() % vocab);
  for (auto& id : output) id = static_cast<int32_t>(gen() % vocab);
  struct Named {
    const char* name;
    SamplingParams p;
  };
  std::vector<Named> cases(7);
  cases[0].name = "greedy";
  cases[0].p.temperature = 0.0f;
  cases[1].name = "T=1";
  cases[2].name = "T=0.7 top_k=50";
  cases[2].p.temperature = 0.7f;
  cases[2].p.top_k = 50;
  cases[3].name = "T=0.7 top_p=0.9";
  cases[3].p.temperature = 0.7f;
  cases[3].p.top_p = 0.9f;
  cases[4].name = "T=1 min_p=0.05";
  cases[4].p.min_p = 0.05f;
  cases[5].name = "T=1 penalties (512 prompt, 128 output)";
  cases[5].p.repetition_penalty = 1.1f;
  cases[5].p.frequency_penalty = 0.3f;
  cases[5].p.presence_penalty = 0.3f;
  cases[6].name = "T=1 logprobs=5";
  cases[6].p.logprobs = 5;
  std::mt19937_64 rng(3);
  for (const Named& c : cases) {
    const int reps = 200;
    const SampleResult first = sample(logits.data(), vocab, c.p, prompt, output, {0}, rng);
    // Logit 15 at id 123 against N(0, 2.5) elsewhere: greedy must pick it, and every
    // sampled id must be a vocabulary id.
    if (c.p.temperature == 0.0f) CHECK(first.token_id == 123);
    const double t0 = thread_cpu_us();
    int32_t bad = 0;
    for (int i = 0; i < reps; ++i) {
      const int32_t id = sample(logits.data(), vocab, c.p, prompt, output, {0}, rng).token_id;
      bad += id < 0 || id >= vocab;
    }
    const double us = (thread_cpu_us() - t0) / reps;
    CHECK(bad == 0);
    std::printf("%-42s %8.1f us\n", c.name, us);
  }
}

TEST_CASE("the sampler returns an error, never throws, when no token can be sampled",
          "[sampler]") {
  std::mt19937_64 rng(7);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams random;  // T = 1
  SamplingParams filtered;
  filtered.top_k = 2;
  filtered.top_p = 0.5f;
  filtered.min_p = 0.1f;
  filtered.logprobs = 2;
  const std::vector<float> all_masked{-kInf, -kInf, -kInf, -kInf};
  const std::vector<float> nan_row{0.5f, NAN, 1.0f, 0.0f};
  const std::vector<float> nan_first{NAN, 0.5f, 1.0f, 0.0f};  // max_value starts at x[0]
  const std::vector<float> inf_row{0.5f, 1.0f, kInf, 0.0f};
  for (const SamplingParams* p : {&greedy, &random, &filtered}) {
    INFO("temperature " << p->temperature << " top_k " << p->top_k);
    SampleResult r;
    REQUIRE_NOTHROW(r = sample(all_masked.data(), 4, *p, kNone, kNone, kNone, rng));
    CHECK(r.token_id == -1);
    CHECK(!r.ok());
    for (const std::vector<float>* row : {&nan_row, &nan_first, &inf_row}) {
      REQUIRE_NOTHROW(r = sample(row->data(), 4, *p, kNone, kNone, kNone, rng));
      CHECK(r.token_id == -1);
      CHECK_THAT(r.error, Catch::Contains("non-finite"));
    }
    // A masked row made by min_tokens (every token a stop token) is the same error.
    SamplingParams q = *p;
    q.min_tokens = 1;
    q.max_tokens = 3;
    q.stop_token_ids = {0, 1, 2};
    const std::vector<float> ok{0.5f, 1.0f, 2.0f, 0.0f};
    REQUIRE_NOTHROW(r = sample(ok.data(), 4, q, kNone, kNone, {3}, rng));
    CHECK(r.token_id == -1);
    CHECK_THAT(r.error, Catch::Contains("-inf"));
    // Ids outside the vocabulary: an error, not std::out_of_range.
    q = *p;
    q.logit_bias = {{9, 1.0f}};
    REQUIRE_NOTHROW(r = sample(ok.data(), 4, q, kNone, kNone, kNone, rng));
    CHECK_THAT(r.error, Catch::Contains("logit_bias token id 9"));
    q = *p;
    q.repetition_penalty = 1.5f;
    REQUIRE_NOTHROW(r = sample(ok.data(), 4, q, {1, 4}, kNone, kNone, rng));
    CHECK_THAT(r.error, Catch::Contains("prompt token id 4"));
    // A finite but huge logit that the (validated) repetition penalty pushes past FLT_MAX.
    q = *p;
    q.repetition_penalty = 0.01f;
    const std::vector<float> huge{1e37f, 1.0f, 0.0f, 2.0f};
    REQUIRE_NOTHROW(r = sample(huge.data(), 4, q, {0}, kNone, kNone, rng));
    CHECK(r.token_id == -1);
    CHECK_THAT(r.error, Catch::Contains("non-finite"));
    // Still a token for a normal row.
    r = sample(ok.data(), 4, *p, kNone, kNone, kNone, rng);
    CHECK(r.ok());
    CHECK(r.token_id >= 0);
  }
  CHECK_THAT(logprobs_for(nan_row.data(), 4, 0, 2).error, Catch::Contains("non-finite"));
  CHECK(logprobs_for(all_masked.data(), 4, 0, 2).error.size() > 0);
}

// Sampling on the backend (Backend::sample_rows, kernels/common/sampling.h) draws the token the
// host sampler (engine/sampler.h sample()) draws for the same row, parameters and uniform:
//   - the CPU reference's weights equal sampling_probs()' distribution bit for bit, and its
//     token equals sample()'s over a grid of temperatures, top_k, top_p, min_p, vocabularies
//     (1 to 128256 tokens) and logit shapes (ties, flat rows, peaked rows);
//   - a step with a plan (ModelRunner::execute) returns device tokens for the rows it samples
//     and the logits of the others only, and those tokens are sample()'s of the full logits;
//   - an Engine that samples on the backend (OCTET_DEVICE_SAMPLING=1, the CPU reference) gives
//     the tokens of one that samples on the host, seeded requests included.
// The CUDA kernel is compared with the CPU reference in test_backend_ops ("sample_rows").
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine_test_support.h"
#include "kernels/cpu/sample_rows.h"
#include "test_model_paths.h"

namespace octet {
namespace {

/// Sets an environment variable for a scope, restoring it after.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  const char* name_;
  bool had_ = false;
  std::string old_;
};

/// A row of logits of one of several shapes.
std::vector<float> make_row(int64_t vocab, int shape, std::mt19937_64& rng) {
  std::vector<float> x(static_cast<size_t>(vocab));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) {
    switch (shape) {
      case 0: v = normal(rng) * 3.0f; break;                        // typical
      case 1: v = normal(rng) * 0.05f; break;                       // nearly flat
      case 2: v = std::round(normal(rng) * 2.0f) * 0.5f; break;     // many ties
      default: v = normal(rng) * 12.0f - 40.0f; break;              // peaked, far below 0
    }
  }
  if (shape == 3) x[static_cast<size_t>(rng() % static_cast<uint64_t>(vocab))] = 30.0f;
  return x;
}

SamplingParams sampling(float temperature, int64_t top_k, float top_p, float min_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

}  // namespace

TEST_CASE("device sampling: the reference's weights are sampling_probs' and its token sample()'s",
          "[engine][sampler]") {
  std::mt19937_64 rng(20261205);
  int64_t draws = 0, distinct_top_p = 0;
  for (int64_t vocab : {1, 7, 255, 256, 257, 1000, 49152, 128256}) {
    const bool big = vocab > 1000;
    for (int shape = 0; shape < 4; ++shape) {
      const std::vector<float> x = make_row(vocab, shape, rng);
      for (float t : {0.3f, 1.0f, 1.7f})
        for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{50}, vocab - 1, vocab,
                          vocab + 5})
          for (float top_p : {1.0f, 0.95f, 0.5f, 0.05f})
            for (float min_p : {0.0f, 0.1f}) {
              if (big && (k == 1 || k == vocab + 5 || t == 1.7f || min_p > 0.0f)) continue;
              CAPTURE(vocab, shape, t, k, top_p, min_p);
              const SamplingParams sp = sampling(t, k, top_p, min_p);
              const double u = uniform_from(rng);
              const SampleRowParams p = device_sample_params(sp, u);
              REQUIRE(p.mode == SampleRowParams::kSample);
              // The distribution: the same weights, so the same probabilities bit for bit.
              std::vector<float> w;
              sample_row_weights(x.data(), vocab, p, w);
              double total = 0.0;
              for (float v : w) total += v;
              const std::vector<double> probs = sampling_probs(x.data(), vocab, sp);
              int64_t mismatches = 0;
              for (int64_t i = 0; i < vocab; ++i)
                mismatches += probs[static_cast<size_t>(i)] != w[static_cast<size_t>(i)] / total;
              REQUIRE(mismatches == 0);
              // The token, for this u and at the edges of [0, 1).
              for (double uu : {u, 0.0, std::nextafter(1.0, 0.0)}) {
                SampleRowParams q = p;
                q.u = uu;
                const SampleResult host = sample(x.data(), vocab, sp, {}, {}, {}, uu);
                REQUIRE(host.ok());
                REQUIRE(sample_row_reference(x.data(), vocab, q) == host.token_id);
                ++draws;
              }
              if (top_p < 1.0f && k == 0) ++distinct_top_p;
            }
    }
  }
  CHECK(draws > 3000);
  CHECK(distinct_top_p > 100);
}

TEST_CASE("device sampling: logits processors as LogitEdits give sample()'s token and errors",
          "[engine][sampler]") {
  std::mt19937_64 rng(99);
  const std::vector<int32_t> eos = {2};
  int64_t checked = 0;
  for (int64_t vocab : {3, 64, 1000, 32000}) {
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
    for (int trial = 0; trial < 40; ++trial) {
      CAPTURE(vocab, trial);
      const std::vector<float> x = make_row(vocab, trial % 4, rng);
      SamplingParams sp = sampling(trial % 5 == 0 ? 0.0f : 0.9f, trial % 3 == 0 ? 8 : 0,
                                   trial % 2 ? 0.9f : 1.0f, 0.0f);
      std::vector<int32_t> prompt(static_cast<size_t>(1 + trial % 9)), output;
      for (int32_t& t : prompt) t = id(rng);
      for (int k = 0; k < trial % 13; ++k) output.push_back(id(rng));
      if (trial % 4 == 1) sp.repetition_penalty = 1.0f + 0.1f * static_cast<float>(trial % 7);
      if (trial % 4 == 2) sp.frequency_penalty = 0.3f * static_cast<float>(trial % 5);
      if (trial % 3 == 2) sp.presence_penalty = -0.5f;
      if (trial % 5 == 3) {
        const int32_t a = id(rng);
        sp.logit_bias = {{a, 5.0f}, {static_cast<int32_t>((a + 1) % vocab), -3.0f}};
      }
      if (trial % 6 == 4) {
        sp.min_tokens = 100;
        sp.stop_token_ids = {id(rng)};
      }
      std::vector<LogitEdit> edits = {LogitEdit{}};  // an unrelated row's edit first
      const int64_t n = append_logit_edits(sp, vocab, prompt, output, eos, 1 << 20, edits);
      REQUIRE(n >= 0);
      REQUIRE(static_cast<int64_t>(edits.size()) == 1 + n);
      std::vector<int32_t> tokens;
      for (size_t k = 1; k < edits.size(); ++k) tokens.push_back(edits[k].token);
      std::sort(tokens.begin(), tokens.end());
      CHECK(std::adjacent_find(tokens.begin(), tokens.end()) == tokens.end());  // one per token
      // The edits make apply_logits_processors' row, bit for bit.
      std::vector<float> processed = x, edited = x;
      apply_logits_processors(processed.data(), vocab, sp, prompt, output, eos);
      for (size_t k = 1; k < edits.size(); ++k)
        edited[edits[k].token] = sampling_math::apply_edit(edited[edits[k].token], edits[k]);
      REQUIRE(testing::first_difference(processed.data(), edited.data(), vocab) == -1);
      const double u = uniform_from(rng);
      SampleRowParams p = device_sample_params(sp, u);
      p.edit_begin = 1;
      p.edit_count = static_cast<int32_t>(n);
      const SampleResult host = sample(x.data(), vocab, sp, prompt, output, eos, u);
      const int32_t device = sample_row_reference(x.data(), vocab, p, edits.data());
      CHECK(device == (host.ok() ? host.token_id : kSampleNonFinite));
      ++checked;
    }
  }
  CHECK(checked == 160);
  // Errors: every token masked (vocab 2: EOS 0, stop 1), and a bias to +inf.
  const std::vector<float> x = {1.0f, 2.0f};
  SamplingParams sp = sampling(1.0f, 0, 1.0f, 0.0f);
  sp.min_tokens = 5;
  sp.stop_token_ids = {1};
  std::vector<LogitEdit> edits;
  REQUIRE(append_logit_edits(sp, 2, {0}, {}, {0}, 16, edits) == 2);
  SampleRowParams p = device_sample_params(sp, 0.5);
  p.edit_count = 2;
  CHECK_FALSE(sample(x.data(), 2, sp, {0}, {}, {0}, 0.5).ok());
  CHECK(sample_row_reference(x.data(), 2, p, edits.data()) == kSampleNonFinite);
  SamplingParams big = sampling(1.0f, 0, 1.0f, 0.0f);
  big.logit_bias = {{1, 3e38f}};
  const std::vector<float> y = {1.0f, 3e38f};
  edits.clear();
  REQUIRE(append_logit_edits(big, 2, {0}, {}, {0}, 16, edits) == 1);
  p = device_sample_params(big, 0.5);
  p.edit_count = 1;
  CHECK_FALSE(sample(y.data(), 2, big, {0}, {}, {0}, 0.5).ok());
  CHECK(sample_row_reference(y.data(), 2, p, edits.data()) == kSampleNonFinite);
  // Ids outside the vocabulary, and too many edits: the host's (-1, edits unchanged).
  SamplingParams out = sampling(1.0f, 0, 1.0f, 0.0f);
  out.repetition_penalty = 1.2f;
  CHECK(append_logit_edits(out, 2, {0, 7}, {}, {0}, 16, edits) == -1);
  CHECK(append_logit_edits(out, 64, {0, 1, 2, 3}, {}, {0}, 3, edits) == -1);
  SamplingParams twice = sampling(1.0f, 0, 1.0f, 0.0f);
  twice.logit_bias = {{1, 0.1f}, {1, 0.2f}};  // (l + 0.1) + 0.2 is no single edit's rounding
  CHECK(append_logit_edits(twice, 64, {0}, {}, {0}, 16, edits) == -1);
  CHECK(edits.size() == 1);
}

TEST_CASE("device sampling: greedy, non-finite and skipped rows, and the seeded RNG stream",
          "[engine][sampler]") {
  std::vector<float> x = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  SampleRowParams greedy;
  greedy.mode = SampleRowParams::kGreedy;
  CHECK(sample_row_reference(x.data(), 5, greedy) == 1);  // the first of the tied maxima
  CHECK(device_sample_params(sampling(0.0f, 0, 1.0f, 0.0f), 0.5).mode ==
        SampleRowParams::kGreedy);
  CHECK(sample_row_reference(x.data(), 5, SampleRowParams{}) == kSampleSkipped);
  SampleRowParams p = device_sample_params(sampling(1.0f, 0, 1.0f, 0.0f), 0.25);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY}) {
    std::vector<float> y = x;
    y[3] = bad;
    CHECK(sample_row_reference(y.data(), 5, p) == kSampleNonFinite);
    CHECK(sample_row_reference(y.data(), 5, greedy) == kSampleNonFinite);
  }
  // By hand: T = 1, weights exp(x - 2) = {e^-1.5, 1, e^-3, 1, e^-1}, total 2.6408; u = 0.25
  // puts the target 0.660 inside token 1's mass [0.2231, 1.2231).
  CHECK(sample_row_reference(x.data(), 5, p) == 1);
  p.u = 0.5;  // 1.320: inside token 3's [1.2729, 2.2729)
  CHECK(sample_row_reference(x.data(), 5, p) == 3);
  p.top_k = 2;  // only the two 2.0 logits: total 2, target 1.0 is token 3's start: token 3
  CHECK(sample_row_reference(x.data(), 5, p) == 3);
  p.u = 0.49;
  CHECK(sample_row_reference(x.data(), 5, p) == 1);
  // A seeded request's stream: sample() with its RNG draws what it draws with uniform_from.
  std::mt19937_64 a(77), b(77);
  const std::vector<float> row = make_row(300, 0, a);
  make_row(300, 0, b);
  const SamplingParams sp = sampling(0.8f, 40, 0.9f, 0.0f);
  for (int i = 0; i < 50; ++i) {
    const SampleResult from_rng = sample(row.data(), 300, sp, {}, {}, {}, a);
    const double u = uniform_from(b);
    CHECK(from_rng.token_id == sample(row.data(), 300, sp, {}, {}, {}, u).token_id);
    CHECK(from_rng.token_id == sample_row_reference(row.data(), 300, device_sample_params(sp, u)));
  }
}

TEST_CASE("device sampling: a planned step reads tokens, and only the logits rows the host needs",
          "[engine][sampler]") {
  ScopedEnv on("OCTET_DEVICE_SAMPLING", "1");
  const LoadedModel& m = testing::stories_model();
  const int64_t vocab = m.model->config().vocab_size;
  std::vector<KVLayerSpec> layers(static_cast<size_t>(m.model->config().num_hidden_layers));
  for (KVLayerSpec& s : layers) s.dtype = DType::F32;
  testing::RunnerLane dev(m, layers, 256, 4, false), full(m, layers, 256, 4, false);
  const std::vector<SamplingParams> params = {
      sampling(0.0f, 0, 1.0f, 0.0f),    // greedy
      sampling(0.8f, 20, 1.0f, 0.0f),   // top_k
      sampling(1.2f, 0, 0.9f, 0.02f),   // top_p, min_p
      sampling(1.0f, 0, 1.0f, 0.0f)};   // logprobs: the host's
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<int32_t> prompt = testing::random_prompt(4 + 3 * static_cast<int>(i), i);
    dev.add("r" + std::to_string(i), prompt).sampling_params = params[i];
    full.add("r" + std::to_string(i), prompt).sampling_params = params[i];
  }
  std::mt19937_64 rng(5);
  std::vector<int32_t> next(4, 0);
  for (int step = 0; step < 5; ++step) {
    CAPTURE(step);
    std::vector<double> u(4);
    DeviceSampling plan;
    plan.rows.resize(4);
    for (size_t i = 0; i < 3; ++i) {
      u[i] = uniform_from(rng);
      plan.rows[i] = device_sample_params(params[i], u[i]);
    }
    const StepLogits d = dev.step_all(next, plan), f = full.step_all(next);
    REQUIRE(d.device_ids.size() == 4);
    REQUIRE(d.logits.size() == static_cast<size_t>(vocab));  // request 3's row only
    REQUIRE(f.logits.size() == static_cast<size_t>(4 * vocab));
    for (size_t i = 0; i < 4; ++i) {
      const int64_t row = d.sample_row[i];
      if (i == 3) {
        CHECK(d.device_id(row) == kSampleSkipped);
        CHECK(testing::first_difference(d.row(row), f.row(f.sample_row[i]), vocab) == -1);
        continue;
      }
      const SampleResult host =
          sample(f.row(f.sample_row[i]), vocab, params[i], {}, {}, {}, u[i]);
      REQUIRE(host.ok());
      CHECK(d.device_id(row) == host.token_id);
      next[i] = host.token_id;
    }
    next[3] = 7 + step;
  }
  // Off: kSample rows come back as logits (every row, as before device sampling).
  ScopedEnv off("OCTET_DEVICE_SAMPLING", "0");
  testing::RunnerLane host(m, layers, 256, 4, false);
  host.add("a", testing::random_prompt(5, 9)).sampling_params = params[1];
  DeviceSampling plan;
  plan.rows = {device_sample_params(params[1], 0.5)};
  const StepLogits h = host.step_all({0}, plan);
  CHECK(h.device_ids.empty());
  CHECK(h.logits.size() == static_cast<size_t>(vocab));
  {
    ScopedEnv word("OCTET_DEVICE_SAMPLING", "Off");  // the serve options' boolean words
    testing::RunnerLane off_lane(m, layers, 256, 4, false);
    off_lane.add("a", testing::random_prompt(5, 9)).sampling_params = params[1];
    CHECK(off_lane.step_all({0}, plan).device_ids.empty());
  }
  ScopedEnv bad("OCTET_DEVICE_SAMPLING", "banana");
  CHECK_THROWS_WITH(testing::RunnerLane(m, layers, 256, 4, false),
                    Catch::Contains("OCTET_DEVICE_SAMPLING must be 1, true, yes, on, 0, false"));
}

TEST_CASE("device sampling: an engine sampling on the backend gives the host sampler's tokens",
          "[engine][sampler]") {
  const auto run = [](const char* device_sampling) {
    ScopedEnv env("OCTET_DEVICE_SAMPLING", device_sampling);
    auto engine = Engine::create(testing::engine_args(
        testing::stories(), {.device = "cpu", .num_kv_blocks = 64, .max_model_len = 256}));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 8; ++i) {
      SamplingParams p;
      p.max_tokens = 24;
      p.ignore_eos = true;
      p.temperature = i % 4 == 0 ? 0.0f : 0.6f + 0.2f * static_cast<float>(i);
      p.top_k = i % 3 == 1 ? 30 : 0;
      p.top_p = i % 2 == 1 ? 0.9f : 1.0f;
      p.min_p = i == 6 ? 0.05f : 0.0f;
      p.seed = 100 + i;
      if (i == 5) p.logprobs = 2;  // sampled on the host, beside the others
      if (i == 7) p.repetition_penalty = 1.3f;  // logits processors: LogitEdits
      if (i == 3) {
        p.frequency_penalty = 0.7f;
        p.presence_penalty = -0.4f;
        p.logit_bias = {{5, 2.5f}, {17, -100.0f}};
      }
      if (i == 4) {
        p.min_tokens = 20;
        p.stop_token_ids = {9, 11};
        p.ignore_eos = false;
        p.repetition_penalty = 0.8f;
      }
      streams.push_back(engine->add_request("r" + std::to_string(i),
                                            testing::random_prompt(3 + 5 * i, 50 + i), p));
    }
    std::vector<std::vector<int32_t>> tokens;
    for (auto& s : streams) tokens.push_back(testing::collect(*s).token_ids);
    return tokens;
  };
  const std::vector<std::vector<int32_t>> host = run("0"), device = run("1");
  REQUIRE(host.size() == device.size());
  for (size_t i = 0; i < host.size(); ++i) {
    CAPTURE(i);
    if (i != 4) CHECK(host[i].size() == 24);
    CHECK(host[i].size() >= 20);
    CHECK(device[i] == host[i]);
  }
}

}  // namespace octet

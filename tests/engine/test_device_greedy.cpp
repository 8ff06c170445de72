// Greedy tokens taken on the backend (Backend::argmax_rows, ModelRunner's StepLogits::
// device_ids): a step whose every row is a plain greedy sample reads rows x 4 bytes of token ids
// instead of the logits, and they are the argmax the host sampler takes of those logits; other
// steps (logprobs asked, temperature > 0) read the logits; a row with a non-finite logit comes
// back as its logits, so the host reports it. stories260K on the CPU (the CUDA
// backend's kernel is checked against the same rule in test_backend_ops' argmax_rows case).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/structured_output.h"
#include "engine_test_support.h"
#include "kernels/forwarding_backend.h"
#include "test_model_paths.h"

namespace octet {
namespace {

std::vector<KVLayerSpec> f32_layers(const LoadedModel& m) {
  KVLayerSpec s;
  s.dtype = DType::F32;
  return std::vector<KVLayerSpec>(static_cast<size_t>(m.model->config().num_hidden_layers), s);
}

// The lowest index of the largest value (the host sampler's rule), written out here.
int32_t first_max(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (row[j] > row[best]) best = static_cast<int32_t>(j);
  return best;
}

// The CPU backend with one logit of every lm_head row replaced by NaN while `poison` is set.
struct PoisonLogits final : ForwardingBackend {
  PoisonLogits() : ForwardingBackend(make_backend("cpu")) {}
  void linear(const float* x, int64_t m, const WeightRef& w, float* y) override {
    inner().linear(x, m, w, y);
    if (poison && w.n == 512)
      for (int64_t i = 0; i < m; ++i) y[i * w.n + 7] = std::numeric_limits<float>::quiet_NaN();
  }
  bool poison = false;
};

}  // namespace

TEST_CASE("device greedy: plain greedy steps read token ids, the host's argmax of the logits",
          "[engine][sampler]") {
  const LoadedModel& m = testing::stories_model();
  const int64_t vocab = m.model->config().vocab_size;
  testing::RunnerLane greedy(m, f32_layers(m), 256, 4, false);
  testing::RunnerLane full(m, f32_layers(m), 256, 4, false);
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> prompt = testing::random_prompt(5 + 9 * i, 40 + i);
    greedy.add("r" + std::to_string(i), prompt).sampling_params = testing::greedy_params(8, -1);
    full.add("r" + std::to_string(i), prompt);  // temperature 1: the logits come back
  }
  std::vector<int32_t> next = {0, 0, 0};
  for (int step = 0; step < 6; ++step) {
    CAPTURE(step);
    const StepLogits g = greedy.step_all(next), f = full.step_all(next);
    REQUIRE(f.device_ids.empty());
    REQUIRE(f.logits.size() == static_cast<size_t>(3 * vocab));
    CHECK(g.logits.empty());
    REQUIRE(g.device_ids.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(g.device_ids[static_cast<size_t>(g.sample_row[i])] ==
            first_max(f.row(f.sample_row[i]), vocab));
      next[i] = g.device_ids[static_cast<size_t>(g.sample_row[i])];  // both lanes fed the same
    }
  }
  // Logprobs asked by one request: the step reads the logits.
  greedy.requests[1]->sampling_params.logprobs = 2;
  const StepLogits g = greedy.step_all(next);
  CHECK(g.device_ids.empty());
  CHECK(g.logits.size() == static_cast<size_t>(3 * vocab));
}

// Every exclusion of plain_greedy sends the step back to the logits (the host sampler's own
// processing), and a plain greedy step after it takes the ids again.
TEST_CASE("device greedy: logits processors, structured outputs, prompt logprobs and "
          "max_tokens 0 read the logits",
          "[engine][sampler]") {
  const LoadedModel& m = testing::stories_model();
  testing::RunnerLane lane(m, f32_layers(m), 256, 2, false);
  Request& r = lane.add("a", testing::random_prompt(7, 3));
  r.sampling_params = testing::greedy_params(64, -1);
  int32_t next = 9;
  REQUIRE_FALSE(lane.step_all({next}).device_ids.empty());
  const auto plain = [] { return testing::greedy_params(64, -1); };
  std::vector<std::pair<const char*, SamplingParams>> cases;
  cases.emplace_back("min_tokens", plain());
  cases.back().second.min_tokens = 60;
  cases.emplace_back("logit_bias", plain());
  cases.back().second.logit_bias = {{5, 1.0f}};
  cases.emplace_back("repetition_penalty", plain());
  cases.back().second.repetition_penalty = 1.1f;
  cases.emplace_back("frequency_penalty", plain());
  cases.back().second.frequency_penalty = 0.5f;
  cases.emplace_back("presence_penalty", plain());
  cases.back().second.presence_penalty = 0.5f;
  cases.emplace_back("structured_outputs", plain());
  cases.back().second.structured_outputs.kind = StructuredOutputKind::Json;
  cases.emplace_back("max_tokens 0", plain());
  cases.back().second.max_tokens = 0;
  cases.emplace_back("temperature", plain());
  cases.back().second.temperature = 0.7f;
  for (const auto& [name, params] : cases) {
    CAPTURE(name);
    r.sampling_params = params;
    const StepLogits s = lane.step_all({++next});
    CHECK(s.device_ids.empty());
    CHECK(s.logits.size() == static_cast<size_t>(m.model->config().vocab_size));
    r.sampling_params = plain();
    CHECK(lane.step_all({++next}).device_ids.size() == 1);
  }
  // A prefill asking for prompt logprobs, beside a plain greedy decode.
  Request& b = lane.add("b", testing::random_prompt(12, 4));
  b.sampling_params = plain();
  b.sampling_params.prompt_logprobs = 1;
  const StepLogits s = lane.step_all({++next, 3});
  CHECK(s.device_ids.empty());
  CHECK_FALSE(s.logits.empty());
}

TEST_CASE("device greedy: a non-finite logit falls back to the logits rows", "[engine][sampler]") {
  auto poison = std::make_shared<PoisonLogits>();
  LoadOptions o = make_load_options("auto", "channel");
  o.backend = poison;
  const std::unique_ptr<LoadedModel> m = load_model(testing::stories(), o);
  testing::RunnerLane lane(*m, f32_layers(*m), 256, 2, false);
  lane.add("a", testing::random_prompt(6, 1)).sampling_params = testing::greedy_params(4, -1);
  lane.add("b", testing::random_prompt(9, 2)).sampling_params = testing::greedy_params(4, -1);
  const StepLogits clean = lane.step_all({3, 4});
  CHECK(clean.logits.empty());
  CHECK(clean.device_ids.size() == 2);
  poison->poison = true;
  const StepLogits bad = lane.step_all({5, 6});
  // Each row with a non-finite logit comes back as its logits, for the host to report.
  REQUIRE(bad.device_ids == std::vector<int32_t>{kSampleNonFinite, kSampleNonFinite});
  REQUIRE(bad.logits.size() == 2 * 512);
  CHECK(std::isnan(bad.row(0)[7]));
  CHECK(std::isnan(bad.row(1)[7]));
}

}  // namespace octet

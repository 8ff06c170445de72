// Batch invariance through the whole model on the CUDA backend (octet's default promise: a
// sequence's logits do not depend on what else runs in its step). Bit for bit (memcmp):
//  - m = 1 against m = 300: a sequence prefilled and decoded alone (20 tokens, then 1 per
//    step) against the same sequence sharing each step with a long prefill's 280 / 299-token
//    chunks (300 tokens per step, the sequence's rows after the other's);
//  - across the graph ladder: the same sequence decoded in batches of 1, 2, 3, 5 and 9
//    sequences, run as the captured graphs of sizes 1, 2, 4, 8 and 16 (3, 5 and 9 padded),
//    against the sequence decoded alone without graphs.
// On stories260K (FP32 and FP8 W8A8 linears) and the Llama-3.2-1B-shaped dummy model (FP8
// W8A8 at real sizes, where GEMM algorithm choices depend on m when nothing pins them), with a
// bf16 and an fp8 E4M3 KV cache. The CPU's linear kernels are checked for the same property in
// tests/kernels/test_batch_invariance.cpp. Needs a build with CUDA and a GPU: without one each
// case exits 77 (skipped).
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine_test_support.h"
#include "test_model_paths.h"

using namespace octet;

namespace {

constexpr int64_t kMaxModelLen = 2048;
constexpr int64_t kDecodeSteps = 4;

// A model on the GPU, loaded once per binary: "stories-none", "stories-auto" (stories260K with
// that quantization) or "llama-3.2-1b" (dummy weights, seed 7, FP8 W8A8).
const LoadedModel& gpu_model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<LoadedModel>> models;
  std::unique_ptr<LoadedModel>& m = models[name];
  if (!m) {
    testing::require_cuda_or_skip();
    if (name == "llama-3.2-1b") {
      ModelSource s;
      s.model = name;
      s.load_format = "dummy";
      s.tokenizer = testing::stories();
      s.seed = 7;
      LoadOptions o = make_load_options("auto", "channel");
      o.device = "cuda";
      m = load_model(s, o);
    } else {
      LoadOptions o = make_load_options(name == "stories-none" ? "none" : "auto", "channel");
      o.device = "cuda";
      m = load_model(testing::stories(), o);
    }
  }
  return *m;
}

// Every layer in `dtype`; FP8 with one scale per KV head: 1 for stories260K (its K/V never
// reach the clip point at scale 1, test_kv_saturation), 0.02 for the dummy model (K/V ~ N(0, 1)).
std::vector<KVLayerSpec> kv_layers(const LoadedModel& m, DType dtype) {
  const ModelConfig& c = m.model->config();
  KVLayerSpec s;
  s.dtype = dtype;
  const float scale = c.hidden_size >= 1024 ? 0.02f : 1.0f;
  if (dtype_is_fp8(dtype))
    s.k_scale = s.v_scale = std::vector<float>(static_cast<size_t>(c.num_key_value_heads), scale);
  return std::vector<KVLayerSpec>(static_cast<size_t>(c.num_hidden_layers), s);
}

std::vector<int32_t> ids(int64_t len, int64_t salt, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t j = 0; j < len; ++j)
    p.push_back(static_cast<int32_t>(3 + (salt * 131 + j * 17) % (vocab - 3)));
  return p;
}

// The logits row of request `index` in `step` (vocab floats), REQUIRE-ing it is sampled.
std::vector<float> row_of(const StepLogits& step, size_t index) {
  REQUIRE(index < step.sample_row.size());
  const int64_t r = step.sample_row[index];
  REQUIRE(r >= 0);
  return {step.row(r), step.row(r) + step.vocab};
}

// Sequence A's sampled rows, decoded alone (eager, one sequence): prefill, then kDecodeSteps
// steps fed tokens 40, 41, ...
std::vector<std::vector<float>> alone_rows(const LoadedModel& m,
                                           const std::vector<KVLayerSpec>& layers,
                                           const std::vector<int32_t>& prompt) {
  testing::RunnerLane lane(m, layers, kMaxModelLen, 1, false);
  lane.add("a", prompt);
  std::vector<std::vector<float>> rows;
  for (int64_t s = 0; s <= kDecodeSteps; ++s)
    rows.push_back(row_of(lane.step_all({static_cast<int32_t>(40 + s)}), 0));
  return rows;
}

void require_same_rows(const std::vector<std::vector<float>>& got,
                       const std::vector<std::vector<float>>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    INFO("step " << s << " (0: prefill)");
    REQUIRE(got[s].size() == want[s].size());
    CHECK(testing::first_difference(got[s].data(), want[s].data(),
                                    static_cast<int64_t>(got[s].size())) == -1);
  }
}

const char* const kModels[] = {"stories-none", "stories-auto", "llama-3.2-1b"};

}  // namespace

TEST_CASE("cuda batch invariance: a sequence's logits alone (m = 1) and in 300-token steps",
          "[cuda][batch_invariance]") {
  for (const std::string name : kModels)
    for (const DType dtype : {DType::BF16, DType::FP8_E4M3}) {
      INFO("model " << name << ", KV " << dtype_name(dtype));
      const LoadedModel& m = gpu_model(name);
      const int64_t vocab = m.model->config().vocab_size;
      const std::vector<KVLayerSpec> layers = kv_layers(m, dtype);
      const std::vector<int32_t> a = ids(20, 1, vocab);
      const std::vector<std::vector<float>> want = alone_rows(m, layers, a);

      // B (scheduled first) prefills 280 tokens beside A's 20, then 299 beside each of A's
      // decode tokens: 300 tokens every step, B never reaching its last token.
      testing::RunnerLane lane(m, layers, kMaxModelLen, 2, false);
      lane.add("b", ids(280 + kDecodeSteps * 299 + 1, 2, vocab));
      lane.add("a", a);
      std::vector<std::vector<float>> got;
      for (int64_t s = 0; s <= kDecodeSteps; ++s) {
        const std::vector<int64_t> tokens = {s == 0 ? 280 : 299, s == 0 ? 20 : 1};
        const StepLogits step = lane.step(tokens, {0, static_cast<int32_t>(40 + s)});
        REQUIRE(step.sample_row[0] == -1);  // B: no row (mid-prompt)
        got.push_back(row_of(step, 1));
      }
      require_same_rows(got, want);
    }
}

TEST_CASE("cuda batch invariance: a sequence's logits across the decode graph ladder",
          "[cuda][batch_invariance][graph]") {
  for (const std::string name : kModels)
    for (const DType dtype : {DType::BF16, DType::FP8_E4M3}) {
      const LoadedModel& m = gpu_model(name);
      const int64_t vocab = m.model->config().vocab_size;
      const std::vector<KVLayerSpec> layers = kv_layers(m, dtype);
      const std::vector<int32_t> a = ids(20, 1, vocab);
      const std::vector<std::vector<float>> want = alone_rows(m, layers, a);
      // Batches of 1, 2, 3, 5, 9 run as graphs 1, 2, 4, 8, 16; A is the last sequence.
      for (const int64_t batch : {1, 2, 3, 5, 9}) {
        INFO("model " << name << ", KV " << dtype_name(dtype) << ", batch " << batch);
        testing::RunnerLane lane(m, layers, kMaxModelLen, 16, true);
        for (int64_t i = 0; i + 1 < batch; ++i)
          lane.add("f" + std::to_string(i), ids(5 + 7 * i, 3 + i, vocab));
        lane.add("a", a);
        std::vector<std::vector<float>> got;
        for (int64_t s = 0; s <= kDecodeSteps; ++s) {
          std::vector<int32_t> next(static_cast<size_t>(batch), 50);
          next.back() = static_cast<int32_t>(40 + s);
          got.push_back(row_of(lane.step_all(next), static_cast<size_t>(batch - 1)));
        }
        CHECK(lane.runner->graph_steps() == kDecodeSteps);  // every decode step a graph
        require_same_rows(got, want);
      }
    }
}

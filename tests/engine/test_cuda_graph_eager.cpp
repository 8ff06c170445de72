// CUDA graphs for decode steps (engine/model_runner.h DecodeGraphOptions) against eager steps:
// two runners over the same stories260K weights on the GPU, each with its own KV cache, run the
// same prefill and decode steps; every decode step's logits of the graph runner (the first at
// each size captures, the rest replay) must equal the eager runner's bit for bit, at batch
// sizes 1, 2, 3, 7 and 16 (3 and 7 are padded to the captured sizes 4 and 8), with a bf16,
// an fp8 E4M3 and an fp8 E5M2 KV cache. One sequence of each batch passes 512 positions, so
// its attention splits into partitions and merges (the graph's merge kernel path). Needs a
// build with CUDA (OCTET_HAVE_CUDA) and a GPU: without one it exits 77 (skipped).
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine_test_support.h"
#include "kernels/backend.h"
#include "test_model_paths.h"

using namespace octet;

namespace {

constexpr int64_t kMaxModelLen = 1024;
constexpr int64_t kMaxNumSeqs = 16;
constexpr int64_t kDecodeSteps = 5;

// The GPU model (FP8 W8A8, quantization auto), or exit 77 when this build or machine has none.
const LoadedModel& gpu_model() {
  static std::unique_ptr<LoadedModel> model = [] {
    testing::require_cuda_or_skip();
    LoadOptions o;
    o.device = "cuda";
    return load_model(testing::stories(), o);
  }();
  return *model;
}

// Every layer in `dtype`; FP8 with scale 1 per KV head (stories260K's K/V never reach the clip
// point at scale 1: test_kv_saturation's start-up check case).
std::vector<KVLayerSpec> kv_layers(const LoadedModel& m, DType dtype) {
  const ModelConfig& c = m.model->config();
  KVLayerSpec s;
  s.dtype = dtype;
  if (dtype_is_fp8(dtype))
    s.k_scale = s.v_scale = std::vector<float>(static_cast<size_t>(c.num_key_value_heads), 1.0f);
  return std::vector<KVLayerSpec>(static_cast<size_t>(c.num_hidden_layers), s);
}

// Prompt i of a batch: sequence 0 is 530 tokens long (its decode positions span two
// 512-position partitions), the others 3 + i tokens; ids in [1, vocab).
std::vector<int32_t> prompt(int64_t i, int64_t vocab) {
  const int64_t len = i == 0 ? 530 : 3 + i;
  std::vector<int32_t> ids;
  for (int64_t j = 0; j < len; ++j)
    ids.push_back(static_cast<int32_t>(1 + (i * 31 + j * 7) % (vocab - 1)));
  return ids;
}

// The same fixed token for every request of a step (not sampled: both lanes must feed the
// same tokens whatever their logits), offset by the request's index.
std::vector<int32_t> fed_tokens(int64_t batch, int32_t base) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < batch; ++i) t.push_back(base + static_cast<int32_t>(i));
  return t;
}

}  // namespace

TEST_CASE("decode_graph_sizes is vLLM's ladder up to max_num_seqs") {
  // Independent of the GPU: 1, 2, 4, then every multiple of 8.
  CHECK(decode_graph_sizes(1) == std::vector<int64_t>{1});
  CHECK(decode_graph_sizes(3) == std::vector<int64_t>{1, 2});
  CHECK(decode_graph_sizes(20) == std::vector<int64_t>{1, 2, 4, 8, 16});
  CHECK(decode_graph_sizes(32) == std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32});
  CHECK(decode_graph_sizes(100000).back() == 512);
}

TEST_CASE("cuda graph decode steps equal eager steps bit for bit", "[cuda][graph]") {
  const LoadedModel& m = gpu_model();
  const int64_t vocab = m.model->config().vocab_size;
  for (const DType dtype : {DType::BF16, DType::FP8_E4M3, DType::FP8_E5M2})
    for (const int64_t batch : {1, 2, 3, 7, 16}) {
      INFO("KV dtype " << dtype_name(dtype) << ", batch size " << batch);
      const std::vector<KVLayerSpec> layers = kv_layers(m, dtype);
      testing::RunnerLane graph(m, layers, kMaxModelLen, kMaxNumSeqs, true),
          eager(m, layers, kMaxModelLen, kMaxNumSeqs, false);
      for (int64_t i = 0; i < batch; ++i) {
        const std::string id = "r" + std::to_string(i);
        graph.add(id, prompt(i, vocab));
        eager.add(id, prompt(i, vocab));
      }
      // Prefill (several tokens per sequence): eager in both lanes.
      const StepLogits g0 = graph.step_all(fed_tokens(batch, 5)),
                       e0 = eager.step_all(fed_tokens(batch, 5));
      REQUIRE(graph.runner->graph_steps() == 0);
      REQUIRE(g0.logits.size() == e0.logits.size());
      REQUIRE(testing::first_difference(g0.logits.data(), e0.logits.data(),
                                        static_cast<int64_t>(g0.logits.size())) == -1);
      for (int64_t s = 0; s < kDecodeSteps; ++s) {
        INFO("decode step " << s);
        const std::vector<int32_t> next = fed_tokens(batch, static_cast<int32_t>(11 + 3 * s));
        const StepLogits g = graph.step_all(next), e = eager.step_all(next);
        REQUIRE(g.logits.size() == static_cast<size_t>(batch * vocab));
        REQUIRE(e.logits.size() == g.logits.size());
        REQUIRE(g.sample_row == e.sample_row);
        const int64_t first_diff = testing::first_difference(
            g.logits.data(), e.logits.data(), static_cast<int64_t>(g.logits.size()));
        INFO("first differing logit " << first_diff);
        CHECK(first_diff == -1);
        // Rows must be real logits, not an untouched buffer.
        bool nonzero = false;
        for (float x : g.logits) nonzero = nonzero || x != 0.0f;
        CHECK(nonzero);
      }
      CHECK(graph.runner->graph_steps() == kDecodeSteps);  // capture once, then replays
      CHECK(eager.runner->graph_steps() == 0);
    }
}

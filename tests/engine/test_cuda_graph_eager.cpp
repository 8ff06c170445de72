// CUDA graphs for decode steps (engine/model_runner.h DecodeGraphOptions) against eager steps:
// two runners over the same stories260K weights on the GPU, each with its own KV cache, run the
// same prefill and decode steps; every decode step's logits of the graph runner (the first at
// each size captures, the rest replay) must equal the eager runner's bit for bit, at batch
// sizes 1, 2, 3, 7 and 16 (3 and 7 are padded to the captured sizes 4 and 8). One sequence of
// each batch passes 512 positions, so its attention splits into partitions and merges (the
// graph's merge kernel path). Needs a build with CUDA (OCTET_HAVE_CUDA) and a GPU: without
// one it exits 77 (skipped).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "kernels/backend.h"
#include "test_model_paths.h"

using namespace octet;

namespace {

constexpr int64_t kBlockSize = 16;
constexpr int64_t kMaxModelLen = 1024;
constexpr int64_t kNumBlocks = 16 * (kMaxModelLen / kBlockSize) + 1;
constexpr int64_t kDecodeSteps = 5;

// The GPU model, or exit 77 when this build or machine has none.
const LoadedModel& gpu_model() {
  static std::unique_ptr<LoadedModel> model = [] {
#if !OCTET_HAVE_CUDA
    std::printf("SKIPPED: built without CUDA (OCTET_HAVE_CUDA off)\n");
    std::fflush(stdout);
    std::exit(77);
#endif
    try {
      (void)make_backend("cuda");
    } catch (const std::invalid_argument& e) {
      std::printf("SKIPPED: no CUDA GPU: %s\n", e.what());
      std::fflush(stdout);
      std::exit(77);
    }
    LoadOptions o;
    o.device = "cuda";
    return load_model(testing::stories(), o);
  }();
  return *model;
}

// One runner with its own KV blocks and requests, stepped by hand (no scheduler).
struct Lane {
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<KVCacheManager> kv;
  std::vector<std::unique_ptr<Request>> requests;

  Lane(const LoadedModel& m, bool graphs) {
    const std::vector<KVLayerSpec> layers(
        static_cast<size_t>(m.model->config().num_hidden_layers));
    runner = std::make_unique<ModelRunner>(m, kNumBlocks, kBlockSize, layers, 2048, 16,
                                           DecodeGraphOptions{graphs, kMaxModelLen});
    kv = std::make_unique<KVCacheManager>(kNumBlocks, kBlockSize, false, 0, kMaxModelLen);
  }

  // Schedules n tokens of every request (n = 0: each request's remaining prompt), runs the
  // step and appends to every request the same fixed token (not sampled: both lanes must
  // feed the same tokens whatever their logits).
  StepLogits step(bool prefill, int32_t next_token) {
    SchedulerOutput out;
    for (auto& r : requests) {
      const int64_t n = prefill ? r->num_tokens() - r->num_computed_tokens : 1;
      REQUIRE(kv->allocate_slots(*r, n));
      out.scheduled.push_back(r.get());
      out.num_scheduled_tokens.push_back(n);
      out.total_num_scheduled_tokens += n;
    }
    StepLogits logits = runner->execute(out, *kv);
    for (size_t i = 0; i < requests.size(); ++i) {
      requests[i]->num_computed_tokens += out.num_scheduled_tokens[i];
      requests[i]->append_output_token(next_token + static_cast<int32_t>(i));
    }
    return logits;
  }
};

// Prompt i of a batch: sequence 0 is 530 tokens long (its decode positions span two
// 512-position partitions), the others 3 + i tokens; ids in [1, vocab).
std::vector<int32_t> prompt(int64_t i, int64_t vocab) {
  const int64_t len = i == 0 ? 530 : 3 + i;
  std::vector<int32_t> ids;
  for (int64_t j = 0; j < len; ++j)
    ids.push_back(static_cast<int32_t>(1 + (i * 31 + j * 7) % (vocab - 1)));
  return ids;
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

TEST_CASE("cuda graph decode steps equal eager steps bit for bit") {
  const LoadedModel& m = gpu_model();
  const int64_t vocab = m.model->config().vocab_size;
  for (const int64_t batch : {1, 2, 3, 7, 16}) {
    INFO("batch size " << batch);
    Lane graph(m, true), eager(m, false);
    for (int64_t i = 0; i < batch; ++i) {
      const std::string id = "r" + std::to_string(i);
      graph.requests.push_back(std::make_unique<Request>(id, prompt(i, vocab)));
      eager.requests.push_back(std::make_unique<Request>(id, prompt(i, vocab)));
    }
    // Prefill (several tokens per sequence): eager in both lanes.
    const StepLogits g0 = graph.step(true, 5), e0 = eager.step(true, 5);
    REQUIRE(graph.runner->graph_steps() == 0);
    REQUIRE(g0.logits.size() == e0.logits.size());
    REQUIRE(std::memcmp(g0.logits.data(), e0.logits.data(), g0.logits.size() * 4) == 0);
    for (int64_t s = 0; s < kDecodeSteps; ++s) {
      INFO("decode step " << s);
      const int32_t next = static_cast<int32_t>(11 + 3 * s);
      const StepLogits g = graph.step(false, next), e = eager.step(false, next);
      REQUIRE(g.logits.size() == static_cast<size_t>(batch * vocab));
      REQUIRE(e.logits.size() == g.logits.size());
      REQUIRE(g.sample_row == e.sample_row);
      int64_t first_diff = -1;
      for (size_t k = 0; k < g.logits.size() && first_diff < 0; ++k)
        if (std::memcmp(&g.logits[k], &e.logits[k], 4) != 0) first_diff = static_cast<int64_t>(k);
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

#pragma once
// Test helper: driving the Engine on a test model. engine_args() fills the EngineArgs fields
// the engine tests vary (each left out keeps EngineArgs' default); collect() and
// collect_outcome() gather a request's stream, require_same_logprobs() compares two bit for
// bit; greedy_params(), random_prompt() and stories_model() are the sampling, the stories260K
// prompts and the shared loaded model of several tests. The CUDA tests' helpers:
// require_cuda_or_skip() (exit 77 without a GPU), RunnerLane (a ModelRunner stepped by hand)
// and first_difference().
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "config/engine_args.h"
#include "engine/engine.h"
#include "engine/kv_cache_manager.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "kernels/backend.h"
#include "test_model_paths.h"

namespace octet::testing {

/// What engine_args() sets. Every default is EngineArgs' own (config/engine_args.h,
/// config/engine_config.h), so a field a test leaves out is exactly as an EngineArgs it
/// filled by hand would have it. Designated initializers name the fields in this order.
struct TestEngineArgs {
  std::string quantization = "auto";
  std::string device = "auto";
  int64_t tensor_parallel_size = 1;
  std::string kv_cache_dtype = "auto";
  std::string kv_cache_rotation = "none";
  bool calculate_kv_scales = false;
  int64_t kv_cache_memory_bytes = 0;  // KV budget in bytes; 0: num_kv_blocks or the default
  int64_t num_kv_blocks = 0;          // KV budget in blocks
  int64_t max_model_len = 0;          // tokens; 0: the model's context
};

/// EngineArgs of `model` (a path, or a dummy preset) with the fields of `t`.
inline EngineArgs engine_args(const std::string& model, const TestEngineArgs& t) {
  EngineArgs a;
  a.model = model;
  a.quantization = t.quantization;
  a.device = t.device;
  a.tensor_parallel_size = t.tensor_parallel_size;
  a.cache.kv_cache_dtype = t.kv_cache_dtype;
  a.cache.kv_cache_rotation = t.kv_cache_rotation;
  a.cache.calculate_kv_scales = t.calculate_kv_scales;
  a.cache.kv_cache_memory_bytes = t.kv_cache_memory_bytes;
  a.cache.num_kv_blocks = t.num_kv_blocks;
  a.scheduler.max_model_len = t.max_model_len;
  return a;
}

/// One request's outputs, concatenated; finished, finish_reason and error from its last one.
struct Result {
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprobs> logprobs, prompt_logprobs;
  std::string text, finish_reason, error;
  bool finished = false;
};

/// Reads `s` to its end; with `require_no_error`, REQUIREs of each output that it carries no
/// error. Use collect() or collect_outcome().
inline Result read_stream(RequestStream& s, bool require_no_error) {
  Result r;
  while (auto o = s.next()) {
    if (require_no_error) REQUIRE(o->error.empty());
    r.token_ids.insert(r.token_ids.end(), o->token_ids.begin(), o->token_ids.end());
    r.logprobs.insert(r.logprobs.end(), o->logprobs.begin(), o->logprobs.end());
    r.prompt_logprobs.insert(r.prompt_logprobs.end(), o->prompt_logprobs.begin(),
                             o->prompt_logprobs.end());
    r.text += o->text;
    if (o->finished) r.finished = true, r.finish_reason = o->finish_reason, r.error = o->error;
  }
  return r;
}

/// Reads `s` to its end, REQUIRE-ing that no output carries an error.
inline Result collect(RequestStream& s) { return read_stream(s, /*require_no_error=*/true); }

/// Reads `s` to its end whatever the request's outcome (a failed request: error set).
inline Result collect_outcome(RequestStream& s) {
  return read_stream(s, /*require_no_error=*/false);
}

/// REQUIREs the same token ids and as many logprob entries, then CHECKs each token's logprob
/// (bitwise: the same float, not approximately) and its top entries.
inline void require_same_logprobs(const Result& a, const Result& b) {
  REQUIRE(a.token_ids == b.token_ids);
  REQUIRE(a.logprobs.size() == b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    INFO("token " << i);
    CHECK(a.logprobs[i].logprob == b.logprobs[i].logprob);
    CHECK(a.logprobs[i].top == b.logprobs[i].top);
  }
}

/// Greedy sampling of max_tokens tokens past EOS, with `logprobs` top entries (-1: none).
inline SamplingParams greedy_params(int64_t max_tokens, int64_t logprobs) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = logprobs;
  return p;
}

/// n token ids in [3, 503) from a fixed seed (stories260K's vocabulary is 512).
inline std::vector<int32_t> random_prompt(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t& t : p) t = static_cast<int32_t>(3 + rng() % 500);
  return p;
}

/// stories260K loaded once per test binary (quantization auto, per-channel weight scales).
inline const LoadedModel& stories_model() {
  static std::unique_ptr<LoadedModel> m =
      load_model(stories(), make_load_options("auto", "channel"));
  return *m;
}

/// Exits 77 (CTest: skipped, never passed) unless this build has CUDA and a CUDA GPU is present.
inline void require_cuda_or_skip() {
#if !OCTET_HAVE_CUDA
  std::printf("SKIPPED: built without CUDA (OCTET_HAVE_CUDA off)\n");
  std::fflush(stdout);
  std::exit(77);
#else
  try {
    (void)make_backend("cuda");
  } catch (const std::invalid_argument& e) {
    std::printf("SKIPPED: no CUDA GPU: %s\n", e.what());
    std::fflush(stdout);
    std::exit(77);
  }
#endif
}

/// One ModelRunner over `loaded` with its own KV blocks (room for max_num_seqs sequences of
/// max_model_len tokens) and requests, stepped by hand (no scheduler), for tests that compare
/// the logits of two runs (devices, graphs, batch mixes): both are fed the same tokens, never
/// sampled ones, whatever their logits.
struct RunnerLane {
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<KVCacheManager> kv;
  std::vector<std::unique_ptr<Request>> requests;

  /// layers: [num_hidden_layers] KV specs (every KV head); graphs: CUDA graphs for decode
  /// steps (DecodeGraphOptions); max_num_batched_tokens: the activations' size in tokens.
  RunnerLane(const LoadedModel& m, const std::vector<KVLayerSpec>& layers, int64_t max_model_len,
             int64_t max_num_seqs, bool graphs, int64_t max_num_batched_tokens = 2048,
             int64_t block_size = 16) {
    const int64_t num_blocks =
        max_num_seqs * ((max_model_len + block_size - 1) / block_size) + 1;  // + null block
    runner = std::make_unique<ModelRunner>(m, num_blocks, block_size, layers,
                                           max_num_batched_tokens, max_num_seqs,
                                           DecodeGraphOptions{graphs, max_model_len});
    kv = std::make_unique<KVCacheManager>(num_blocks, block_size, false, 0, max_model_len);
  }

  /// Adds a request (index requests.size() - 1) with `prompt`.
  Request& add(const std::string& id, std::vector<int32_t> prompt) {
    requests.push_back(std::make_unique<Request>(id, std::move(prompt)));
    return *requests.back();
  }

  /// One step scheduling tokens[i] tokens of requests[i] (0: not in this step; in request
  /// order), then each scheduled request has them computed and, when that reached its last
  /// token, next[i] appended. tokens and next: [requests.size()]. sampling: per scheduled
  /// request, ModelRunner::execute's device sampling plan (empty: none).
  StepLogits step(const std::vector<int64_t>& tokens, const std::vector<int32_t>& next,
                  const DeviceSampling& sampling = {}) {
    REQUIRE(tokens.size() == requests.size());
    REQUIRE(next.size() == requests.size());
    SchedulerOutput out;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (tokens[i] == 0) continue;
      Request& r = *requests[i];
      REQUIRE(r.num_computed_tokens + tokens[i] <= r.num_tokens());
      REQUIRE(kv->allocate_slots(r, tokens[i]));
      out.scheduled.push_back(&r);
      out.num_scheduled_tokens.push_back(tokens[i]);
      out.total_num_scheduled_tokens += tokens[i];
    }
    StepLogits logits = runner->execute(out, *kv, sampling);
    for (size_t i = 0; i < requests.size(); ++i) {
      if (tokens[i] == 0) continue;
      Request& r = *requests[i];
      r.num_computed_tokens += tokens[i];
      if (r.num_computed_tokens == r.num_tokens()) r.append_output_token(next[i]);
    }
    return logits;
  }

  /// step() with every request's remaining tokens (its prompt, or 1 when decoding).
  StepLogits step_all(const std::vector<int32_t>& next,
                      const DeviceSampling& sampling = {}) {
    std::vector<int64_t> tokens;
    for (const auto& r : requests) tokens.push_back(r->num_tokens() - r->num_computed_tokens);
    return step(tokens, next, sampling);
  }
};

/// Index of the first float of a and b (n each) whose bits differ, or -1 when all are equal.
inline int64_t first_difference(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) return i;
  return -1;
}

}  // namespace octet::testing

#pragma once
// Engine: the facade the front ends (server/, `octet generate`) talk to (DESIGN.md "One
// request's path"). It owns the model, the paged KV cache, the scheduler and one engine thread
// whose loop is schedule -> execute -> update. Callers only enqueue (add_request, abort) and
// read their request's output stream; they never run the model or take a lock around it.
// Exposes only std types and engine/ value types, so server/ never sees models/ or kernels/.
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/engine_args.h"
#include "engine/model_tokenizer.h"
#include "engine/request_error.h"
#include "engine/request_output.h"
#include "engine/sampling_params.h"
#include "engine/structured_output.h"

namespace octet {

/// Sampled FP8 clipping counts of one KV cache layer stored in FP8 with static scales
/// (engine/kv_saturation.h): K/V values read back, those stored at +-fp8_max, those stored as
/// zero or subnormal. Totals since start-up.
struct KVLayerSaturation {
  int64_t layer = 0;
  int64_t k_sampled = 0, k_saturated = 0, k_underflow = 0;
  int64_t v_sampled = 0, v_saturated = 0, v_underflow = 0;
};

/// Counters for /metrics and the CLI, a consistent snapshot.
struct EngineStats {
  int64_t num_requests_running = 0;
  int64_t num_requests_waiting = 0;
  int64_t num_preemptions = 0;        // total
  double kv_cache_usage = 0.0;        // used blocks / usable blocks, 0..1
  int64_t num_kv_blocks = 0;          // usable blocks (null block excluded)
  int64_t num_free_kv_blocks = 0;
  // vLLM's cache_config_info figures: tokens the pool holds with every KV cache group holding
  // them (blocks x block_size / groups) and max_model_len sequences that fit at once (window
  // groups hold only their window).
  int64_t kv_cache_size_tokens = 0;
  double kv_cache_max_concurrency = 0.0;
  int64_t prefix_cache_queries = 0;   // tokens looked up (total)
  int64_t prefix_cache_hits = 0;      // tokens found (total)
  int64_t prompt_tokens = 0;          // total prompt tokens computed
  int64_t generation_tokens = 0;      // total generated tokens
  int64_t num_steps = 0;
  // Steps by their tokens as vLLM counts them for vllm:iteration_tokens_total: the prompt
  // tokens of the requests whose first token came in the step, plus the tokens generated in it
  // (steps with none are not counted): step_tokens_log2[k] counts the steps with
  // 2^(k-1) < tokens <= 2^k (k = 0: tokens <= 1); step_tokens_sum adds their tokens.
  std::array<int64_t, 48> step_tokens_log2{};
  int64_t step_tokens_sum = 0;
  bool alive = true;                  // false once the engine thread has died
  // Structured outputs: grammar bitmasks filled (one per constrained token sampled) and their
  // total wall time (engine/structured_output_bench.h).
  int64_t num_bitmask_fills = 0;
  double bitmask_fill_s = 0.0;
  std::vector<KVLayerSaturation> kv_saturation;  // FP8 static-scale layers, ascending
};

/// One layer of the KV cache as configured at start-up (the startup table, /metrics gauges).
struct KVLayerInfo {
  std::string dtype;                // "bf16", "fp8_e4m3", ...
  std::vector<float> k_scale, v_scale;  // [num_kv_heads] (FP8 layers), empty otherwise
  std::string scale_source;         // "file", "checkpoint", "calculated", "unit", "-"
  int64_t sliding_window = 0;
};

/// What add_requests() throws when the waiting queue has no room for the group: nothing of it
/// was queued. num_waiting: requests waiting when it was checked; limit: max_num_waiting.
class EngineOverloaded : public std::runtime_error {
 public:
  EngineOverloaded(int64_t num_waiting, int64_t limit)
      : std::runtime_error(std::to_string(num_waiting) + " requests are waiting (limit " +
                           std::to_string(limit) + ")"),
        num_waiting_(num_waiting), limit_(limit) {}
  int64_t num_waiting() const { return num_waiting_; }
  int64_t limit() const { return limit_; }

 private:
  int64_t num_waiting_, limit_;
};

/// One request for Engine::add_requests (the arguments of add_request).
struct NewRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  int64_t priority = 0;
};

class Engine {
 public:
  /// Loads the model, sets up the KV cache (dtypes, scales, budget) and starts the engine
  /// thread. Throws ModelFileError (std::runtime_error) naming a file for a bad model or scales
  /// file, std::invalid_argument naming the option for bad configuration (unknown
  /// kv_cache_dtype, skip-layer index out of range, block_size not a power of two, a budget
  /// smaller than one max_model_len sequence, non-finite or non-positive scales, ...).
  static std::unique_ptr<Engine> create(const EngineArgs& args);
  ~Engine();  // stops the engine thread; unfinished requests end with finish_reason "abort"

  /// Multi-node (--nnodes > 1): node 0 is an Engine made by create() (it connects to the other
  /// nodes at start-up, sends them every step and, when destroyed, a shutdown message); every
  /// other node runs this instead: the same start-up (connect, check that its flags match node
  /// 0's, load, KV cache set-up, with node 0's collectives), then the steps node 0 sends on its
  /// own ranks until node 0's shutdown message, when it returns. No scheduler, no HTTP. Throws
  /// as create() does, std::invalid_argument when a flag differs from node 0's or node_rank is
  /// 0, std::runtime_error naming the node when node 0 (or a peer mid-step) is lost.
  static void run_follower(const EngineArgs& args);

  /// Queues a request. prompt_token_ids: [num_prompt_tokens]; max_tokens is honoured as given
  /// (resolve "up to the context limit" before calling: max_tokens_left() in
  /// engine/request_error.h). This is where a request is validated, once: throws RequestError
  /// (a std::invalid_argument) with a client-facing message and the field at fault for a
  /// duplicate or empty id, an empty prompt, a token id outside the model's vocabulary
  /// [0, vocab_size()) ("prompt", "logit_bias", "stop_token_ids"; ids of a padded vocabulary
  /// past the tokenizer's are valid and decode to ""), a min_tokens no token can meet (EOS and
  /// stop_token_ids cover the vocabulary: "min_tokens"), bad params (SamplingParamError), or
  /// prompt + max_tokens >
  /// max_model_len (kind ContextLengthExceeded; the message gives the limit and the requested
  /// count); std::runtime_error when the engine is shutting down or dead.
  std::shared_ptr<RequestStream> add_request(const std::string& request_id,
                                             std::vector<int32_t> prompt_token_ids,
                                             const SamplingParams& params, int64_t priority = 0);
  /// Queues several requests, all or none, with add_request's checks for each (it throws as
  /// add_request does, and then queues nothing). With max_num_waiting >= 0 the queue limit is
  /// checked under the same lock as the enqueue: when the requests waiting (queued and not yet
  /// scheduled, or preempted) plus those of the group that need the engine exceed it, throws
  /// EngineOverloaded and queues nothing; a group that alone exceeds it is a RequestError
  /// (InvalidRequest, param "prompt"). Streams are returned in the order of `requests`.
  std::vector<std::shared_ptr<RequestStream>> add_requests(std::vector<NewRequest> requests,
                                                           int64_t max_num_waiting = -1);
  /// Aborts a queued or running request (no-op when unknown or finished): its KV blocks are
  /// freed at the next engine step and its stream ends with finish_reason "abort".
  void abort(const std::string& request_id);
  /// Aborts every queued or running request, as abort() does for each (the end of a graceful
  /// shutdown's timeout: their streams end with finish_reason "abort").
  void abort_all();

  EngineStats stats() const;
  const std::vector<KVLayerInfo>& kv_layers() const;
  /// The start-up printout: model, linear format, KV budget (bytes, blocks, tokens, sequences
  /// of max_model_len that fit) and one row per layer (dtype, k_scale, v_scale, source).
  const std::string& startup_report() const;

  /// The model's tokenizer and chat template (built by the model loader; valid for the
  /// Engine's lifetime).
  const ModelTokenizer& tokenizer() const;
  int64_t max_model_len() const;
  int64_t vocab_size() const;
  int64_t num_hidden_layers() const;
  const std::string& model_path() const;
  std::string linear_format() const;
  /// Weight bytes read per decode step (all linears and lm_head), for bandwidth floors.
  int64_t decode_weight_bytes() const;
  /// KV cache bytes per token of context, all layers, K and V (bench latency's floor).
  int64_t kv_bytes_per_token() const;
  /// Kernels of the last decode step on rank 0 (ModelRunner::decode_step_kernels): a CUDA
  /// graph's kernel nodes, or the CPU rehearsal's count (EngineArgs::count_kernel_launches);
  /// -1 when neither was measured.
  int64_t decode_step_kernels() const;

  /// Compiles `p` (active) against the model's tokenizer on the calling thread, bypassing the
  /// engine's grammar cache, and returns the compile time in ms (benchmarks; the tokenizer's
  /// xgrammar vocabulary is built once, before the clock starts). Throws RequestError
  /// (InvalidRequest, p.field) when it does not compile.
  double compile_structured_output(const StructuredOutputParams& p);
  /// How long a structured-output request may wait for its grammar (queued and compiling)
  /// before it fails with RequestOutput::invalid_request naming its field (default
  /// kDefaultGrammarCompileTimeout, 60 s; tests set a small one). Applies to later requests.
  void set_structured_output_compile_timeout(std::chrono::milliseconds timeout);
  /// Test hook: when set, the grammar compiler's workers call it with each request's params
  /// before compiling (a test blocks in it to hold a compile pending). Never blocks the engine
  /// thread: a request waits for its grammar outside the scheduler.
  void set_structured_output_compile_hook(std::function<void(const StructuredOutputParams&)> hook);

  /// Stops admitting requests (add_request throws std::runtime_error "shutting down"); running
  /// ones continue. Used for graceful shutdown.
  void stop_accepting();
  /// Waits until no request is queued or running, up to `timeout`; true when drained.
  bool wait_idle(std::chrono::milliseconds timeout) const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet

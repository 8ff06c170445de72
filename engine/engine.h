#pragma once
// Engine: the facade the front ends (server/, `octet generate`) talk to (DESIGN.md "One
// request's path"). It owns the model, the paged KV cache, the scheduler and one engine thread
// whose loop is schedule -> execute -> update. Callers only enqueue (add_request, abort) and
// read their request's output stream; they never run the model or take a lock around it.
// Exposes only std types and engine/ value types, so server/ never sees models/ or kernels/.
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
#include "engine/sampling_params.h"

namespace octet {

/// Log-probability of one token (natural log, FP32, from the raw model logits), its rank
/// among the vocabulary (1 = most likely) and, when requested, the top-k alternatives.
struct TokenLogprobs {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int64_t rank = 0;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

/// One update of a request, pushed to its RequestStream by the engine thread. Token ids, text
/// and logprobs are deltas since the previous update; counters are cumulative.
struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> token_ids;           // new generated tokens
  std::string text;                         // new text (never a partial UTF-8 character,
                                            // never a prefix of a pending stop string)
  std::vector<TokenLogprobs> logprobs;      // per new token, when params.logprobs >= 0
  std::vector<TokenLogprobs> prompt_logprobs;  // first update only, when requested; entry 0
                                               // (the first prompt token) has no logprob
  bool finished = false;
  std::string finish_reason;  // on the final update: "stop", "length" or "abort"
  std::string stop_reason;    // the stop string or stop token id (decimal) that matched, or ""
  std::string error;          // non-empty when the engine failed this request (internal fault)
  int64_t num_prompt_tokens = 0;
  int64_t num_generated_tokens = 0;
  int64_t num_cached_tokens = 0;           // prompt tokens served by the prefix cache
  // Timings in seconds since the request was added (filled on the final update):
  double queue_time_s = 0.0;       // added -> first scheduled
  double first_token_time_s = 0.0; // added -> first token
  double e2e_time_s = 0.0;         // added -> finished
};

/// A request's outputs in order; written by the engine thread, read by one consumer.
class RequestStream {
 public:
  /// Blocks until the next update is available; std::nullopt once the final update (finished)
  /// has been returned.
  std::optional<RequestOutput> next();
  /// As next(), but gives up after `timeout` (returns std::nullopt with *timed_out = true).
  std::optional<RequestOutput> next_for(std::chrono::milliseconds timeout, bool* timed_out);
  /// Called (on the engine thread) after every push: e.g. to wake an event loop. Set it before
  /// the first output can arrive (right after add_request returns is safe only if the callback
  /// is set under the stream's lock: use this setter, which replays a pending notification).
  void set_notify(std::function<void()> notify);

  // Engine side.
  void push(RequestOutput output);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool done_ = false;       // the final update was returned by next()
  std::function<void()> notify_;
};

/// Counters for /metrics and the CLI, a consistent snapshot.
struct EngineStats {
  int64_t num_requests_running = 0;
  int64_t num_requests_waiting = 0;
  int64_t num_preemptions = 0;        // total
  double kv_cache_usage = 0.0;        // used blocks / usable blocks, 0..1
  int64_t num_kv_blocks = 0;          // usable blocks (null block excluded)
  int64_t num_free_kv_blocks = 0;
  int64_t prefix_cache_queries = 0;   // tokens looked up (total)
  int64_t prefix_cache_hits = 0;      // tokens found (total)
  int64_t prompt_tokens = 0;          // total prompt tokens computed
  int64_t generation_tokens = 0;      // total generated tokens
  int64_t num_steps = 0;
  bool alive = true;                  // false once the engine thread has died
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

  /// Queues a request. prompt_token_ids: [num_prompt_tokens]; max_tokens is honoured as given
  /// (resolve "up to the context limit" before calling: max_model_len() - prompt length).
  /// Throws std::invalid_argument with a client-facing message for a duplicate or empty id, an
  /// empty prompt, a token id outside the vocabulary, bad params, or prompt + max_tokens >
  /// max_model_len (the message gives the limit and the requested count); std::runtime_error
  /// when the engine is shutting down or dead.
  std::shared_ptr<RequestStream> add_request(const std::string& request_id,
                                             std::vector<int32_t> prompt_token_ids,
                                             const SamplingParams& params, int64_t priority = 0);
  /// Queues several requests, all or none, with add_request's checks for each (it throws as
  /// add_request does, and then queues nothing). With max_num_waiting >= 0 the queue limit is
  /// checked under the same lock as the enqueue: when the requests waiting (queued and not yet
  /// scheduled, or preempted) plus those of the group that need the engine exceed it, throws
  /// EngineOverloaded and queues nothing. Streams are returned in the order of `requests`.
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

  /// Tokenizer facade. tokenize: special tokens in the text are recognised; BOS added when
  /// add_special_tokens and the model asks for it.
  std::vector<int32_t> tokenize(const std::string& text, bool add_special_tokens) const;
  std::string detokenize(const std::vector<int32_t>& ids, bool skip_special_tokens) const;
  /// The Jinja chat template from tokenizer_config.json or GGUF tokenizer.chat_template ("" if
  /// none), and the BOS/EOS token strings templates use.
  const std::string& chat_template() const;
  std::string bos_token() const;
  std::string eos_token() const;
  int64_t max_model_len() const;
  int64_t vocab_size() const;
  const std::string& model_path() const;
  std::string linear_format() const;

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

#pragma once
// OutputProcessor: what the engine thread does with one executed step's logits (vLLM v1's
// sampler + OutputProcessor): prompt logprobs, sampling, then, after the scheduler's update,
// stop checks (EOS, stop tokens, stop strings, max_tokens, max_model_len), incremental
// detokenization and each request's RequestOutput. It also keeps the engine's one record per
// request (RequestState) beside the scheduler's Request.
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "engine/request_output.h"
#include "engine/sampler.h"
#include "engine/scheduler_output.h"

namespace octet {

class GrammarState;
class RequestDetokenizer;
struct StepLogits;

using EngineClock = std::chrono::steady_clock;

/// The engine's record of one queued or running request (engine thread only): where its
/// outputs go, its RNG, its text state, its timings and its prompt logprobs so far.
struct RequestState {
  std::shared_ptr<RequestStream> stream;
  std::mt19937_64 rng;
  std::unique_ptr<RequestDetokenizer> detok;
  EngineClock::time_point arrival;
  EngineClock::time_point first_scheduled;
  EngineClock::time_point first_token;
  bool scheduled_once = false;
  bool produced_first = false;
  int64_t num_cached_tokens = 0;
  std::vector<TokenLogprobs> prompt_logprobs;  // [num_prompt_tokens] when requested
  // Structured outputs: the grammar's matcher, advanced by each output token (set once the
  // grammar is compiled, before the request is scheduled; kept across preemption, which keeps
  // the output tokens). nullptr for an unconstrained request.
  std::unique_ptr<GrammarState> grammar;

  RequestState();
  RequestState(RequestState&&) noexcept;
  RequestState& operator=(RequestState&&) noexcept;
  ~RequestState();
};

/// One request's update from a step. status Running: push `output`; a Finished* status: the
/// engine finishes the request with `output` (FinishedAborted with output.error set: the
/// request failed alone, e.g. a non-finite logit or a sampler error).
struct RequestUpdate {
  Request* request = nullptr;
  RequestStatus status = RequestStatus::Running;
  RequestOutput output;
};

class OutputProcessor {
 public:
  /// eos_token_ids: the model's EOS ids; max_model_len: a request reaching it stops ("length").
  OutputProcessor(std::vector<int32_t> eos_token_ids, int64_t max_model_len);
  ~OutputProcessor();

  // The records, by request id.
  void add(const std::string& request_id, RequestState state);
  RequestState* find(const std::string& request_id);
  void erase(const std::string& request_id);
  bool empty() const { return states_.empty(); }
  std::vector<std::string> ids() const;

  /// Records the first scheduling of each request of `out` (queue time ends at `now`).
  void on_scheduled(const SchedulerOutput& out, EngineClock::time_point now);

  /// Before the step runs: per scheduled request of `out`, how the backend may sample its next
  /// token (ModelRunner::execute), its logits processing as LogitEdits over a `vocab`-token
  /// row: mode kSkip unless it samples this step and is device_sampleable (sampler.h) within
  /// kMaxSampleEdits. The uniform of each kSample row is drawn from the request's RNG now;
  /// sample() uses that uniform if the row comes back to the host, so a seeded request draws
  /// the same tokens wherever it is sampled.
  DeviceSampling device_sampling(const SchedulerOutput& out, int64_t vocab);

  /// Prompt logprobs and sampling for every scheduled request of `out` that has logits rows;
  /// appends each sampled token to its Request. A request whose logprobs or sampling fail gets
  /// no token and fails in the next updates(). Call before Scheduler::update(out).
  void sample(const SchedulerOutput& out, const StepLogits& logits);

  /// After Scheduler::update: the updates of the requests sample() handled (text, logprobs,
  /// stop checks), in order. *new_prompt_tokens / *new_generated: prompt tokens of requests
  /// that produced their first output, and tokens generated, this step.
  std::vector<RequestUpdate> updates(EngineClock::time_point now, int64_t* new_prompt_tokens,
                                     int64_t* new_generated);

  /// Structured outputs: grammar bitmasks filled (one per constrained row sampled) and the
  /// total wall time of filling them in seconds (a step's fills run in parallel on the CPU
  /// thread team: time per fill is amortised), since construction
  /// (engine/structured_output_bench.h).
  int64_t num_bitmask_fills() const { return num_bitmask_fills_; }
  double bitmask_fill_s() const { return bitmask_fill_s_; }

  /// Fills a final output's counters and timings (seconds since arrival) from the record.
  static void complete(const RequestState& st, const Request* r, EngineClock::time_point now,
                       RequestOutput& out);

 private:
  struct Sampled {
    Request* req;
    SampleResult res;
    bool no_token;      // max_tokens == 0 with prompt logprobs: finish without sampling
    std::string error;  // non-empty: fail this request (no token was appended)
    std::string invalid_param;  // non-empty: the failure is the request's own (400 naming it)
  };
  RequestUpdate update_for(Request& r, const SampleResult& res, bool no_token,
                           EngineClock::time_point now, int64_t* new_prompt_tokens);

  std::vector<int32_t> eos_token_ids_;
  int64_t max_model_len_;
  std::unordered_map<std::string, RequestState> states_;
  std::vector<Sampled> sampled_;  // of the last sample()
  // device_sampling()'s uniforms, per scheduled request of that step (-1: none drawn).
  std::vector<double> drawn_u_;
  std::vector<GrammarState*> fills_;  // this step's constrained rows (sample())
  int64_t num_bitmask_fills_ = 0;
  double bitmask_fill_s_ = 0.0;
};

}  // namespace octet

#pragma once
// What the engine sends back for one request: RequestOutput updates (deltas of tokens, text and
// logprobs) in a RequestStream that the engine thread writes and one consumer reads.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
  // With error: true when the request itself was at fault, not the engine (a structured output
  // that does not compile against the model's tokenizer): answer as a RequestError of kind
  // InvalidRequest naming error_param (HTTP 400), not as an internal fault (500).
  bool invalid_request = false;
  std::string error_param;
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

}  // namespace octet

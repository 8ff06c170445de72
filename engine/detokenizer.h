#pragma once
// Per-request output text: incremental detokenization plus stop strings, as vLLM v1's
// IncrementalDetokenizer + check_stop_strings (vllm/v1/engine/detokenizer.py), with two
// tightenings: only text that could still begin a stop string is held back (vLLM holds the last
// max(len(stop)) - 1 characters whatever they are), and when one step completes several stop
// strings the one that completes first in the text wins (ties: the earlier in `stop`), so the
// result never depends on how the text was split into tokens.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "models/tokenizer.h"

namespace octet {

/// What one push() makes safe to send. text: new complete UTF-8 that will never be retracted;
/// stopped: a stop string completed (text then ends just before it, or just after it with
/// include_stop_str_in_output; nothing after it is ever emitted); stop_str: that stop string.
struct DetokenizeStep {
  std::string text;
  bool stopped = false;
  std::string stop_str;
};

/// One request's generated text, fed one sampled token at a time. Not thread-safe.
///
/// Invariant: the concatenation of every push().text and finish() equals text() once the request
/// is over (stopped, or finish() called), which is what a non-streaming client receives.
///
/// Stop strings (params.stop) are matched in the accumulated output text (UTF-8 bytes, across
/// token boundaries), only once more than params.min_tokens tokens were pushed (vLLM: a match
/// must end in text of a token past min_tokens; it may begin earlier). Text that could still be
/// the beginning of a stop string is held back until the next tokens resolve it or finish().
///
/// Stop tokens (EOS unless ignore_eos, and stop_token_ids): the caller decides that a token ends
/// the request and says so with push(token, /*stop_terminated=*/true). As vLLM, that token's
/// text is left out unless include_stop_str_in_output (with skip_special_tokens a special token
/// such as EOS has no text anyway), and everything held back is flushed in the same step.
class RequestDetokenizer {
 public:
  /// Continues after `prompt_ids` (whose text is not part of the output; see
  /// StreamingDetokenizer). Ids the tokenizer has no token for (a padded vocabulary: the
  /// model's vocab_size may exceed the tokenizer's, as Qwen2.5's) stand for "" here and in
  /// push(), never an error (vLLM). Uses params.stop, include_stop_str_in_output, skip_special_tokens
  /// and min_tokens. `tokenizer` must outlive this object.
  RequestDetokenizer(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt_ids,
                     const SamplingParams& params);

  /// Adds one generated token (an id without a token adds no text). After the request stopped or finish() was called, returns an empty step (stopped as
  /// before) and ignores the token.
  DetokenizeStep push(int32_t token, bool stop_terminated = false);

  /// End of the request for a reason other than a stop string (length, EOS passed as an
  /// ordinary push): flushes everything held back, an incomplete UTF-8 character as U+FFFD.
  /// Returns "" when already stopped or finished.
  std::string finish();

  /// The output text so far: everything decoded, held-back text included, cut at the stop
  /// string once stopped.
  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }
  const std::string& stop_str() const { return stop_str_; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  /// Appends `piece`, checks for a stop string completed by it, and returns the text now safe
  /// to emit (all of it when `flush`).
  DetokenizeStep advance(const std::string& piece, bool flush);
  /// Byte offset where the longest proper prefix of a stop string begins as a suffix of text_
  /// (text_.size() when none, never before emitted_).
  size_t held_from() const;

  /// One stop string as a Knuth-Morris-Pratt matcher over the output bytes: each byte of text
  /// is fed once, so a token costs O(its bytes) per stop string (amortized; at most the stop
  /// string's length for one byte), never a search of the whole window.
  struct StopMatcher {
    explicit StopMatcher(std::string s);
    /// Feeds byte c; true when it completes the stop string (the state then falls back to the
    /// longest proper border, so overlapping matches are found too).
    bool feed(char c);
    std::string str;
    std::vector<uint32_t> border;  // border[i]: longest proper border of str[0, i]
    size_t matched = 0;            // longest suffix of the text fed that is a prefix of str
  };

  StreamingDetokenizer detok_;
  int32_t tokenizer_vocab_size_;  // ids at or past it have no token: text ""
  std::vector<StopMatcher> stop_;
  bool include_stop_str_in_output_;
  int64_t min_tokens_;
  int64_t num_tokens_ = 0;
  std::string text_;
  size_t emitted_ = 0;  // bytes of text_ already returned
  bool stopped_ = false;
  bool finished_ = false;
  std::string stop_str_;
};

}  // namespace octet

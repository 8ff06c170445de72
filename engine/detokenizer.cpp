#include "engine/detokenizer.h"

#include <algorithm>

namespace octet {

RequestDetokenizer::RequestDetokenizer(const Tokenizer& tokenizer,
                                       const std::vector<int32_t>& prompt_ids,
                                       const SamplingParams& params)
    : detok_(tokenizer, params.skip_special_tokens, prompt_ids),
      stop_(params.stop),
      include_stop_str_in_output_(params.include_stop_str_in_output),
      min_tokens_(params.min_tokens) {}

DetokenizeStep RequestDetokenizer::push(int32_t token, bool stop_terminated) {
  if (stopped_ || finished_) return {std::string(), stopped_, stop_str_};
  ++num_tokens_;
  std::string piece;
  if (!stop_terminated || include_stop_str_in_output_) piece = detok_.push(token);
  if (stop_terminated) {
    piece += detok_.finish();
    finished_ = true;
  }
  return advance(piece, stop_terminated);
}

std::string RequestDetokenizer::finish() {
  if (stopped_ || finished_) return {};
  finished_ = true;
  return advance(detok_.finish(), /*flush=*/true).text;
}

DetokenizeStep RequestDetokenizer::advance(const std::string& piece, bool flush) {
  const size_t old_len = text_.size();
  text_ += piece;
  DetokenizeStep step;
  // A new match ends inside `piece`; it may begin up to size - 1 bytes before it.
  if (!piece.empty() && num_tokens_ > min_tokens_) {
    size_t best_pos = 0, best_end = std::string::npos;
    for (const std::string& s : stop_) {
      const size_t from = old_len + 1 > s.size() ? old_len + 1 - s.size() : 0;
      const size_t pos = text_.find(s, from);
      if (pos != std::string::npos && pos + s.size() < best_end) {
        best_pos = pos;
        best_end = pos + s.size();
        step.stop_str = s;
      }
    }
    if (best_end != std::string::npos) {
      // Held-back text always covers a match's start: best_pos >= emitted_.
      text_.resize(std::max(emitted_, include_stop_str_in_output_ ? best_end : best_pos));
      stopped_ = true;
      stop_str_ = step.stop_str;
      step.stopped = true;
      flush = true;
    }
  }
  const size_t safe = flush ? text_.size() : held_from();
  if (safe > emitted_) {
    step.text = text_.substr(emitted_, safe - emitted_);
    emitted_ = safe;
  }
  return step;
}

size_t RequestDetokenizer::held_from() const {
  const size_t n = text_.size();
  size_t from = n;
  for (const std::string& s : stop_) {
    // Earliest i >= emitted_ with text_[i, n) a proper prefix of s. Stop strings and text are
    // valid UTF-8, so i is a character boundary (text_[i] equals s[0], a lead byte).
    size_t i = n + 1 > s.size() ? n + 1 - s.size() : 0;
    for (i = std::max(i, emitted_); i < from; ++i) {
      if (text_.compare(i, n - i, s, 0, n - i) == 0) {
        from = i;
        break;
      }
    }
  }
  return from;
}

}  // namespace octet

#include "engine/detokenizer.h"

#include <algorithm>
#include <utility>

namespace octet {

namespace {

/// The ids that have a token in `tokenizer`: a padded vocabulary's other ids stand for no text.
std::vector<int32_t> known_ids(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= 0 && id < tokenizer.vocab_size()) out.push_back(id);
  return out;
}

}  // namespace

RequestDetokenizer::RequestDetokenizer(const Tokenizer& tokenizer,
                                       const std::vector<int32_t>& prompt_ids,
                                       const SamplingParams& params)
    : detok_(tokenizer, params.skip_special_tokens, known_ids(tokenizer, prompt_ids)),
      tokenizer_vocab_size_(tokenizer.vocab_size()),
      include_stop_str_in_output_(params.include_stop_str_in_output),
      min_tokens_(params.min_tokens) {
  stop_.reserve(params.stop.size());
  for (const std::string& s : params.stop)
    if (!s.empty()) stop_.emplace_back(s);  // validate() rejects "", which would match anywhere
}

RequestDetokenizer::StopMatcher::StopMatcher(std::string s) : str(std::move(s)) {
  border.assign(str.size(), 0);
  for (size_t i = 1, k = 0; i < str.size(); ++i) {
    while (k > 0 && str[i] != str[k]) k = border[k - 1];
    if (str[i] == str[k]) ++k;
    border[i] = static_cast<uint32_t>(k);
  }
}

bool RequestDetokenizer::StopMatcher::feed(char c) {
  while (matched > 0 && str[matched] != c) matched = border[matched - 1];
  if (str[matched] == c) ++matched;
  if (matched < str.size()) return false;
  matched = border[matched - 1];
  return true;
}

DetokenizeStep RequestDetokenizer::push(int32_t token, bool stop_terminated) {
  if (stopped_ || finished_) return {std::string(), stopped_, stop_str_};
  ++num_tokens_;
  std::string piece;
  // An id without a token (a padded vocabulary's) decodes to "", as in vLLM.
  const bool has_text = token >= 0 && token < tokenizer_vocab_size_;
  if (has_text && (!stop_terminated || include_stop_str_in_output_)) piece = detok_.push(token);
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
  // Every byte goes through every matcher (a match may begin in earlier text); one ending
  // inside `piece` counts only once more than min_tokens tokens were pushed.
  size_t best_pos = 0, best_end = std::string::npos;
  if (!piece.empty()) {
    const bool check = num_tokens_ > min_tokens_;
    for (StopMatcher& m : stop_) {
      for (size_t j = 0; j < piece.size(); ++j) {
        if (!m.feed(piece[j]) || !check) continue;
        const size_t end = old_len + j + 1;
        if (end < best_end) {  // ties: the earlier stop string wins
          best_end = end;
          best_pos = end - m.str.size();
          step.stop_str = m.str;
        }
        break;  // the request stops; this matcher's later bytes no longer matter
      }
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
  const size_t safe = flush ? text_.size() : held_from();
  if (safe > emitted_) {
    step.text = text_.substr(emitted_, safe - emitted_);
    emitted_ = safe;
  }
  return step;
}

size_t RequestDetokenizer::held_from() const {
  // Each matcher's state is the longest suffix of text_ that is a proper prefix of its string.
  // Stop strings and text are valid UTF-8, so the start is a character boundary.
  size_t from = text_.size();
  for (const StopMatcher& m : stop_) from = std::min(from, text_.size() - m.matched);
  return std::max(from, emitted_);
}

}  // namespace octet

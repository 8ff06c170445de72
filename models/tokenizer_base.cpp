// What "llama" and "gpt2" share: the added-token split of input text, ids <-> bytes, decode.
#include <algorithm>
#include <stdexcept>

#include "models/tokenizer_impl.h"
#include "models/unicode_utf8.h"

namespace octet::tokenizer_detail {

void AddedTokenMatcher::add(int32_t id, const std::string& text, bool special) {
  if (!text.empty()) added_.push_back({text, id, special});
}

void AddedTokenMatcher::finish() {
  std::stable_sort(added_.begin(), added_.end(),
                   [](const Added& a, const Added& b) { return a.text < b.text; });
  sorted_.clear();
  for (Added& a : added_) {
    if (sorted_.empty() || sorted_.back().text != a.text) {
      starts_[static_cast<uint8_t>(a.text[0])] = true;
      sorted_.push_back({std::move(a.text), -1, -1});
    }
    Entry& e = sorted_.back();
    if (e.any_id < 0) e.any_id = a.id;
    if (!a.special && e.plain_id < 0) e.plain_id = a.id;
  }
  added_ = {};
}

std::vector<Fragment> AddedTokenMatcher::split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> out;
  size_t plain_begin = 0;
  for (size_t i = 0; i < text.size();) {
    // The longest usable text that matches at i (LeftmostLongest). Invariant: the entries in
    // [lo, hi) all start with text[i, i + k); one equal to it sorts first.
    int32_t hit_id = -1;
    size_t hit_len = 0;
    if (starts_[static_cast<uint8_t>(text[i])]) {
      auto lo = sorted_.begin(), hi = sorted_.end();
      for (size_t k = 0; i + k < text.size() && lo != hi; ++k) {
        if (lo->text.size() == k) ++lo;
        const auto c = static_cast<uint8_t>(text[i + k]);
        lo = std::lower_bound(lo, hi, c, [k](const Entry& e, uint8_t v) {
          return static_cast<uint8_t>(e.text[k]) < v;
        });
        hi = std::upper_bound(lo, hi, c, [k](uint8_t v, const Entry& e) {
          return v < static_cast<uint8_t>(e.text[k]);
        });
        if (lo != hi && lo->text.size() == k + 1) {
          const int32_t id = parse_special ? lo->any_id : lo->plain_id;
          if (id >= 0) {
            hit_id = id;
            hit_len = k + 1;
          }
        }
      }
    }
    if (hit_id < 0) {
      ++i;
      continue;
    }
    if (i > plain_begin) out.push_back({-1, plain_begin, i});
    out.push_back({hit_id, i, i + hit_len});
    i += hit_len;
    plain_begin = i;
  }
  if (plain_begin < text.size()) out.push_back({-1, plain_begin, text.size()});
  return out;
}

TokenizerBase::TokenizerBase(TokenizerData&& data) : data_(std::move(data)) {
  const int32_t n = int32_t(data_.tokens.size());
  text_to_id_.reserve(size_t(n));
  for (int32_t id = 0; id < n; ++id) text_to_id_[data_.tokens[size_t(id)]] = id;  // last wins
  for (int32_t id = 0; id < n; ++id) {
    const int32_t type = data_.types[size_t(id)];
    if (type == kControl || type == kUnknown) added_.add(id, data_.tokens[size_t(id)], true);
    if (type == kUserDefined) added_.add(id, data_.tokens[size_t(id)], false);
  }
  added_.finish();
}

void TokenizerBase::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary [0, " +
                            std::to_string(vocab_size()) + ")");
  }
}

std::vector<int32_t> TokenizerBase::encode(std::string_view text, bool add_special,
                                           bool parse_special) const {
  std::string cleaned;
  if (!utf8::is_valid(text)) {
    cleaned = utf8::to_valid(text);
    text = cleaned;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && data_.add_bos && data_.bos_id >= 0) out.push_back(data_.bos_id);
  for (const Fragment& f : added_.split(text, parse_special)) {
    if (f.id >= 0) {
      out.push_back(f.id);
    } else {
      encode_text(text.substr(f.begin, f.end - f.begin), f.begin == 0, out);
    }
  }
  if (add_special && data_.add_eos && data_.eos_id >= 0) out.push_back(data_.eos_id);
  return out;
}

std::string TokenizerBase::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string raw;
  for (int32_t id : ids) {
    check_id(id);
    if (skip_special && is_special(id)) continue;
    raw += bytes_[size_t(id)];
  }
  std::string text = utf8::to_valid(raw);
  if (strips_leading_space() && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

std::string TokenizerBase::token_bytes(int32_t id) const {
  check_id(id);
  return bytes_[size_t(id)];
}

const std::string& TokenizerBase::token_text(int32_t id) const {
  check_id(id);
  return data_.tokens[size_t(id)];
}

bool TokenizerBase::is_special(int32_t id) const {
  check_id(id);
  const int32_t type = data_.types[size_t(id)];
  return type == kControl || type == kUnknown;
}

int32_t TokenizerBase::token_to_id(std::string_view text) const {
  const auto it = text_to_id_.find(text);
  return it == text_to_id_.end() ? -1 : it->second;
}

}  // namespace octet::tokenizer_detail

// What "llama" and "gpt2" share: the added-token split of input text, ids <-> bytes, decode.
#include <algorithm>
#include <stdexcept>

#include "models/tokenizer_impl.h"
#include "models/unicode_utf8.h"

namespace octet::tokenizer_detail {

void AddedTokenMatcher::add(int32_t id, const std::string& text, bool special) {
  if (text.empty()) return;
  starts_[static_cast<uint8_t>(text[0])] = true;
  int32_t node = 0;
  for (char c : text) {
    int32_t next = child(node, static_cast<uint8_t>(c));
    if (next < 0) {
      next = int32_t(nodes_.size());
      nodes_.emplace_back();
      edges_.emplace(edge(node, static_cast<uint8_t>(c)), next);
    }
    node = next;
  }
  Node& n = nodes_[size_t(node)];
  if (n.any_id < 0) n.any_id = id;
  if (!special && n.plain_id < 0) n.plain_id = id;
}

std::vector<Fragment> AddedTokenMatcher::split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> out;
  size_t plain_begin = 0;
  for (size_t i = 0; i < text.size();) {
    // The longest text that matches at i and may be used (LeftmostLongest).
    int32_t hit_id = -1;
    size_t hit_len = 0;
    if (starts_[static_cast<uint8_t>(text[i])]) {
      int32_t node = 0;
      for (size_t j = i; j < text.size(); ++j) {
        node = child(node, static_cast<uint8_t>(text[j]));
        if (node < 0) break;
        const Node& n = nodes_[size_t(node)];
        const int32_t id = parse_special ? n.any_id : n.plain_id;
        if (id >= 0) {
          hit_id = id;
          hit_len = j + 1 - i;
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

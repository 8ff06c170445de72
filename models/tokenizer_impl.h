#pragma once
// Internals shared by the tokenizer implementations (models/tokenizer_*.cpp); not a public API.
//   TokenizerData     tokenizer.ggml.* as read from a GGUF, lengths validated
//   MergeTable        BPE ranks keyed by (left id, right id), HF tokenizers' merge loop
//   AddedTokenMatcher special/user-defined token texts found in input text
//   TokenizerBase     what "llama" and "gpt2" share: ids <-> bytes, decode, encode skeleton
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "models/tokenizer.h"

namespace octet::tokenizer_detail {

/// tokenizer.ggml.token_type values (llama.cpp's llama_token_type, SentencePiece piece types).
enum TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5,
  kByte = 6,
};

/// The tokenizer metadata of one GGUF, checked for consistent lengths by from_gguf().
struct TokenizerData {
  std::string path;                 // for ModelFileError messages
  std::string model;                // tokenizer.ggml.model: "llama" | "gpt2"
  std::string pre;                  // tokenizer.ggml.pre, "" when absent
  std::vector<std::string> tokens;  // [vocab] token texts as stored
  std::vector<float> scores;        // [vocab] or empty (gpt2)
  std::vector<int32_t> types;       // [vocab] TokenType (kNormal when the file has none)
  std::vector<std::string> merges;  // "left right", best first (gpt2)
  int32_t bos_id = -1, eos_id = -1, unk_id = -1;  // -1: none
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = true;     // llama: the SentencePiece dummy prefix
};

std::unique_ptr<Tokenizer> make_llama_tokenizer(TokenizerData data);
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(TokenizerData data);

/// BPE merge ranks: (left id, right id) -> (rank, merged id); a lower rank merges first.
class MergeTable {
 public:
  /// rank = number of earlier add() calls; a repeated pair takes the later rank (as HF).
  void add(int32_t left, int32_t right, int32_t merged);
  size_t size() const { return map_.size(); }

  /// Merges `ids` in place: repeatedly the lowest-rank adjacent pair, leftmost on ties, with a
  /// priority queue over a linked list (HF tokenizers' Word::merge_all). O(n log n).
  void apply(std::vector<int32_t>& ids) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  std::unordered_map<uint64_t, Merge> map_;
  int32_t next_rank_ = 0;
};

/// One piece of input text after the added-token split: either a token or a byte range.
struct Fragment {
  int32_t id = -1;     // the matched token, or -1 for plain text
  size_t begin = 0;    // byte range in the text
  size_t end = 0;
};

/// Finds added-token texts (CONTROL, UNKNOWN: "special"; USER_DEFINED: always) in input text,
/// leftmost first, longest at a position (HF's AddedVocabulary, aho-corasick LeftmostLongest).
/// The texts are kept sorted; at each input position the range of texts sharing the bytes read
/// so far narrows by binary search, so split() costs O(text bytes x longest text x log texts)
/// at worst and one table lookup per byte of text that starts no added token. Memory: the texts.
class AddedTokenMatcher {
 public:
  /// Collects a text; the first add() of a text wins (for parse_special and, separately, for
  /// non-special use). Call finish() once after the last add().
  void add(int32_t id, const std::string& text, bool special);
  void finish();
  /// Splits text; special tokens are matched only when parse_special. Empty text: no fragments.
  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Entry {
    std::string text;
    int32_t any_id = -1;    // the first token with this text
    int32_t plain_id = -1;  // the first non-special token with this text
  };
  struct Added {
    std::string text;
    int32_t id;
    bool special;
  };
  std::vector<Added> added_;   // until finish()
  std::vector<Entry> sorted_;  // unique texts, bytewise order
  bool starts_[256] = {};      // a text begins with this byte
};

/// State and behaviour common to both tokenizer kinds. Subclasses fill bytes_ in their
/// constructor and implement encode_text() for one plain-text fragment.
class TokenizerBase : public Tokenizer {
 public:
  explicit TokenizerBase(TokenizerData&& data);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  std::string token_bytes(int32_t id) const override;
  const std::string& token_text(int32_t id) const override;
  bool is_special(int32_t id) const override;
  int32_t token_to_id(std::string_view text) const override;
  int32_t vocab_size() const override { return int32_t(data_.tokens.size()); }
  int32_t bos_id() const override { return data_.bos_id; }
  int32_t eos_id() const override { return data_.eos_id; }
  bool add_bos() const override { return data_.add_bos; }

 protected:
  /// Appends the ids of one plain-text fragment (valid UTF-8, no added tokens).
  /// at_text_start: the fragment begins at byte 0 of the whole input.
  virtual void encode_text(std::string_view text, bool at_text_start,
                           std::vector<int32_t>& out) const = 0;
  void check_id(int32_t id) const;

  TokenizerData data_;
  std::vector<std::string> bytes_;  // [vocab] what each token decodes to
  std::unordered_map<std::string_view, int32_t> text_to_id_;  // views into data_.tokens
  AddedTokenMatcher added_;
};

/// The byte a "<0xNN>" byte-fallback token stands for (SentencePiece / HF's ByteFallback
/// decoder), or -1 for any other text.
inline int byte_token_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace octet::tokenizer_detail

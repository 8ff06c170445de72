// "llama" tokenizer: SentencePiece-style BPE as Hugging Face builds it from a GGUF
// (transformers' GGUF conversion -> LlamaTokenizer):
//   - spaces become "▁"; the first text fragment (at byte 0 of the input, not after a special
//     token) gets one "▁" prepended unless it already starts with one (Metaspace,
//     prepend_scheme "first"); tokenizer.ggml.add_space_prefix = false turns this off
//     (HF ignores that key; llama.cpp honours it);
//   - the fragment's characters are looked up in the vocabulary, a missing one becomes its
//     UTF-8 bytes as <0xNN> tokens (byte fallback), or <unk> when those are missing too
//     (consecutive ones fused; as SentencePiece and llama.cpp; HF's conversion has no unk
//     token and drops the character);
//   - merges are derived from the vocabulary and scores (transformers' generate_merges): every
//     split of a token into two vocabulary tokens, ordered by the token's score (descending),
//     then by the length in code points of the left and then the right part (descending), ties
//     in vocabulary order; the pieces are merged lowest rank first (MergeTable).
// Decoding: "▁" -> " ", <0xNN> -> byte, and one leading space dropped (HF's Strip decoder).
// Differences from SentencePiece / llama.cpp: they always prepend the dummy "▁" (so "  Hi" is
// "▁▁▁Hi" there, "▁▁Hi" here) and llama.cpp prepends it again after every special token.
#include <algorithm>
#include <array>
#include <cstdio>
#include <unordered_set>

#include "models/model_file_error.h"
#include "models/tokenizer_impl.h"
#include "models/unicode_utf8.h"

namespace octet::tokenizer_detail {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"
// Bound on the merge derivation's work (sum over tokens of length^2 in bytes): real
// SentencePiece vocabularies (32k-256k pieces of at most a few dozen bytes) stay below 10^8; a
// file of a few very long tokens would otherwise take hours to load.
constexpr uint64_t kMaxMergeWork = uint64_t{1} << 28;

class LlamaTokenizer final : public TokenizerBase {
 public:
  explicit LlamaTokenizer(TokenizerData&& data) : TokenizerBase(std::move(data)) {
    const size_t n = data_.tokens.size();
    bytes_.resize(n);
    for (size_t id = 0; id < n; ++id) {
      const std::string& t = data_.tokens[id];
      const int b = byte_token_value(t);
      if (b >= 0) {
        bytes_[id] = std::string(1, char(b));
        continue;
      }
      std::string& out = bytes_[id];
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, kSpace.size(), kSpace) == 0) {
          out += ' ';
          i += kSpace.size();
        } else {
          out += t[i++];
        }
      }
    }
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_ids_[size_t(b)] = token_to_id(name);
    }
    derive_merges();
  }

  bool strips_leading_space() const override { return data_.add_space_prefix; }

 private:
  void encode_text(std::string_view text, bool at_text_start,
                   std::vector<int32_t>& out) const override {
    std::string s;
    s.reserve(text.size() + 2 * kSpace.size());
    for (char c : text) {
      if (c == ' ') s += kSpace;
      else s += c;
    }
    if (data_.add_space_prefix && at_text_start && s.compare(0, kSpace.size(), kSpace) != 0) {
      s.insert(0, kSpace);
    }

    std::vector<int32_t> ids;
    ids.reserve(s.size());
    bool last_unk = false;
    for (size_t i = 0; i < s.size();) {
      const size_t len = utf8::char_len(s, i);
      const std::string_view ch(s.data() + i, len);
      i += len;
      const int32_t id = token_to_id(ch);
      if (id >= 0) {
        ids.push_back(id);
        last_unk = false;
        continue;
      }
      bool have_bytes = true;
      for (char c : ch) have_bytes = have_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (have_bytes) {
        for (char c : ch) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
        last_unk = false;
      } else if (data_.unk_id >= 0 && !last_unk) {  // consecutive unknowns fuse into one
        ids.push_back(data_.unk_id);
        last_unk = true;
      }
    }
    merges_.apply(ids);
    out.insert(out.end(), ids.begin(), ids.end());
  }

  /// transformers' generate_merges(vocab, scores), reproduced rank for rank. It tries every
  /// cut of every token: O(sum of squared token lengths), bounded by kMaxMergeWork.
  void derive_merges() {
    uint64_t work = 0;
    for (const std::string& t : data_.tokens) work += uint64_t(t.size()) * t.size();
    if (work > kMaxMergeWork) {
      throw ModelFileError(data_.path, "tokenizer.ggml.tokens: tokens too long to derive merges "
                                       "(sum of squared lengths " + std::to_string(work) +
                                       " > " + std::to_string(kMaxMergeWork) + ")");
    }
    struct Candidate {
      int32_t left, right, merged;
      float score;
      int32_t left_len, right_len;  // code points
    };
    std::vector<Candidate> all;
    const size_t n = data_.tokens.size();
    // Python's dict(zip(tokens, scores)): first-occurrence order, the last occurrence's score
    // and id (token_to_id gives the last occurrence).
    std::unordered_set<std::string_view> done;
    std::vector<Candidate> local;
    for (size_t first = 0; first < n; ++first) {
      const std::string& t = data_.tokens[first];
      if (!done.insert(t).second) continue;
      const int32_t merged = token_to_id(t);
      local.clear();
      const int32_t total = int32_t(utf8::count_code_points(t));
      int32_t left_len = 0;
      for (size_t cut = 0; cut < t.size();) {
        if (cut > 0) {
          const int32_t l = token_to_id(std::string_view(t).substr(0, cut));
          const int32_t r = token_to_id(std::string_view(t).substr(cut));
          if (l >= 0 && r >= 0) {
            local.push_back({l, r, merged, data_.scores[size_t(merged)], left_len,
                             total - left_len});
          }
        }
        cut += utf8::char_len(t, cut);
        ++left_len;
      }
      std::stable_sort(local.begin(), local.end(), [](const Candidate& a, const Candidate& b) {
        return a.left != b.left ? a.left < b.left : a.right < b.right;
      });
      all.insert(all.end(), local.begin(), local.end());
    }
    std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
      if (a.score != b.score) return a.score > b.score;
      if (a.left_len != b.left_len) return a.left_len > b.left_len;
      return a.right_len > b.right_len;
    });
    for (const Candidate& c : all) merges_.add(c.left, c.right, c.merged);
  }

  std::array<int32_t, 256> byte_ids_{};  // id of "<0xNN>", -1 when absent
  MergeTable merges_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_llama_tokenizer(TokenizerData data) {
  return std::make_unique<LlamaTokenizer>(std::move(data));
}

}  // namespace octet::tokenizer_detail

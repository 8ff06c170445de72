// "gpt2" tokenizer: byte-level BPE (HF tokenizers' ByteLevel + BPE, as GPT-2 and SmolLM2).
//   - tokens are stored spelled in GPT-2's printable byte alphabet ("Ġ" = space); a token with
//     characters outside that alphabet (rare; e.g. some control tokens) stands for its own
//     UTF-8 bytes, as transformers' GGUF conversion respells it;
//   - text is cut by the pre-tokenizer that tokenizer.ggml.pre names (PreTokenizer: "smollm"
//     = each digit alone, then the GPT-2 regex), each piece's bytes become single-byte tokens
//     and are merged by tokenizer.ggml.merges rank (file order, MergeTable);
//   - no BOS unless tokenizer.ggml.add_bos_token says so; no prefix space.
// Decoding: each token's bytes, concatenated, then UTF-8 (HF's ByteLevel decoder).
#include <array>
#include <stdexcept>

#include "models/model_file_error.h"
#include "models/tokenizer_impl.h"
#include "models/tokenizer_json.h"
#include "models/tokenizer_pretokenize.h"
#include "models/unicode_utf8.h"

namespace octet::tokenizer_detail {

namespace {

/// The bytes a byte-level token text stands for: each character mapped back through
/// bytes_to_unicode, or the text's own UTF-8 when a character is outside that alphabet.
std::string unspell(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const int b = utf8::unicode_to_byte(utf8::decode_at(text, i));
    if (b < 0) return std::string(text);
    out.push_back(char(b));
    i += utf8::char_len(text, i);
  }
  return out;
}

class Gpt2Tokenizer final : public TokenizerBase {
 public:
  Gpt2Tokenizer(TokenizerData&& data, PreTokenizer pre)
      : TokenizerBase(std::move(data)), pre_(std::move(pre)) {
    const size_t n = data_.tokens.size();
    bytes_.resize(n);
    bytes_to_id_.reserve(n);
    for (size_t id = 0; id < n; ++id) {
      bytes_[id] = unspell(data_.tokens[id]);
      bytes_to_id_[bytes_[id]] = int32_t(id);  // last wins, as HF's vocab dict
    }
    for (int b = 0; b < 256; ++b) {
      const auto it = bytes_to_id_.find(std::string(1, char(b)));
      byte_ids_[size_t(b)] = it == bytes_to_id_.end() ? -1 : it->second;
    }
    for (size_t i = 0; i < data_.merges.size(); ++i) add_merge(i);
    data_.merges = {};  // not needed any more (the table holds ids)
  }

 private:
  void add_merge(size_t index) {
    const std::string& m = data_.merges[index];
    const size_t space = m.find(' ');
    if (space == std::string::npos || m.find(' ', space + 1) != std::string::npos) {
      throw ModelFileError(data_.path, one_line("tokenizer.ggml.merges[" + std::to_string(index) +
                                                "] is not 'left right': '" + m + "'"));
    }
    const std::string left = unspell(std::string_view(m).substr(0, space));
    const std::string right = unspell(std::string_view(m).substr(space + 1));
    const auto l = bytes_to_id_.find(left), r = bytes_to_id_.find(right),
               merged = bytes_to_id_.find(left + right);
    if (l == bytes_to_id_.end() || r == bytes_to_id_.end() || merged == bytes_to_id_.end()) {
      throw ModelFileError(data_.path, one_line("tokenizer.ggml.merges[" + std::to_string(index) +
                                                "] '" + m + "' uses a token not in the vocabulary"));
    }
    merges_.add(l->second, r->second, merged->second);
  }

  void encode_text(std::string_view text, bool /*at_text_start*/,
                   std::vector<int32_t>& out) const override {
    std::vector<int32_t> ids;
    for (std::string_view piece : pre_.split(text)) {
      ids.clear();
      for (char c : piece) {
        const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
        if (id >= 0) ids.push_back(id);  // a byte without a token is dropped (HF: no unk)
      }
      merges_.apply(ids);
      out.insert(out.end(), ids.begin(), ids.end());
    }
  }

  PreTokenizer pre_;
  std::unordered_map<std::string, int32_t> bytes_to_id_;
  std::array<int32_t, 256> byte_ids_{};  // the single-byte token of each byte, -1 when absent
  MergeTable merges_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_gpt2_tokenizer(TokenizerData data) {
  PreTokenizer pre = [&] {
    try {
      return PreTokenizer::for_pre(data.pre);
    } catch (const std::invalid_argument& e) {
      throw ModelFileError(data.path, one_line(e.what()));
    }
  }();
  return std::make_unique<Gpt2Tokenizer>(std::move(data), std::move(pre));
}

}  // namespace octet::tokenizer_detail

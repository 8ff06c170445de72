#pragma once
// Tokenizers read from GGUF metadata (tokenizer.ggml.*):
//   "llama": SentencePiece-style BPE over scores, byte fallback (<0xNN>), "▁" for spaces,
//            dummy-prefix space, as Hugging Face's LlamaTokenizerFast converted from the GGUF does.
//   "gpt2":  byte-level BPE with merges and a pre-tokenizer regex (PCRE2), as HF's
//            GPT2/ByteLevel pipeline does.
// Token ids are int32. Reference behaviour: Hugging Face `tokenizers`/`transformers` loading the
// same GGUF (scripts/make_tokenizer_golden.py).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace octet {

class GGUFFile;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// Build from GGUF metadata. Throws ModelFileError for a missing or unsupported
  /// tokenizer.ggml.model or malformed vocab arrays.
  static std::unique_ptr<Tokenizer> from_gguf(const GGUFFile& file);

  /// Text -> ids. add_special: prepend BOS when the model asks for it
  /// (tokenizer.ggml.add_bos_token). parse_special: match special/control token texts
  /// (e.g. "<|im_start|>") in the text as single tokens; otherwise they are plain text.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;

  /// Ids -> text. Byte tokens are joined before UTF-8 is formed; invalid UTF-8 becomes U+FFFD.
  /// skip_special drops control tokens (BOS, EOS, ...).
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special) const = 0;

  /// The raw bytes that token `id` stands for (after "▁"->" ", byte-level and <0xNN> mapping).
  virtual std::string token_bytes(int32_t id) const = 0;
  /// The vocabulary string as stored in the GGUF.
  virtual const std::string& token_text(int32_t id) const = 0;
  virtual bool is_special(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  virtual int32_t eos_id() const = 0;  // -1 when none
  virtual bool add_bos() const = 0;
};

/// Streaming decode for generation: push ids one at a time and get only complete UTF-8 text;
/// bytes of a character split across tokens are held back until it completes (never broken
/// UTF-8 between pieces). The concatenation of all pieces plus finish() equals
/// tokenizer.decode(all_ids, skip_special).
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special);
  /// Text that became complete with this token (may be empty).
  std::string push(int32_t id);
  /// Whatever is still held back (invalid bytes as U+FFFD).
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  std::string emitted_;  // text already returned
};

}  // namespace octet

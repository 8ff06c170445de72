#pragma once
// Tokenizers read from GGUF metadata (tokenizer.ggml.*):
//   "llama": SentencePiece-style BPE over scores, byte fallback (<0xNN>), "▁" for spaces,
//            dummy-prefix space, as Hugging Face's LlamaTokenizerFast converted from the GGUF does
//            (models/tokenizer_llama.cpp says where that differs from llama.cpp).
//   "gpt2":  byte-level BPE with merges and a pre-tokenizer regex (PCRE2) chosen by
//            tokenizer.ggml.pre ("smollm": digits split one by one, then the GPT-2 regex, as
//            SmolLM2's own tokenizer.json; transformers' GGUF conversion ignores that key).
// Token ids are int32. Reference behaviour: Hugging Face `tokenizers`/`transformers` loading the
// same GGUF (scripts/make_tokenizer_golden.py, tests/models/golden/tokenizer_*.json).
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
  /// tokenizer.ggml.model or .pre (gpt2), missing or empty tokens, arrays of the wrong type or
  /// length (scores, token_type), missing scores (llama) or merges (gpt2), or a merge that
  /// names a token not in the vocabulary. Special ids outside the vocabulary (llama.cpp writes
  /// 4294967295 for "none") read as -1. SmolLM2's 49152 tokens load in ~0.1 s.
  static std::unique_ptr<Tokenizer> from_gguf(const GGUFFile& file);

  /// Build from a Hugging Face model directory: tokenizer.json (model BPE with byte-level
  /// pre-tokenizer/decoder as GPT-2/Llama-3/SmolLM/Qwen use, or SentencePiece-style BPE with
  /// byte_fallback, Metaspace/Replace("▁") normalizer and decoders as Llama-2/TinyLlama/Mistral
  /// use; added_tokens as special tokens), tokenizer_config.json (bos_token, eos_token,
  /// add_bos_token, chat_template kept elsewhere), generation_config.json is not read here.
  /// Throws ModelFileError naming the file for a missing tokenizer.json or an unsupported
  /// model type / pipeline component.
  static std::unique_ptr<Tokenizer> from_hf_dir(const std::string& dir);

  /// Text -> ids. add_special: prepend BOS when the model asks for it
  /// (tokenizer.ggml.add_bos_token; "llama" files without the key: yes) and append EOS when
  /// tokenizer.ggml.add_eos_token says so. parse_special: match special/control token texts
  /// (e.g. "<|im_start|>", "<s>") in the text as single tokens; otherwise they are plain text.
  /// USER_DEFINED tokens are always matched (as llama.cpp and HF do). Invalid UTF-8 in `text`
  /// is replaced by U+FFFD first. Thread-safe (const, no shared mutable state).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;

  /// Ids -> text: the concatenated token_bytes() of the ids made valid UTF-8 (each maximal
  /// invalid byte sequence -> one U+FFFD, as Rust's from_utf8_lossy). skip_special drops
  /// special tokens (is_special: BOS, EOS, <unk>, <|im_start|>, ...). "llama" with the dummy
  /// prefix then drops one leading space (strips_leading_space()), as HF's Strip decoder.
  /// Throws std::out_of_range for an id outside [0, vocab_size()).
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special) const = 0;

  /// The raw bytes that token `id` stands for (after "▁"->" ", byte-level and <0xNN> mapping;
  /// a special token stands for its text). May be an incomplete UTF-8 sequence.
  virtual std::string token_bytes(int32_t id) const = 0;
  /// The vocabulary string as stored in the GGUF.
  virtual const std::string& token_text(int32_t id) const = 0;
  /// CONTROL and UNKNOWN tokens (tokenizer.ggml.token_type 3 and 2) and the BOS/EOS/UNK/PAD
  /// ids named in the file (as HF marks them).
  virtual bool is_special(int32_t id) const = 0;
  /// The id whose token_text() is `text`, or -1 (e.g. token_to_id("<|im_end|>")).
  virtual int32_t token_to_id(std::string_view text) const = 0;
  /// True when decode() drops one leading space of its text (SentencePiece dummy prefix).
  virtual bool strips_leading_space() const { return false; }

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  virtual int32_t eos_id() const = 0;  // -1 when none
  virtual bool add_bos() const = 0;
};

/// Streaming decode for generation: push ids one at a time and get only complete UTF-8 text;
/// bytes of a character split across tokens are held back until it completes (never broken
/// UTF-8 between pieces; an invalid sequence becomes U+FFFD as soon as it is known invalid).
/// The concatenation of all pieces plus finish() equals tokenizer.decode(all_ids, skip_special).
/// O(token bytes) per push. Not thread-safe; one per sequence.
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special);
  /// Continues after `context_ids` (e.g. the prompt), whose text is NOT emitted: the pieces
  /// then concatenate to decode(context + ids) minus the context's complete text. So the
  /// first generated "▁word" after a prompt keeps its space (decode() of the generated ids
  /// alone would strip it), and a character split between prompt and output is emitted whole
  /// with the output.
  StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special,
                       const std::vector<int32_t>& context_ids);
  /// Text that became complete with this token (may be empty). Throws std::out_of_range for
  /// an id outside the vocabulary.
  std::string push(int32_t id);
  /// Whatever is still held back (an incomplete character as U+FFFD); resets the held bytes.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool at_start_ = true;  // no byte seen yet: a leading space may still be stripped
  std::string pending_;   // bytes of an incomplete character, held back
};

}  // namespace octet

#pragma once
// Byte-level BPE pre-tokenizers: the text is cut by one or more PCRE2 regexes before BPE, each
// stage splitting every piece of the previous one ("isolated": matches and the gaps between
// them both become pieces), as HF tokenizers' Split/Digits/ByteLevel(use_regex) do.
// Regexes are written in HF's (Oniguruma) syntax; \s and \S are rewritten to the explicit
// Unicode White_Space set that Oniguruma uses (PCRE2's UCP \s also matches U+180E).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace octet::tokenizer_detail {

class RegexSplitter;

class PreTokenizer {
 public:
  /// The stages for tokenizer.ggml.pre (llama.cpp's names): "" / "default" / "gpt2": the GPT-2
  /// pattern; "smollm", "starcoder", ...: each digit alone, then GPT-2; "llama3" / "llama-bpe";
  /// "qwen2"; "gpt-4o"; "tekken". Throws std::invalid_argument for other names.
  static PreTokenizer for_pre(std::string_view pre);
  /// Stages from explicit patterns (tests).
  explicit PreTokenizer(const std::vector<std::string>& patterns);

  /// Pieces of `text` (valid UTF-8), views into it, in order; their concatenation is `text`.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  std::vector<std::shared_ptr<const RegexSplitter>> stages_;
};

/// Rewrites \s and \S (outside a class; \s also inside one) to the Unicode White_Space set, so
/// PCRE2 (UTF + UCP) matches what Oniguruma's Unicode \s matches.
std::string onig_to_pcre2(std::string_view pattern);

/// HF tokenizers' ByteLevel(use_regex=true) pattern (= OpenAI GPT-2), in Oniguruma syntax.
const char* byte_level_pattern();

}  // namespace octet::tokenizer_detail

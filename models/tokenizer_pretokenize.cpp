#define PCRE2_CODE_UNIT_WIDTH 8
#include "models/tokenizer_pretokenize.h"

#include <pcre2.h>

#include <stdexcept>

#include "models/unicode_utf8.h"

namespace octet::tokenizer_detail {

namespace {

// HF tokenizers' ByteLevel pattern (= OpenAI GPT-2).
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// HF Digits(individual_digits=True) = each numeric character alone (Rust char::is_numeric).
constexpr const char* kDigit = R"(\p{N})";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

/// One compiled pattern (UTF + UCP, JIT when available); matching is thread-safe.
class RegexSplitter {
 public:
  explicit RegexSplitter(const std::string& pattern) {
    const std::string p = onig_to_pcre2(pattern);
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                          PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(error, msg, sizeof msg);
      throw std::invalid_argument("bad pre-tokenizer regex at " + std::to_string(offset) + ": " +
                                  reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  }
  ~RegexSplitter() { pcre2_code_free(code_); }
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  /// Appends the pieces of `text`: each match and each non-empty gap between matches.
  void split(std::string_view text, pcre2_match_data* md,
             std::vector<std::string_view>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0, gap = 0;
    while (start < text.size()) {
      const int rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {  // e.g. PCRE2_ERROR_MATCHLIMIT: a backtracking pattern from the file
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        throw std::runtime_error(std::string("pre-tokenizer regex failed: ") +
                                 reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t begin = ov[0], end = ov[1];
      if (end == begin) {  // an empty match: step over one character
        start = begin + utf8::char_len(text, begin);
        continue;
      }
      if (begin > gap) out.push_back(text.substr(gap, begin - gap));
      out.push_back(text.substr(begin, end - begin));
      start = gap = end;
    }
    if (gap < text.size()) out.push_back(text.substr(gap));
  }

 private:
  pcre2_code* code_ = nullptr;
};

std::string onig_to_pcre2(std::string_view pattern) {
  // Unicode White_Space, which Oniguruma's \s matches. PCRE2's \s under UCP differs: it adds
  // U+180E (no longer a space since Unicode 6.3), and its exact set varies across versions.
  constexpr std::string_view kSpace =
      R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        if (in_class) {
          out += kSpace;
        } else {
          out += '[';
          out += kSpace;
          out += ']';
        }
      } else if (e == 'S' && !in_class) {
        out += "[^";
        out += kSpace;
        out += ']';
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) {
  for (const std::string& p : patterns) stages_.push_back(std::make_shared<RegexSplitter>(p));
}

PreTokenizer PreTokenizer::for_pre(std::string_view pre) {
  for (std::string_view name : {"", "default", "gpt2", "gpt-2", "mpt", "olmo", "jais"}) {
    if (pre == name) return PreTokenizer({kGpt2});
  }
  // llama.cpp: LLAMA_VOCAB_PRE_TYPE_SMOLLM and friends use "\p{N}" then the GPT-2 pattern;
  // SmolLM2's tokenizer.json: Digits(individual_digits=True) + ByteLevel(use_regex=True).
  for (std::string_view name :
       {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}) {
    if (pre == name) return PreTokenizer({kDigit, kGpt2});
  }
  for (std::string_view name : {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral",
                                "dbrx", "smaug-bpe"}) {
    if (pre == name) return PreTokenizer({kLlama3});
  }
  for (std::string_view name : {"qwen2", "deepseek-r1-qwen", "megrez"}) {
    if (pre == name) return PreTokenizer({kQwen2});
  }
  for (std::string_view name : {"gpt-4o", "llama4"}) {
    if (pre == name) return PreTokenizer({kGpt4o});
  }
  if (pre == "tekken") return PreTokenizer({kTekken});
  throw std::invalid_argument("unsupported tokenizer.ggml.pre '" + std::string(pre) + "'");
}

const char* byte_level_pattern() { return kGpt2; }

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces{text}, next;
  if (text.empty()) return {};
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  if (!md) throw std::bad_alloc();
  try {
    for (const auto& stage : stages_) {
      next.clear();
      for (std::string_view piece : pieces) stage->split(piece, md, next);
      pieces.swap(next);
    }
  } catch (...) {
    pcre2_match_data_free(md);
    throw;
  }
  pcre2_match_data_free(md);
  return pieces;
}

}  // namespace octet::tokenizer_detail

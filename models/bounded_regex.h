#pragma once
// BoundedRegex: a regular expression that comes from a model file (quantization_config "re:"
// entries), compiled once with PCRE2 under documented limits, so that a hostile pattern is an
// error in milliseconds instead of a stack overflow or an endless backtrack.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace octet {

/// A pattern that cannot be compiled, or a match that hit a limit. what() is the problem
/// (no file name: the caller adds it).
class RegexLimitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One compiled PCRE2 pattern (UTF + UCP, JIT when available). Immutable after construction;
/// matching is thread-safe. Limits (documented caps):
///  - pattern length <= kMaxPatternBytes, parentheses nested at most kMaxNesting deep
///    (pcre2_set_parens_nest_limit), checked when compiling;
///  - each match at most kMatchLimit backtracking steps (pcre2_set_match_limit), kDepthLimit
///    nested backtracking frames and kHeapLimitKiB KiB of backtracking memory.
class BoundedRegex {
 public:
  static constexpr size_t kMaxPatternBytes = 64 * 1024;
  static constexpr uint32_t kMaxNesting = 64;
  static constexpr uint32_t kMatchLimit = 1'000'000;
  static constexpr uint32_t kDepthLimit = 10'000;
  static constexpr uint32_t kHeapLimitKiB = 20 * 1024;

  /// Compiles `pattern` (Perl / Python `re` syntax). Throws RegexLimitError("invalid regex
  /// '<pattern>' at offset N: <PCRE2 message>") for a syntax error or a limit exceeded.
  explicit BoundedRegex(std::string_view pattern);
  ~BoundedRegex();
  BoundedRegex(const BoundedRegex&) = delete;
  BoundedRegex& operator=(const BoundedRegex&) = delete;

  /// Python's re.match: whether the pattern matches at the start of `subject` (anchored at the
  /// start only; the match need not reach the end). Throws RegexLimitError when a match limit is
  /// hit (never reports that as a non-match).
  bool match_prefix(std::string_view subject) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet

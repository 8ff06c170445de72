// Collects mismatches of a bulk comparison (millions of elements) so that a test makes one
// assertion and prints the first few offending inputs in hex, not millions of REQUIREs.
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <string>

namespace octet_test {

class MismatchLog {
 public:
  explicit MismatchLog(size_t keep = 12) : keep_(keep) {}

  /// Records one mismatch; printf-style description, kept only for the first `keep` calls.
  __attribute__((format(printf, 2, 3))) void add(const char* format, ...) {
    if (count_++ >= keep_) return;
    char line[256];
    va_list args;
    va_start(args, format);
    std::vsnprintf(line, sizeof line, format, args);
    va_end(args);
    text_ += line;
    text_ += '\n';
  }

  size_t count() const { return count_; }
  /// "N mismatches; first: ..." for INFO().
  std::string summary() const {
    return std::to_string(count_) + " mismatches" + (count_ ? "; first:\n" + text_ : "");
  }

 private:
  size_t keep_;
  size_t count_ = 0;
  std::string text_;
};

}  // namespace octet_test

// xgrammar's error text and log hooks (xgrammar_log.h).
#include "engine/xgrammar_log.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "support/logging.h"  // xgrammar's (cpp/support), built with XGRAMMAR_LOG_CUSTOMIZE=1

namespace octet {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

/// Length of LogFatalError's "[HH:MM:SS] <file>:<line>: " prefix at s[i], or 0.
size_t log_prefix_length(std::string_view s, size_t i) {
  constexpr std::string_view kShape = "[00:00:00] ";  // 0 = a digit
  if (s.size() - i < kShape.size()) return 0;
  for (size_t k = 0; k < kShape.size(); ++k)
    if (kShape[k] == '0' ? !is_digit(s[i + k]) : s[i + k] != kShape[k]) return 0;
  // <file>: no newline; then ":<digits>: ". Source paths are short: look 4096 bytes ahead.
  const size_t begin = i + kShape.size();
  const size_t end = std::min(s.size(), begin + 4096);
  for (size_t j = begin; j < end && s[j] != '\n'; ++j) {
    if (s[j] != ':' || j == begin) continue;
    size_t d = j + 1;
    while (d < s.size() && is_digit(s[d])) ++d;
    if (d > j + 1 && d < s.size() && s[d] == ':') {
      size_t after = d + 1;
      if (after < s.size() && s[after] == ' ') ++after;
      return after - i;
    }
  }
  return 0;
}

/// Length of "Check failed: (<cond>) is false: " (or "Internal check failed: ...") at s[i], or 0.
size_t check_prefix_length(std::string_view s, size_t i) {
  for (std::string_view head : {std::string_view("Check failed: ("),
                                std::string_view("Internal check failed: (")}) {
    if (s.substr(i, head.size()) != head) continue;
    constexpr std::string_view kTail = ") is false:";
    const size_t tail = s.find(kTail, i + head.size());
    const size_t line_end = s.find('\n', i);
    if (tail == std::string_view::npos || (line_end != std::string_view::npos && tail > line_end))
      return 0;
    size_t after = tail + kTail.size();
    if (after < s.size() && s[after] == ' ') ++after;
    return after - i;
  }
  return 0;
}

}  // namespace

std::string xgrammar_error_message(std::string_view what) {
  std::string out;
  out.reserve(std::min(what.size(), kMaxXgrammarMessageBytes + 8));
  for (size_t i = 0; i < what.size();) {
    if (const size_t n = log_prefix_length(what, i)) {
      i += n;
      continue;
    }
    if (const size_t n = check_prefix_length(what, i)) {
      i += n;
      continue;
    }
    out += what[i++];
  }
  const size_t first = out.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  out.erase(0, first);
  out.erase(out.find_last_not_of(" \t\r\n") + 1);
  if (out.size() > kMaxXgrammarMessageBytes) {
    size_t cut = kMaxXgrammarMessageBytes;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
    out += " ...";
  }
  return out;
}

}  // namespace octet

namespace xgrammar {

// The hooks XGRAMMAR_LOG_CUSTOMIZE=1 asks for (cpp/support/logging.h).
[[noreturn]] void LogFatalImpl(const std::string& file, int lineno, const std::string& message) {
  throw LogFatalError(file, lineno, message);  // as xgrammar's own; callers catch this type
}

void LogMessageImpl(const std::string& /*file*/, int /*lineno*/, int level,
                    const std::string& message) {
  if (level == XGRAMMAR_LOG_LEVEL_WARNING)
    spdlog::warn("xgrammar: {}", message);
  else
    spdlog::debug("xgrammar: {}", message);
}

}  // namespace xgrammar

// OCTET_CHECK: a broken invariant (a caller's bug, never bad user input) aborts the process with
// file, line, the condition and a message (STYLE.md: expected failures are exceptions instead).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace octet::detail {

[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const std::string& msg) {
  std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", file, line, cond, msg.c_str());
  std::fflush(stderr);
  std::abort();
}

template <class... Args>
std::string check_message(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}

}  // namespace octet::detail

/// OCTET_CHECK(cond, parts...): aborts with "file:line: check failed: cond: parts" when !cond.
/// The message parts are streamed with operator<< and evaluated only on failure.
#define OCTET_CHECK(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::octet::detail::check_failed(__FILE__, __LINE__, #cond,                              \
                                    ::octet::detail::check_message(__VA_ARGS__));           \
  } while (0)

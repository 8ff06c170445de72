#pragma once
// xgrammar's messages made octet's: its errors (XGRAMMAR_CHECK / LOG(FATAL) throw
// xgrammar::LogFatalError, whose what() reads "[HH:MM:SS] /path/to/cpp/file.cc:123: Check failed:
// (cond) is false: message") reduced to the human message for the 400s clients see, and its log
// lines (LOG(WARNING) / LOG(INFO), printed on stderr by default) routed to spdlog: octet builds
// xgrammar with XGRAMMAR_LOG_CUSTOMIZE=1 (cmake/xgrammar.cmake) and defines its two hooks,
// xgrammar::LogFatalImpl (throws LogFatalError, as xgrammar's own) and LogMessageImpl (spdlog:
// warnings at warn, info / debug lines at debug, "xgrammar: " + the message, without the source
// path), in xgrammar_log.cpp.
#include <cstddef>
#include <string>
#include <string_view>

namespace octet {

/// Longest xgrammar message kept in an error (bytes; longer ones are cut at a UTF-8 character
/// boundary and end with " ..."): xgrammar may echo the whole spec (up to 1 MiB) back.
inline constexpr size_t kMaxXgrammarMessageBytes = 1024;

/// The human part of an xgrammar error message: every "[HH:MM:SS] <file>:<line>: " prefix and
/// every "Check failed: (<condition>) is false: " / "Internal check failed: (...) is false: "
/// (xgrammar's source text) removed, surrounding whitespace trimmed, at most
/// kMaxXgrammarMessageBytes. Any other text is kept as it is.
std::string xgrammar_error_message(std::string_view what);

}  // namespace octet

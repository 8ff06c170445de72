#pragma once
// Bounded reading of files that come from outside (model files' JSON, chat templates, scales
// files, prompts files, datasets): a path such as /dev/zero or a FIFO never makes octet read
// without limit.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace octet {

/// A file that could not be read within its bound. what() is "<path>: <problem>".
class FileReadError : public std::runtime_error {
 public:
  FileReadError(const std::string& path, const std::string& problem)
      : std::runtime_error(path + ": " + problem), path_(path), problem_(problem) {}
  const std::string& path() const { return path_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string path_;
  std::string problem_;
};

/// Documented caps (bytes) for files octet reads whole into memory.
inline constexpr std::size_t kMaxJsonConfigBytes = std::size_t{64} << 20;   // config.json & co.
inline constexpr std::size_t kMaxTokenizerJsonBytes = std::size_t{128} << 20;  // Gemma 3: 33 MB
inline constexpr std::size_t kMaxChatTemplateBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMaxScalesFileBytes = std::size_t{16} << 20;
inline constexpr std::size_t kMaxPromptsFileBytes = std::size_t{64} << 20;
inline constexpr std::size_t kMaxDatasetFileBytes = std::size_t{1} << 30;   // ShareGPT: ~0.7 GB
/// Pipes and devices (no size known up front) are read up to at most this many bytes.
inline constexpr std::size_t kMaxStreamInputBytes = std::size_t{64} << 20;

/// Reads the whole file at `path`, at most `max_bytes` bytes (a pipe or device: at most
/// min(max_bytes, kMaxStreamInputBytes); a FIFO without a writer reads as empty, never waits).
/// Throws FileReadError when it cannot be opened, is a directory, fails to read, or holds more
/// than the limit (the message names it).
std::string read_file_bounded(const std::string& path, std::size_t max_bytes);

/// The deepest nesting of JSON arrays/objects in `text` (brackets inside strings not counted);
/// scanning stops once it exceeds `limit` (then limit + 1). O(text.size()), no allocation: the
/// depth check every reader of outside JSON runs before parsing.
int json_nesting_depth(std::string_view text, int limit);

}  // namespace octet

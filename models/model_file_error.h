#pragma once
// The one exception type for bad model files (GGUF, safetensors, config.json, tokenizer files).
#include <stdexcept>
#include <string>

namespace octet {

/// A model file that cannot be used: truncated, wrong magic, unsupported tensor type or
/// architecture, missing tensor, mismatched shape, malformed metadata. what() is
/// "<path>: <problem>" so that the user sees which file and what is wrong.
class ModelFileError : public std::runtime_error {
 public:
  ModelFileError(const std::string& path, const std::string& problem)
      : std::runtime_error(path + ": " + problem), path_(path), problem_(problem) {}
  const std::string& path() const { return path_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string path_;
  std::string problem_;
};

}  // namespace octet

#pragma once
// A read-only, private memory mapping of a whole model file (GGUF, safetensors).
#include <cstddef>
#include <cstdint>
#include <string>

namespace octet {

class MappedFile {
 public:
  /// Maps `path`. Throws ModelFileError(path, ...) when it cannot be opened ("cannot open:
  /// <errno text>"), is not a regular file (directories, FIFOs: opened non-blocking so a FIFO
  /// cannot hang), is empty ("empty file, not a <kind>"), or cannot be mapped.
  static MappedFile open(const std::string& path, const std::string& kind);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return static_cast<const uint8_t*>(map_); }
  uint64_t size() const { return bytes_; }  // bytes

 private:
  void* map_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace octet
